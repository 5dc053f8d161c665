// spd_linalg.h -- small dense symmetric linear algebra on thread-private
// arrays for spd.metal: row-major n×n matrices (runtime n, arrays sized by
// the caller), f32.
//
// spd_jacobi       eigendecomposition by cyclic Jacobi rotations (Numerical
//                  Recipes' rotation; a rotation is skipped when
//                  |a_pq| ≤ 6e-8 (|a_pp| + |a_qq|), the sweeps stop when
//                  one rotates nothing, at most 32)
// spd_eigh         the eigenpairs of sym(x)
// spd_apply        U f(Λ) Uᵀ for f = sqrt, 1/sqrt, log, exp (SPD_F_*)
// spd_dd           the divided difference of f: 1/sqrt in closed form
//                  −1 / (√a √b (√a + √b)) (no cancellation); log as
//                  log(a/b) / (a − b), or for |a/b − 1| < 0.1 the series
//                  of log1p(x)/x / b to x⁷ (error < 1e-9 relative)
// spd_frechet      the Daleckii–Krein derivative U (L ∘ Uᵀ sym(E) U) Uᵀ
//                  of X ↦ U f(Λ) Uᵀ (self-adjoint: also the gradient)
// spd_mm / spd_mmt a·b / a·bᵀ; spd_sym: (a + aᵀ) / 2 in place

#define SPD_F_SQRT 0u
#define SPD_F_INVSQRT 1u
#define SPD_F_LOG 2u
#define SPD_F_EXP 3u

// On entry m symmetric; on exit diag(m) = Λ, v = U (columns), m_in = U Λ Uᵀ.
static void spd_jacobi(thread float* m, thread float* v, uint n) {
    for (uint i = 0; i < n; ++i) {
        for (uint j = 0; j < n; ++j) {
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
}

static void spd_sym(thread float* a, uint n) {
    for (uint i = 0; i < n; ++i) {
        for (uint j = i + 1u; j < n; ++j) {
            float s = 0.5f * (a[i * n + j] + a[j * n + i]);
            a[i * n + j] = s;
            a[j * n + i] = s;
        }
    }
}

// out = a · b (out distinct from a and b).
static void spd_mm(thread const float* a, thread const float* b, thread float* out, uint n) {
    for (uint i = 0; i < n; ++i) {
        for (uint j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (uint k = 0; k < n; ++k) {
                acc += a[i * n + k] * b[k * n + j];
            }
            out[i * n + j] = acc;
        }
    }
}

// out = a · bᵀ (out distinct from a and b).
static void spd_mmt(thread const float* a, thread const float* b, thread float* out, uint n) {
    for (uint i = 0; i < n; ++i) {
        for (uint j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (uint k = 0; k < n; ++k) {
                acc += a[i * n + k] * b[j * n + k];
            }
            out[i * n + j] = acc;
        }
    }
}

// Eigenpairs of sym(x): lam, u; m is scratch.
static void spd_eigh(thread const float* x, thread float* lam, thread float* u, thread float* m, uint n) {
    for (uint i = 0; i < n; ++i) {
        for (uint j = 0; j < n; ++j) {
            m[i * n + j] = 0.5f * (x[i * n + j] + x[j * n + i]);
        }
    }
    spd_jacobi(m, u, n);
    for (uint i = 0; i < n; ++i) {
        lam[i] = m[i * n + i];
    }
}

static float spd_fn(uint f, float v) {
    switch (f) {
        case SPD_F_SQRT: return sqrt(v);
        case SPD_F_INVSQRT: return 1.0f / sqrt(v);
        case SPD_F_LOG: return log(v);
        default: return exp(v);
    }
}

// out = U f(Λ) Uᵀ.
static void spd_apply(thread const float* lam, thread const float* u, uint f, thread float* out, uint n) {
    float fl[16];
    for (uint k = 0; k < n; ++k) {
        fl[k] = spd_fn(f, lam[k]);
    }
    for (uint i = 0; i < n; ++i) {
        for (uint j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (uint k = 0; k < n; ++k) {
                acc += u[i * n + k] * fl[k] * u[j * n + k];
            }
            out[i * n + j] = acc;
        }
    }
}

// Divided difference of f (SPD_F_INVSQRT or SPD_F_LOG) at a, b > 0.
static float spd_dd(uint f, float a, float b) {
    if (f == SPD_F_INVSQRT) {
        float ra = sqrt(a), rb = sqrt(b);
        return -1.0f / (ra * rb * (ra + rb));
    }
    float d = a - b;
    float x = d / b;
    if (fabs(x) < 0.1f) {
        // log1p(x) / x = Σ (−x)^k / (k + 1)
        float s = 1.0f / 8.0f;
        s = 1.0f / 7.0f - x * s;
        s = 1.0f / 6.0f - x * s;
        s = 1.0f / 5.0f - x * s;
        s = 1.0f / 4.0f - x * s;
        s = 1.0f / 3.0f - x * s;
        s = 1.0f / 2.0f - x * s;
        s = 1.0f - x * s;
        return s / b;
    }
    return log(a / b) / d;
}

// out = U (L ∘ Uᵀ sym(e) U) Uᵀ, L_ij = spd_dd(f, λ_i, λ_j); t is scratch.
static void spd_frechet(thread const float* lam, thread const float* u, uint f,
                        thread const float* e, thread float* out, thread float* t, uint n) {
    // t = sym(e) U
    for (uint i = 0; i < n; ++i) {
        for (uint j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (uint k = 0; k < n; ++k) {
                acc += 0.5f * (e[i * n + k] + e[k * n + i]) * u[k * n + j];
            }
            t[i * n + j] = acc;
        }
    }
    // out = L ∘ (Uᵀ t)
    for (uint i = 0; i < n; ++i) {
        for (uint j = 0; j < n; ++j) {
            float acc = 0.0f;
            for (uint k = 0; k < n; ++k) {
                acc += u[k * n + i] * t[k * n + j];
            }
            out[i * n + j] = acc * spd_dd(f, lam[i], lam[j]);
        }
    }
    // t = U out, out = t Uᵀ
    spd_mm(u, out, t, n);
    spd_mmt(t, u, out, n);
}
