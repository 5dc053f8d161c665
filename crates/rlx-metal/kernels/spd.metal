// spd.metal -- SPD-manifold gradients (spd_backward thunks, SpdHost), f32:
// the Daleckii–Krein backward of the eigen-function layers re_eig
// (U max(Λ, eps) Uᵀ) and log_eig (U log(Λ) Uᵀ) of SPDNet, bi_map's
// gradient w.r.t. x, W dY Wᵀ, and the Karcher-mean gradients of
// karcher_mean and Riemannian batch_norm (spd_karcher_bwd_f32 /
// spd_bn_bwd_f32, described at their definitions below). Matrix helpers:
// spd_linalg.h.
//
// All kernels validate their operands as the host kernel does (finite
// values; x symmetric to SPD_SYM_TOL · max(1, max|x|), the host's f32
// tolerance; for log_eig positive definite, judged by the Jacobi
// eigenvalues) and mark an invalid matrix by a status tag instead of its
// gradient: word 0 of its output block gets SPD_TAG | code (a signalling
// NaN, which arithmetic never produces), word 1 (when n ≥ 2) the offending
// value. The plan's Check command after the dispatch reads the tags and
// fails the run naming the op (src/metal/check.rs, same codes).
//
// spd_eig_bwd_f32   SpdArgs; (1) x [batch, n, n] (2) dy [batch, n, n]
//   (3) dx [batch, n, n]. One thread per matrix (n ≤ SPD_MAX_N, the
//   matrices in thread-private arrays): sym(x) = U Λ Uᵀ by cyclic Jacobi
//   rotations (spd_jacobi, spd_linalg.h), then dx = U (L ∘ Uᵀ sym(dy) U) Uᵀ with
//   L_ij = (f(λ_i) − f(λ_j)) / (λ_i − λ_j), or (f'(λ_i) + f'(λ_j)) / 2 on
//   near-equal eigenvalues (log: within 1e-2 relative, where the mean
//   differs from the divided difference by < δ²/12; re_eig: within 1e-6,
//   only to avoid 0/0). log's divided difference is log(λ_i/λ_j)/(λ_i − λ_j).
//   kind 0 re_eig (f' = [λ > eps]), 1 log_eig. Operand indices of the
//   non-finite code: 0 x, 1 dy.
//
// spd_bimap_bwd_f32   SpdBiMapArgs; (1) x [batch, n, n] (validated only)
//   (2) w [n, m] (3) dy [batch, m, m] (4) dx [batch, n, n] = W dY Wᵀ (dy as
//   given, not symmetrised; x's gradient only: W's is composed from matmuls
//   by the autodiff rule). One threadgroup of SPD_BIMAP_THREADS per output
//   row (b, i), grid batch · n: r = W[i, :] dY_b (m ≤ SPD_BIMAP_MAX_M floats
//   in threadgroup memory), then dx[b, i, j] = Σ_l r_l W[j, l]; O(m) per
//   output element. Row 0's threadgroup first validates x_b, w and dy_b
//   (strided over its threads, reduced by thread 0); it owns the tag words.
//   Operand indices of the non-finite code: 0 x, 1 w, 2 dy.
#include <metal_stdlib>
#include "args.h"
using namespace metal;
#include "spd_linalg.h"

#define SPD_MAX_N 16
#define SPD_BIMAP_MAX_M 2048
#define SPD_BIMAP_THREADS 64
#define SPD_SYM_TOL 1e-5f
#define SPD_TAG 0x7FA5A000u
#define SPD_NON_FINITE 0x10u
#define SPD_NOT_SYM 0x20u
#define SPD_NOT_PD 0x30u

// Finite, by the exponent bits (immune to fast-math NaN / inf folding).
static inline bool spd_finite(float v) {
    return (as_type<uint>(v) & 0x7F800000u) != 0x7F800000u;
}

// Mark a matrix's output block (`words` long) invalid: tag, then detail.
static inline void spd_tag(device float* ob, uint words, uint code, float detail) {
    device uint* ow = (device uint*)ob;
    ow[0] = SPD_TAG | code;
    if (words >= 2u) {
        ow[1] = as_type<uint>(detail);
    }
}

static inline float spd_f(uint kind, float v, float eps) {
    return kind == 0u ? max(v, eps) : log(v);
}

static inline float spd_fp(uint kind, float v, float eps) {
    return kind == 0u ? (v > eps ? 1.0f : 0.0f) : 1.0f / v;
}

// Divided difference of f at (li, lj).
static inline float spd_l(uint kind, float li, float lj, float eps) {
    float dl = li - lj;
    float near = kind == 0u ? 1e-6f : 1e-2f;
    if (fabs(dl) <= near * max(1.0f, fabs(li))) {
        return 0.5f * (spd_fp(kind, li, eps) + spd_fp(kind, lj, eps));
    }
    if (kind == 1u) {
        return log(li / lj) / dl;
    }
    return (spd_f(kind, li, eps) - spd_f(kind, lj, eps)) / dl;
}

kernel void spd_eig_bwd_f32(constant SpdArgs&   a  [[buffer(0)]],
                            device const float* x  [[buffer(1)]],
                            device const float* dy [[buffer(2)]],
                            device float*       dx [[buffer(3)]],
                            uint gid [[thread_position_in_grid]])
{
    if (gid >= a.batch || a.n > SPD_MAX_N) {
        return;
    }
    const uint n = a.n;
    const ulong base = (ulong)gid * n * n;
    device const float* xb = x + base;
    device const float* db = dy + base;
    device float* ob = dx + base;
    float m[SPD_MAX_N * SPD_MAX_N];
    float v[SPD_MAX_N * SPD_MAX_N];
    float w[SPD_MAX_N * SPD_MAX_N];
    float lam[SPD_MAX_N];
    // validation: finite x and dy, x symmetric
    float amax = 1.0f, asym = 0.0f;
    for (uint e = 0; e < n * n; ++e) {
        if (!spd_finite(xb[e])) {
            spd_tag(ob, n * n, SPD_NON_FINITE | 0u, xb[e]);
            return;
        }
        if (!spd_finite(db[e])) {
            spd_tag(ob, n * n, SPD_NON_FINITE | 1u, db[e]);
            return;
        }
        amax = max(amax, fabs(xb[e]));
        asym = max(asym, fabs(xb[e] - xb[(e % n) * n + e / n]));
    }
    if (asym > SPD_SYM_TOL * amax) {
        spd_tag(ob, n * n, SPD_NOT_SYM, asym);
        return;
    }
    for (uint i = 0; i < n; ++i) {
        for (uint j = 0; j < n; ++j) {
            m[i * n + j] = 0.5f * (xb[i * n + j] + xb[j * n + i]);
        }
    }
    spd_jacobi(m, v, n);
    float lmin = m[0];
    for (uint i = 0; i < n; ++i) {
        lam[i] = m[i * n + i];
        lmin = min(lmin, lam[i]);
    }
    if (a.kind == 1u && !(lmin > 0.0f)) {
        spd_tag(ob, n * n, SPD_NOT_PD, lmin);
        return;
    }
    // w = sym(dy) U
    for (uint k = 0; k < n; ++k) {
        for (uint j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (uint l = 0; l < n; ++l) {
                acc += 0.5f * (db[k * n + l] + db[l * n + k]) * v[l * n + j];
            }
            w[k * n + j] = acc;
        }
    }
    // m = L ∘ (Uᵀ w)
    for (uint i = 0; i < n; ++i) {
        for (uint j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (uint k = 0; k < n; ++k) {
                acc += v[k * n + i] * w[k * n + j];
            }
            m[i * n + j] = acc * spd_l(a.kind, lam[i], lam[j], a.eps);
        }
    }
    // dx = U m Uᵀ
    for (uint i = 0; i < n; ++i) {
        for (uint l = 0; l < n; ++l) {
            float acc = 0.0f;
            for (uint j = 0; j < n; ++j) {
                acc += v[i * n + j] * m[j * n + l];
            }
            w[i * n + l] = acc;
        }
    }
    for (uint i = 0; i < n; ++i) {
        for (uint l = 0; l < n; ++l) {
            float acc = 0.0f;
            for (uint k = 0; k < n; ++k) {
                acc += w[i * n + k] * v[l * n + k];
            }
            ob[i * n + l] = acc;
        }
    }
}

kernel void spd_bimap_bwd_f32(constant SpdBiMapArgs& a  [[buffer(0)]],
                              device const float*   x  [[buffer(1)]],
                              device const float*   w  [[buffer(2)]],
                              device const float*   dy [[buffer(3)]],
                              device float*         dx [[buffer(4)]],
                              uint tg  [[threadgroup_position_in_grid]],
                              uint lid [[thread_position_in_threadgroup]])
{
    threadgroup float r[SPD_BIMAP_MAX_M];
    threadgroup float red_amax[SPD_BIMAP_THREADS];
    threadgroup float red_asym[SPD_BIMAP_THREADS];
    threadgroup uint red_bad[SPD_BIMAP_THREADS];
    threadgroup float red_val[SPD_BIMAP_THREADS];
    threadgroup uint ok;
    const uint n = a.n, m = a.m;
    if (n == 0u || m > SPD_BIMAP_MAX_M) {
        return;
    }
    const uint b = tg / n, i = tg % n;
    if (b >= a.batch) {
        return;
    }
    device const float* xb = x + (ulong)b * n * n;
    device const float* db = dy + (ulong)b * m * m;
    device float* ob = dx + (ulong)b * n * n;
    if (i == 0u) {
        // validate x_b, w, dy_b (bad: 1 + operand index of a non-finite value)
        float amax = 1.0f, asym = 0.0f, val = 0.0f;
        uint bad = 0u;
        for (uint e = lid; e < n * n; e += SPD_BIMAP_THREADS) {
            float v = xb[e];
            if (!spd_finite(v)) {
                bad = 1u;
                val = v;
                break;
            }
            amax = max(amax, fabs(v));
            asym = max(asym, fabs(v - xb[(e % n) * n + e / n]));
        }
        for (uint e = lid; bad == 0u && e < n * m; e += SPD_BIMAP_THREADS) {
            if (!spd_finite(w[e])) {
                bad = 2u;
                val = w[e];
            }
        }
        for (uint e = lid; bad == 0u && e < m * m; e += SPD_BIMAP_THREADS) {
            if (!spd_finite(db[e])) {
                bad = 3u;
                val = db[e];
            }
        }
        red_amax[lid] = amax;
        red_asym[lid] = asym;
        red_bad[lid] = bad;
        red_val[lid] = val;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (lid == 0u) {
            uint code = 0u;
            float detail = 0.0f;
            for (uint t = 0; t < SPD_BIMAP_THREADS; ++t) {
                amax = max(amax, red_amax[t]);
                asym = max(asym, red_asym[t]);
                // the lowest operand index wins, as the host checks in order
                if (red_bad[t] != 0u && (code == 0u || red_bad[t] - 1u < (code & 0xFu))) {
                    code = SPD_NON_FINITE | (red_bad[t] - 1u);
                    detail = red_val[t];
                }
            }
            if (code == 0u && asym > SPD_SYM_TOL * amax) {
                code = SPD_NOT_SYM;
                detail = asym;
            }
            if (code != 0u) {
                spd_tag(ob, n * n, code, detail);
            }
            ok = code == 0u ? 1u : 0u;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (ok == 0u) {
            return;
        }
    }
    // r = W[i, :] dY_b
    for (uint l = lid; l < m; l += SPD_BIMAP_THREADS) {
        float acc = 0.0f;
        for (uint k = 0; k < m; ++k) {
            acc += w[(ulong)i * m + k] * db[(ulong)k * m + l];
        }
        r[l] = acc;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    // dx[b, i, :] = r Wᵀ
    for (uint j = lid; j < n; j += SPD_BIMAP_THREADS) {
        float acc = 0.0f;
        for (uint l = 0; l < m; ++l) {
            acc += r[l] * w[(ulong)j * m + l];
        }
        ob[(ulong)i * n + j] = acc;
    }
}

// Karcher-mean family gradients (karcher_mean, batch_norm), one thread for
// the whole batch (the mean couples every matrix); n ≤ SPD_MEAN_MAX_N, so
// the implicit-function Jacobian (p = n(n+1)/2 symmetric coordinates) fits
// in thread-private memory.
#define SPD_MEAN_MAX_N 8
#define SPD_MEAN_MAX_P 36
#define SPD_MEAN_NN (SPD_MEAN_MAX_N * SPD_MEAN_MAX_N)
#define SPD_KARCHER_MAX_ITER 100
#define SPD_NOT_SOLVED 0x40u

// Load sym(x) of a device n×n matrix.
static void spd_load_sym(device const float* x, thread float* out, uint n) {
    for (uint i = 0; i < n; ++i) {
        for (uint j = 0; j < n; ++j) {
            out[i * n + j] = 0.5f * (x[i * n + j] + x[j * n + i]);
        }
    }
}

// Mark block `bad` of dx with `code` / `detail`, clear every other block's
// tag word (a stale tag of an earlier run must not be reported).
static void spd_mean_fail(device float* dx, uint batch, uint n, uint bad, uint code, float detail) {
    device uint* dw = (device uint*)dx;
    for (uint b = 0; b < batch; ++b) {
        dw[(ulong)b * n * n] = 0u;
    }
    spd_tag(dx + (ulong)bad * n * n, n * n, code, detail);
}

// Validate like the host: non-finite values (x, then operand 1, then
// operand 2), x_b symmetric, x_b positive definite, then for batch norm the
// bias (operand 1) symmetric and positive definite. False after tagging.
static bool spd_mean_check(device const float* x, device const float* op1, uint len1,
                           device const float* op2, uint len2, bool bias, uint batch, uint n,
                           device float* dx) {
    const uint nn = n * n;
    for (uint b = 0; b < batch; ++b) {
        for (uint e = 0; e < nn; ++e) {
            float v = x[(ulong)b * nn + e];
            if (!spd_finite(v)) {
                spd_mean_fail(dx, batch, n, b, SPD_NON_FINITE | 0u, v);
                return false;
            }
        }
    }
    for (uint e = 0; e < len1; ++e) {
        if (!spd_finite(op1[e])) {
            spd_mean_fail(dx, batch, n, 0u, SPD_NON_FINITE | 1u, op1[e]);
            return false;
        }
    }
    for (uint e = 0; e < len2; ++e) {
        if (!spd_finite(op2[e])) {
            spd_mean_fail(dx, batch, n, e / nn, SPD_NON_FINITE | 2u, op2[e]);
            return false;
        }
    }
    float m[SPD_MEAN_NN], u[SPD_MEAN_NN], xs[SPD_MEAN_NN], lam[SPD_MEAN_MAX_N];
    // symmetry of every x_b, then definiteness of every x_b, then the bias
    for (uint pass = 0; pass < (bias ? 4u : 2u); ++pass) {
        const bool of_bias = pass >= 2u;
        for (uint b = 0; b < (of_bias ? 1u : batch); ++b) {
            device const float* xb = of_bias ? op1 : x + (ulong)b * nn;
            const uint who = of_bias ? 1u : 0u;
            if (pass % 2u == 0u) {
                float amax = 1.0f, asym = 0.0f;
                for (uint e = 0; e < nn; ++e) {
                    amax = max(amax, fabs(xb[e]));
                    asym = max(asym, fabs(xb[e] - xb[(e % n) * n + e / n]));
                }
                if (asym > SPD_SYM_TOL * amax) {
                    spd_mean_fail(dx, batch, n, b, SPD_NOT_SYM | who, asym);
                    return false;
                }
            } else {
                spd_load_sym(xb, xs, n);
                spd_eigh(xs, lam, u, m, n);
                float lmin = lam[0];
                for (uint k = 1; k < n; ++k) {
                    lmin = min(lmin, lam[k]);
                }
                if (!(lmin > 0.0f)) {
                    spd_mean_fail(dx, batch, n, b, SPD_NOT_PD | who, lmin);
                    return false;
                }
            }
        }
    }
    return true;
}

// The Karcher mean g of sym(x_b): from the arithmetic mean, g ←
// g^½ exp(mean_b log(g^-½ x_b g^-½)) g^½ until ‖mean log‖_F < tol (at most
// SPD_KARCHER_MAX_ITER steps), as the host; also once ‖mean log‖ stops
// shrinking (the fixed-point map contracts, so that only happens at f32
// round-off, where a tiny tol would otherwise run all the steps).
static void spd_karcher(device const float* x, uint batch, uint n, float tol, thread float* g) {
    const uint nn = n * n;
    float lam[SPD_MEAN_MAX_N], u[SPD_MEAN_NN], m[SPD_MEAN_NN], gh[SPD_MEAN_NN], gih[SPD_MEAN_NN];
    float step[SPD_MEAN_NN], xb[SPD_MEAN_NN], t[SPD_MEAN_NN], y[SPD_MEAN_NN];
    for (uint e = 0; e < nn; ++e) {
        g[e] = 0.0f;
    }
    for (uint b = 0; b < batch; ++b) {
        spd_load_sym(x + (ulong)b * nn, xb, n);
        for (uint e = 0; e < nn; ++e) {
            g[e] += xb[e];
        }
    }
    for (uint e = 0; e < nn; ++e) {
        g[e] /= float(batch);
    }
    float prev = 3.0e38f;
    for (uint it = 0; it < SPD_KARCHER_MAX_ITER; ++it) {
        spd_eigh(g, lam, u, m, n);
        spd_apply(lam, u, SPD_F_SQRT, gh, n);
        spd_apply(lam, u, SPD_F_INVSQRT, gih, n);
        for (uint e = 0; e < nn; ++e) {
            step[e] = 0.0f;
        }
        for (uint b = 0; b < batch; ++b) {
            spd_load_sym(x + (ulong)b * nn, xb, n);
            spd_mm(gih, xb, t, n);
            spd_mm(t, gih, y, n);
            spd_eigh(y, lam, u, m, n);
            spd_apply(lam, u, SPD_F_LOG, t, n);
            for (uint e = 0; e < nn; ++e) {
                step[e] += t[e];
            }
        }
        float norm = 0.0f;
        for (uint e = 0; e < nn; ++e) {
            step[e] /= float(batch);
            norm += step[e] * step[e];
        }
        spd_eigh(step, lam, u, m, n);
        spd_apply(lam, u, SPD_F_EXP, t, n);
        spd_mm(gh, t, y, n);
        spd_mm(y, gh, g, n);
        spd_sym(g, n);
        // converged, or at the f32 noise floor (the step stopped shrinking)
        if (sqrt(norm) < tol || norm >= prev) {
            break;
        }
        prev = norm;
    }
}

// Solve a x = r (p×p, row-major, overwritten) by Gaussian elimination with
// partial pivoting; false on a zero pivot.
static bool spd_solve(thread float* a, thread float* r, uint p) {
    for (uint c = 0; c < p; ++c) {
        uint piv = c;
        for (uint i = c + 1u; i < p; ++i) {
            if (fabs(a[i * p + c]) > fabs(a[piv * p + c])) {
                piv = i;
            }
        }
        if (!(a[piv * p + c] != 0.0f)) {
            return false;
        }
        if (piv != c) {
            for (uint j = 0; j < p; ++j) {
                float s = a[c * p + j];
                a[c * p + j] = a[piv * p + j];
                a[piv * p + j] = s;
            }
            float s = r[c];
            r[c] = r[piv];
            r[piv] = s;
        }
        for (uint i = c + 1u; i < p; ++i) {
            float f = a[i * p + c] / a[c * p + c];
            for (uint j = c; j < p; ++j) {
                a[i * p + j] -= f * a[c * p + j];
            }
            r[i] -= f * r[c];
        }
    }
    for (uint c = p; c-- > 0u;) {
        float acc = r[c];
        for (uint j = c + 1u; j < p; ++j) {
            acc -= a[c * p + j] * r[j];
        }
        r[c] = acc / a[c * p + c];
    }
    return true;
}

// Row-major index pairs (i ≤ j) of symmetric coordinate k.
static void spd_coord(uint k, uint n, thread uint& i, thread uint& j) {
    i = 0;
    while (k >= n - i) {
        k -= n - i;
        ++i;
    }
    j = i + k;
}

// Gradient of ⟨cot, G(X)⟩ for the Karcher mean G = g of sym(x_b), added to
// dx (as the host's karcher_mean_vjp): the implicit-function system
// (∂F/∂G)ᵀ v = w on the symmetric coordinates, F = Σ_b log(S x_b S),
// S = g^-½, assembled column by column, then dx_b −= sym(S Dlog(Y_b)[V] S),
// V the symmetric matrix of v (off-diagonal halved), Y_b = sym(S x_b S).
static bool spd_karcher_vjp(device const float* x, uint batch, uint n, thread const float* g,
                            thread const float* cot, device float* dx) {
    const uint nn = n * n, p = n * (n + 1u) / 2u;
    float jg[SPD_MEAN_MAX_P * SPD_MEAN_MAX_P], w[SPD_MEAN_MAX_P];
    float lamg[SPD_MEAN_MAX_N], ug[SPD_MEAN_NN], s[SPD_MEAN_NN], m[SPD_MEAN_NN];
    float lamy[SPD_MEAN_MAX_N], uy[SPD_MEAN_NN], xb[SPD_MEAN_NN], sx[SPD_MEAN_NN];
    float xs[SPD_MEAN_NN], e[SPD_MEAN_NN], ds[SPD_MEAN_NN], t[SPD_MEAN_NN], y[SPD_MEAN_NN];
    spd_eigh(g, lamg, ug, m, n);
    spd_apply(lamg, ug, SPD_F_INVSQRT, s, n);
    for (uint k = 0; k < p * p; ++k) {
        jg[k] = 0.0f;
    }
    for (uint k = 0; k < p; ++k) {
        uint i, j;
        spd_coord(k, n, i, j);
        w[k] = i == j ? cot[i * n + i] : cot[i * n + j] + cot[j * n + i];
    }
    for (uint b = 0; b < batch; ++b) {
        spd_load_sym(x + (ulong)b * nn, xb, n);
        spd_mm(s, xb, sx, n);
        spd_mm(xb, s, xs, n);
        spd_mm(sx, s, y, n);
        spd_eigh(y, lamy, uy, m, n);
        for (uint k = 0; k < p; ++k) {
            uint i, j;
            spd_coord(k, n, i, j);
            for (uint q = 0; q < nn; ++q) {
                e[q] = 0.0f;
            }
            e[i * n + j] = 1.0f;
            e[j * n + i] = 1.0f;
            spd_frechet(lamg, ug, SPD_F_INVSQRT, e, ds, t, n);
            // dY = ds x S + S x ds
            spd_mm(ds, xs, y, n);
            spd_mm(sx, ds, e, n);
            for (uint q = 0; q < nn; ++q) {
                e[q] += y[q];
            }
            spd_frechet(lamy, uy, SPD_F_LOG, e, y, t, n);
            for (uint o = 0; o < p; ++o) {
                uint oi, oj;
                spd_coord(o, n, oi, oj);
                // A = (∂F/∂G)ᵀ: row k, column o
                jg[k * p + o] += y[oi * n + oj];
            }
        }
    }
    if (!spd_solve(jg, w, p)) {
        return false;
    }
    for (uint k = 0; k < p; ++k) {
        uint i, j;
        spd_coord(k, n, i, j);
        e[i * n + j] = i == j ? w[k] : 0.5f * w[k];
        e[j * n + i] = e[i * n + j];
    }
    for (uint b = 0; b < batch; ++b) {
        spd_load_sym(x + (ulong)b * nn, xb, n);
        spd_mm(s, xb, sx, n);
        spd_mm(sx, s, y, n);
        spd_eigh(y, lamy, uy, m, n);
        spd_frechet(lamy, uy, SPD_F_LOG, e, ds, t, n);
        spd_mm(s, ds, t, n);
        spd_mm(t, s, y, n);
        device float* ob = dx + (ulong)b * nn;
        for (uint i = 0; i < n; ++i) {
            for (uint j = 0; j < n; ++j) {
                ob[i * n + j] -= 0.5f * (y[i * n + j] + y[j * n + i]);
            }
        }
    }
    return true;
}

// spd_karcher_bwd_f32   SpdArgs (kind 2); (1) x [batch, n, n] (2) dy [n, n]
//   (3) dx [batch, n, n]. One thread. Operand indices of the non-finite
//   code: 0 x, 1 dy; SPD_NOT_SOLVED when the Jacobian is singular.
kernel void spd_karcher_bwd_f32(constant SpdArgs&   a  [[buffer(0)]],
                                device const float* x  [[buffer(1)]],
                                device const float* dy [[buffer(2)]],
                                device float*       dx [[buffer(3)]],
                                uint gid [[thread_position_in_grid]])
{
    const uint n = a.n, nn = n * n;
    if (gid != 0u || n == 0u || n > SPD_MEAN_MAX_N || a.batch == 0u) {
        return;
    }
    if (!spd_mean_check(x, dy, nn, dy, 0u, false, a.batch, n, dx)) {
        return;
    }
    float g[SPD_MEAN_NN], cot[SPD_MEAN_NN];
    spd_karcher(x, a.batch, n, a.eps > 0.0f ? a.eps : 1e-12f, g);
    for (uint e = 0; e < nn; ++e) {
        cot[e] = 0.5f * (dy[e] + dy[(e % n) * n + e / n]);
    }
    for (ulong e = 0; e < (ulong)a.batch * nn; ++e) {
        dx[e] = 0.0f;
    }
    if (!spd_karcher_vjp(x, a.batch, n, g, cot, dx)) {
        spd_mean_fail(dx, a.batch, n, 0u, SPD_NOT_SOLVED, 0.0f);
    }
}

// spd_bn_bwd_f32   SpdArgs (kind 3); (1) x [batch, n, n] (2) bias [n, n]
//   (3) dy [batch, n, n] (4) dx [batch, n, n]. One thread: Y_b =
//   sym(B^½ S x_b S B^½), S = G^-½; dx_b = sym(S Z_b S) + the Karcher
//   gradient for the cotangent D(·)^-½(G)[Σ_b Z_b S x_b + x_b S Z_b],
//   Z_b = B^½ sym(dy_b) B^½ (the bias held fixed), as the host's
//   batch_norm_vjp. Operand indices: 0 x, 1 bias, 2 dy.
kernel void spd_bn_bwd_f32(constant SpdArgs&   a    [[buffer(0)]],
                           device const float* x    [[buffer(1)]],
                           device const float* bias [[buffer(2)]],
                           device const float* dy   [[buffer(3)]],
                           device float*       dx   [[buffer(4)]],
                           uint gid [[thread_position_in_grid]])
{
    const uint n = a.n, nn = n * n;
    if (gid != 0u || n == 0u || n > SPD_MEAN_MAX_N || a.batch == 0u) {
        return;
    }
    if (!spd_mean_check(x, bias, nn, dy, a.batch * nn, true, a.batch, n, dx)) {
        return;
    }
    float g[SPD_MEAN_NN], lam[SPD_MEAN_MAX_N], u[SPD_MEAN_NN], m[SPD_MEAN_NN];
    float s[SPD_MEAN_NN], bh[SPD_MEAN_NN], z[SPD_MEAN_NN], t[SPD_MEAN_NN];
    float xb[SPD_MEAN_NN], ws[SPD_MEAN_NN], cot[SPD_MEAN_NN];
    spd_karcher(x, a.batch, n, a.eps > 0.0f ? a.eps : 1e-12f, g);
    spd_eigh(g, lam, u, m, n);
    spd_apply(lam, u, SPD_F_INVSQRT, s, n);
    for (uint e = 0; e < nn; ++e) {
        xb[e] = bias[e];
        ws[e] = 0.0f;
    }
    spd_eigh(xb, lam, u, m, n);
    spd_apply(lam, u, SPD_F_SQRT, bh, n);
    for (uint b = 0; b < a.batch; ++b) {
        // z = B^½ sym(dy_b) B^½; dx_b = sym(S z S); ws += z S x_b + x_b S z
        spd_load_sym(dy + (ulong)b * nn, t, n);
        spd_mm(bh, t, m, n);
        spd_mm(m, bh, z, n);
        spd_mm(s, z, t, n);
        spd_mm(t, s, m, n);
        device float* ob = dx + (ulong)b * nn;
        for (uint i = 0; i < n; ++i) {
            for (uint j = 0; j < n; ++j) {
                ob[i * n + j] = 0.5f * (m[i * n + j] + m[j * n + i]);
            }
        }
        spd_load_sym(x + (ulong)b * nn, xb, n);
        spd_mm(z, s, t, n);
        spd_mm(t, xb, m, n);
        for (uint e = 0; e < nn; ++e) {
            ws[e] += m[e] + m[(e % n) * n + e / n];
        }
    }
    spd_eigh(g, lam, u, m, n);
    spd_frechet(lam, u, SPD_F_INVSQRT, ws, cot, t, n);
    spd_sym(cot, n);
    if (!spd_karcher_vjp(x, a.batch, n, g, cot, dx)) {
        spd_mean_fail(dx, a.batch, n, 0u, SPD_NOT_SOLVED, 0.0f);
    }
}
