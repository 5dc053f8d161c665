// spd.metal -- SPD-manifold gradients (spd_backward thunks, SpdHost), f32:
// the Daleckii–Krein backward of the eigen-function layers re_eig
// (U max(Λ, eps) Uᵀ) and log_eig (U log(Λ) Uᵀ) of SPDNet, and bi_map's
// gradient w.r.t. x, W dY Wᵀ.
//
// Both kernels validate their operands as the host kernel does (finite
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
//   rotations (Numerical Recipes' rotation; a rotation is skipped when
//   |a_pq| ≤ 6e-8 (|a_pp| + |a_qq|), the sweeps stop when one rotates
//   nothing, at most 32), then dx = U (L ∘ Uᵀ sym(dy) U) Uᵀ with
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
            v[i * n + j] = i == j ? 1.0f : 0.0f;
        }
    }
    for (uint sweep = 0; sweep < 32u; ++sweep) {
        bool rotated = false;
        for (uint p = 0; p + 1u < n; ++p) {
            for (uint q = p + 1u; q < n; ++q) {
                float apq = m[p * n + q];
                float app = m[p * n + p], aqq = m[q * n + q];
                if (fabs(apq) <= 6e-8f * (fabs(app) + fabs(aqq))) {
                    continue;
                }
                rotated = true;
                float theta = (aqq - app) / (2.0f * apq);
                float t = (theta >= 0.0f ? 1.0f : -1.0f) / (fabs(theta) + sqrt(theta * theta + 1.0f));
                float c = rsqrt(t * t + 1.0f), s = t * c;
                for (uint k = 0; k < n; ++k) {
                    float mkp = m[k * n + p], mkq = m[k * n + q];
                    m[k * n + p] = c * mkp - s * mkq;
                    m[k * n + q] = s * mkp + c * mkq;
                }
                for (uint k = 0; k < n; ++k) {
                    float mpk = m[p * n + k], mqk = m[q * n + k];
                    m[p * n + k] = c * mpk - s * mqk;
                    m[q * n + k] = s * mpk + c * mqk;
                }
                for (uint k = 0; k < n; ++k) {
                    float vkp = v[k * n + p], vkq = v[k * n + q];
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
        }
        if (!rotated) {
            break;
        }
    }
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
