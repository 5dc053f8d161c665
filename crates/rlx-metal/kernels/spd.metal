// spd.metal -- SPD-manifold gradients: the Daleckii–Krein backward of the
// eigen-function layers re_eig (U max(Λ, eps) Uᵀ) and log_eig (U log(Λ) Uᵀ)
// of SPDNet (spd_backward thunks, SpdHost), f32.
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
//   kind 0 re_eig (f' = [λ > eps]), 1 log_eig. Inputs are not validated
//   (the host kernel reports non-symmetric / non-PD operands; here a
//   non-positive eigenvalue under log gives NaN).
#include <metal_stdlib>
#include "args.h"
using namespace metal;

#define SPD_MAX_N 16

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
    for (uint i = 0; i < n; ++i) {
        lam[i] = m[i * n + i];
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
