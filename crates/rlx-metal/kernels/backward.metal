// backward.metal -- training gradients, f32 (adaLN / gated residual also f16).
// (MaxPool2dBackward runs vision.metal's max_pool2d_backward.)
//
// Every kernel is a 1-D grid of threads that each own one output element
// or one output row and gather what they need (no atomics, no scratch), so
// a thunk is exactly one dispatch. Formulas: python/rlx/reference/backward.py.
// The gather form recomputes forward statistics per thread (O(extra) work
// noted per kernel); it is the correctness baseline, sized for fine-tuning
// heads and tests, not a tuned training kernel.
//
// attention_bwd_f32       AttnBwdArgs; (1) q (2) k (3) v (4) dy (5) mask (6) out.
//   One thread per output row (b, h, pos) of head_dim. wrt 0 (dq): one
//   pass over the keys for max / sum, one for Σ P·dP, one accumulating.
//   wrt 1 / 2 (dk / dv): loops over every query row, recomputing that row's
//   softmax statistics (O(s·kv) per thread).
// rms_norm_bwd_f32        RmsBwdArgs; (1) x (2) gamma (3) dy (4) out.
//   wrt 0: one thread per row; wrt 1 / 2: one thread per column summing
//   over rows (wrt 1 recomputes each row's rstd: O(rows·h) per thread).
// rope_bwd_f32            RopeBwdArgs; (1) dy (2) cos (3) sin (4) dx; one
//   thread per element (NeoX pairs (i, i + n_rot/2)).
// cumsum_bwd_f32          CumsumBwdArgs; (1) dy (2) dx; one thread per row.
// gather_bwd_f32          GatherBwdArgs; (1) dy (2) idx i32 (3) dst; one
//   thread per dst element, scanning the indices.
// conv2d_bwd_input_f32    Window2dArgs; (1) dy (2) w (3) dx; one thread per dx.
// conv2d_bwd_weight_f32   Window2dArgs; (1) x (2) dy (3) dw; one thread per dw.
// ada_ln_bwd_{f32,f16}    ModBwdArgs; (1) x (2) scale (3) dy (4) out packed
//   [dx ∥ dscale ∥ dshift]: threads < rows write a dx row, the next
//   mod_rows·h threads one (m, c) column sum each.
// gated_residual_bwd_{f32,f16} ModBwdArgs; (1) y (2) gate (3) dy (4) out
//   packed [dx ∥ dy ∥ dgate]: one thread per packed element.
// log_mel_bwd_f32         LogMelArgs; (1) spec (2) filters (3) dy (4) dst;
//   one thread per dst element (O(n_mels·n_bins) per thread).
// softmax_ce_bwd_f32      SceArgs; (1) logits (2) labels (3) d_loss (4)
//   dlogits; one thread per row (labels outside [0, c): zero row).
// softmax_ce_labels_f32   SceArgs; (1) logits (2) labels (3) loss; one
//   thread per row: logsumexp − logit[label] (NaN for a label out of range).
// softmax_ce_dense_f32    SceArgs; (1) logits (2) targets [n, c] (3) loss;
//   one thread per row: −Σ_k t_k·(z_k − logsumexp(z)) (soft labels).
#include <metal_stdlib>
#include "args.h"
#include "args_backward.h"
using namespace metal;

// ------------------------------------------------------------- attention

static inline uint rlx_attn_at(constant AttnBwdArgs& a, uint b, uint h, uint pos, uint len) {
    return a.bhsd != 0u ? ((b * a.heads + h) * len + pos) * a.head_dim
                        : ((b * len + pos) * a.heads + h) * a.head_dim;
}

static inline float rlx_attn_mask(constant AttnBwdArgs& a, device const float* m,
                                  uint b, uint h, uint i, uint j) {
    int abs_i = int(a.kv_seq) - int(a.seq) + int(i);
    int jj = int(j);
    bool keep = true;
    if (a.mask_kind == 1u) {
        keep = jj <= abs_i;
    } else if (a.mask_kind == 4u) {
        keep = jj <= abs_i && abs_i - jj <= int(a.window);
    } else if (a.mask_kind == 2u) {
        keep = m[(b * a.seq + i) * a.kv_seq + j] != 0.0f;
    } else if (a.mask_kind == 3u) {
        return m[((b * a.heads + h) * a.seq + i) * a.kv_seq + j];
    }
    return keep ? 0.0f : -INFINITY;
}

static inline float rlx_dot(device const float* x, device const float* y, uint n) {
    float s = 0.0f;
    for (uint t = 0; t < n; ++t) {
        s += x[t] * y[t];
    }
    return s;
}

// Row statistics of query i: max score, softmax denominator and Σ_j P·dP.
struct RlxAttnRow {
    float mx;
    float den;
    float pdp;
};

static inline RlxAttnRow rlx_attn_row(constant AttnBwdArgs& a, device const float* q,
                                      device const float* k, device const float* v,
                                      device const float* dy, device const float* m,
                                      uint b, uint h, uint i, float scale) {
    RlxAttnRow r = {-INFINITY, 0.0f, 0.0f};
    uint d = a.head_dim;
    device const float* qi = q + rlx_attn_at(a, b, h, i, a.seq);
    device const float* dyi = dy + rlx_attn_at(a, b, h, i, a.seq);
    for (uint j = 0; j < a.kv_seq; ++j) {
        float s = rlx_dot(qi, k + rlx_attn_at(a, b, h, j, a.kv_seq), d) * scale
                + rlx_attn_mask(a, m, b, h, i, j);
        if (s > r.mx) {
            r.den = r.den * exp(r.mx - s) + 1.0f;
            r.mx = s;
        } else if (s > -INFINITY) {
            r.den += exp(s - r.mx);
        }
    }
    if (r.mx == -INFINITY) {
        return r;
    }
    for (uint j = 0; j < a.kv_seq; ++j) {
        float s = rlx_dot(qi, k + rlx_attn_at(a, b, h, j, a.kv_seq), d) * scale
                + rlx_attn_mask(a, m, b, h, i, j);
        float p = exp(s - r.mx) / r.den;
        r.pdp += p * rlx_dot(dyi, v + rlx_attn_at(a, b, h, j, a.kv_seq), d);
    }
    return r;
}

kernel void attention_bwd_f32(constant AttnBwdArgs& a   [[buffer(0)]],
                              device const float*   q   [[buffer(1)]],
                              device const float*   k   [[buffer(2)]],
                              device const float*   v   [[buffer(3)]],
                              device const float*   dy  [[buffer(4)]],
                              device const float*   m   [[buffer(5)]],
                              device float*         out [[buffer(6)]],
                              uint gid [[thread_position_in_grid]])
{
    uint len = a.wrt == 0u ? a.seq : a.kv_seq;
    if (gid >= a.batch * a.heads * len) {
        return;
    }
    uint d = a.head_dim;
    uint pos = gid % len;
    uint h = (gid / len) % a.heads;
    uint b = gid / (len * a.heads);
    float scale = a.scale;
    device float* o = out + rlx_attn_at(a, b, h, pos, len);
    for (uint t = 0; t < d; ++t) {
        o[t] = 0.0f;
    }
    if (a.wrt == 0u) {
        RlxAttnRow r = rlx_attn_row(a, q, k, v, dy, m, b, h, pos, scale);
        if (r.mx == -INFINITY) {
            return;
        }
        device const float* qi = q + rlx_attn_at(a, b, h, pos, a.seq);
        device const float* dyi = dy + rlx_attn_at(a, b, h, pos, a.seq);
        for (uint j = 0; j < a.kv_seq; ++j) {
            device const float* kj = k + rlx_attn_at(a, b, h, j, a.kv_seq);
            float s = rlx_dot(qi, kj, d) * scale + rlx_attn_mask(a, m, b, h, pos, j);
            float p = exp(s - r.mx) / r.den;
            float ds = p * (rlx_dot(dyi, v + rlx_attn_at(a, b, h, j, a.kv_seq), d) - r.pdp) * scale;
            for (uint t = 0; t < d; ++t) {
                o[t] += ds * kj[t];
            }
        }
        return;
    }
    // dk / dv of key j: every query row contributes
    device const float* kj = k + rlx_attn_at(a, b, h, pos, a.kv_seq);
    device const float* vj = v + rlx_attn_at(a, b, h, pos, a.kv_seq);
    for (uint i = 0; i < a.seq; ++i) {
        RlxAttnRow r = rlx_attn_row(a, q, k, v, dy, m, b, h, i, scale);
        if (r.mx == -INFINITY) {
            continue;
        }
        device const float* qi = q + rlx_attn_at(a, b, h, i, a.seq);
        device const float* dyi = dy + rlx_attn_at(a, b, h, i, a.seq);
        float s = rlx_dot(qi, kj, d) * scale + rlx_attn_mask(a, m, b, h, i, pos);
        float p = exp(s - r.mx) / r.den;
        if (a.wrt == 2u) {
            for (uint t = 0; t < d; ++t) {
                o[t] += p * dyi[t];
            }
        } else {
            float ds = p * (rlx_dot(dyi, vj, d) - r.pdp) * scale;
            for (uint t = 0; t < d; ++t) {
                o[t] += ds * qi[t];
            }
        }
    }
}

// ------------------------------------------------------------- RMSNorm

static inline float rlx_rstd(device const float* x, uint h, float eps) {
    float ss = 0.0f;
    for (uint c = 0; c < h; ++c) {
        ss += x[c] * x[c];
    }
    return rsqrt(ss / float(h) + eps);
}

kernel void rms_norm_bwd_f32(constant RmsBwdArgs&  a     [[buffer(0)]],
                             device const float*   x     [[buffer(1)]],
                             device const float*   gamma [[buffer(2)]],
                             device const float*   dy    [[buffer(3)]],
                             device float*         out   [[buffer(4)]],
                             uint gid [[thread_position_in_grid]])
{
    uint h = a.h;
    if (a.wrt == 0u) {
        if (gid >= a.rows) {
            return;
        }
        device const float* xr = x + gid * h;
        device const float* dr = dy + gid * h;
        float rs = rlx_rstd(xr, h, a.eps);
        float dot = 0.0f;
        for (uint c = 0; c < h; ++c) {
            dot += dr[c] * gamma[c] * xr[c] * rs;
        }
        for (uint c = 0; c < h; ++c) {
            out[gid * h + c] = rs * (dr[c] * gamma[c] - xr[c] * rs * dot / float(h));
        }
        return;
    }
    if (gid >= h) {
        return;
    }
    float acc = 0.0f;
    for (uint r = 0; r < a.rows; ++r) {
        float f = a.wrt == 1u ? x[r * h + gid] * rlx_rstd(x + r * h, h, a.eps) : 1.0f;
        acc += dy[r * h + gid] * f;
    }
    out[gid] = acc;
}

// ------------------------------------------------------------- RoPE / cumsum / gather

kernel void rope_bwd_f32(constant RopeBwdArgs& a   [[buffer(0)]],
                         device const float*   dy  [[buffer(1)]],
                         device const float*   cs  [[buffer(2)]],
                         device const float*   sn  [[buffer(3)]],
                         device float*         dx  [[buffer(4)]],
                         uint gid [[thread_position_in_grid]])
{
    if (gid >= a.batch * a.seq * a.hidden) {
        return;
    }
    uint half_rot = a.n_rot / 2u;
    uint p = gid / a.hidden;
    uint e = gid % a.hidden % a.head_dim;
    if (e >= a.n_rot) {
        dx[gid] = dy[gid];
        return;
    }
    uint rows = a.cos_len / half_rot;
    uint t = rows == a.batch * a.seq ? p : p % a.seq;
    if (e < half_rot) {
        float c = cs[t * half_rot + e], s = sn[t * half_rot + e];
        dx[gid] = dy[gid] * c + dy[gid + half_rot] * s;
    } else {
        uint i = e - half_rot;
        float c = cs[t * half_rot + i], s = sn[t * half_rot + i];
        dx[gid] = -dy[gid - half_rot] * s + dy[gid] * c;
    }
}

kernel void cumsum_bwd_f32(constant CumsumBwdArgs& a  [[buffer(0)]],
                           device const float*     dy [[buffer(1)]],
                           device float*           dx [[buffer(2)]],
                           uint gid [[thread_position_in_grid]])
{
    if (gid >= a.rows) {
        return;
    }
    device const float* i = dy + gid * a.cols;
    device float* o = dx + gid * a.cols;
    float acc = 0.0f;
    for (uint c = a.cols; c > 0u; --c) {
        float y = i[c - 1u];
        if (a.exclusive != 0u) {
            o[c - 1u] = acc;
            acc += y;
        } else {
            acc += y;
            o[c - 1u] = acc;
        }
    }
}

kernel void gather_bwd_f32(constant GatherBwdArgs& a   [[buffer(0)]],
                           device const float*     dy  [[buffer(1)]],
                           device const int*       idx [[buffer(2)]],
                           device float*           dst [[buffer(3)]],
                           uint gid [[thread_position_in_grid]])
{
    if (gid >= a.outer * a.axis_dim * a.trailing) {
        return;
    }
    uint t = gid % a.trailing;
    uint row = (gid / a.trailing) % a.axis_dim;
    uint o = gid / (a.trailing * a.axis_dim);
    float acc = 0.0f;
    for (uint i = 0; i < a.num_idx; ++i) {
        int ix = idx[i];
        if (ix < 0) {
            ix += int(a.axis_dim);
        }
        if (ix == int(row)) {
            acc += dy[(o * a.num_idx + i) * a.trailing + t];
        }
    }
    dst[gid] = acc;
}

// ------------------------------------------------------------- pooling / conv

kernel void conv2d_bwd_input_f32(constant Window2dArgs& a  [[buffer(0)]],
                                 device const float*    dy [[buffer(1)]],
                                 device const float*    w  [[buffer(2)]],
                                 device float*          dx [[buffer(3)]],
                                 uint gid [[thread_position_in_grid]])
{
    if (gid >= a.n * a.c * a.h * a.w) {
        return;
    }
    uint cig = a.c / a.groups, cog = a.c_out / a.groups;
    uint xx = gid % a.w;
    uint y = (gid / a.w) % a.h;
    uint ci = (gid / (a.w * a.h)) % a.c;
    uint bn = gid / (a.w * a.h * a.c);
    uint grp = ci / cig, cl = ci % cig;
    float acc = 0.0f;
    for (uint ka = 0; ka < a.kh; ++ka) {
        int ty = int(y + a.ph) - int(ka * a.dh);
        if (ty < 0 || uint(ty) % a.sh != 0u || uint(ty) / a.sh >= a.h_out) {
            continue;
        }
        uint oy = uint(ty) / a.sh;
        for (uint kb = 0; kb < a.kw; ++kb) {
            int tx = int(xx + a.pw) - int(kb * a.dw);
            if (tx < 0 || uint(tx) % a.sw != 0u || uint(tx) / a.sw >= a.w_out) {
                continue;
            }
            uint ox = uint(tx) / a.sw;
            for (uint co = grp * cog; co < (grp + 1u) * cog; ++co) {
                acc += w[((co * cig + cl) * a.kh + ka) * a.kw + kb]
                     * dy[((bn * a.c_out + co) * a.h_out + oy) * a.w_out + ox];
            }
        }
    }
    dx[gid] = acc;
}

kernel void conv2d_bwd_weight_f32(constant Window2dArgs& a  [[buffer(0)]],
                                  device const float*    x  [[buffer(1)]],
                                  device const float*    dy [[buffer(2)]],
                                  device float*          dw [[buffer(3)]],
                                  uint gid [[thread_position_in_grid]])
{
    uint cig = a.c / a.groups, cog = a.c_out / a.groups;
    if (gid >= a.c_out * cig * a.kh * a.kw) {
        return;
    }
    uint kb = gid % a.kw;
    uint ka = (gid / a.kw) % a.kh;
    uint cl = (gid / (a.kw * a.kh)) % cig;
    uint co = gid / (a.kw * a.kh * cig);
    uint ci = (co / cog) * cig + cl;
    float acc = 0.0f;
    for (uint bn = 0; bn < a.n; ++bn) {
        device const float* xp = x + (bn * a.c + ci) * a.h * a.w;
        device const float* dp = dy + (bn * a.c_out + co) * a.h_out * a.w_out;
        for (uint oy = 0; oy < a.h_out; ++oy) {
            int y = int(oy * a.sh + ka * a.dh) - int(a.ph);
            if (y < 0 || y >= int(a.h)) {
                continue;
            }
            for (uint ox = 0; ox < a.w_out; ++ox) {
                int xx = int(ox * a.sw + kb * a.dw) - int(a.pw);
                if (xx < 0 || xx >= int(a.w)) {
                    continue;
                }
                acc += dp[oy * a.w_out + ox] * xp[y * int(a.w) + xx];
            }
        }
    }
    dw[gid] = acc;
}

// ------------------------------------------------------------- DiT modulation

// mean (LayerNorm) and rstd of one row
static inline float2 rlx_mod_stats(constant ModBwdArgs& a, float mean, float ss) {
    float h = float(a.h);
    float mu = a.layer_norm != 0u ? mean / h : 0.0f;
    float var = ss / h - (a.layer_norm != 0u ? mu * mu : 0.0f);
    return float2(mu, rsqrt(max(var, 0.0f) + a.eps));
}

template <typename T>
static inline float2 rlx_row_stats(constant ModBwdArgs& a, device const T* xr) {
    float s = 0.0f, ss = 0.0f;
    for (uint c = 0; c < a.h; ++c) {
        float v = float(xr[c]);
        s += v;
        ss += v * v;
    }
    if (a.layer_norm != 0u) {
        // two-pass variance for accuracy
        float mu = s / float(a.h);
        ss = 0.0f;
        for (uint c = 0; c < a.h; ++c) {
            float dv = float(xr[c]) - mu;
            ss += dv * dv;
        }
        return float2(mu, rsqrt(ss / float(a.h) + a.eps));
    }
    return rlx_mod_stats(a, s, ss);
}

template <typename T>
kernel void ada_ln_bwd(constant ModBwdArgs& a     [[buffer(0)]],
                       device const T*      x     [[buffer(1)]],
                       device const T*      scale [[buffer(2)]],
                       device const T*      dy    [[buffer(3)]],
                       device T*            out   [[buffer(4)]],
                       uint gid [[thread_position_in_grid]])
{
    uint h = a.h;
    uint rows = a.mod_rows * a.seq_per_mod;
    uint nx = rows * h, nm = a.mod_rows * h;
    if (gid < rows) {
        uint m = gid / a.seq_per_mod;
        device const T* xr = x + gid * h;
        device const T* dr = dy + gid * h;
        float2 st = rlx_row_stats(a, xr);
        float dot = 0.0f;
        for (uint c = 0; c < h; ++c) {
            float xh = (float(xr[c]) - st.x) * st.y;
            dot += float(dr[c]) * (1.0f + float(scale[m * h + c])) * xh;
        }
        float mean = 0.0f;
        for (uint c = 0; c < h; ++c) {
            float xh = (float(xr[c]) - st.x) * st.y;
            float g = float(dr[c]) * (1.0f + float(scale[m * h + c]));
            mean += st.y * (g - xh * dot / float(h));
        }
        mean = a.layer_norm != 0u ? mean / float(h) : 0.0f;
        for (uint c = 0; c < h; ++c) {
            float xh = (float(xr[c]) - st.x) * st.y;
            float g = float(dr[c]) * (1.0f + float(scale[m * h + c]));
            out[gid * h + c] = T(st.y * (g - xh * dot / float(h)) - mean);
        }
        return;
    }
    uint t = gid - rows;
    if (t >= nm) {
        return;
    }
    uint m = t / h, c = t % h;
    float ds = 0.0f, dsh = 0.0f;
    for (uint r = m * a.seq_per_mod; r < (m + 1u) * a.seq_per_mod; ++r) {
        float2 st = rlx_row_stats(a, x + r * h);
        float y = float(dy[r * h + c]);
        ds += y * (float(x[r * h + c]) - st.x) * st.y;
        dsh += y;
    }
    out[nx + t] = T(ds);
    out[nx + nm + t] = T(dsh);
}

template <typename T>
kernel void gated_residual_bwd(constant ModBwdArgs& a    [[buffer(0)]],
                               device const T*      y    [[buffer(1)]],
                               device const T*      gate [[buffer(2)]],
                               device const T*      g    [[buffer(3)]],
                               device T*            out  [[buffer(4)]],
                               uint gid [[thread_position_in_grid]])
{
    uint h = a.h;
    uint nx = a.mod_rows * a.seq_per_mod * h, nm = a.mod_rows * h;
    if (gid < nx) {
        out[gid] = g[gid];
    } else if (gid < 2u * nx) {
        uint e = gid - nx;
        uint m = e / (a.seq_per_mod * h);
        out[gid] = T(float(gate[m * h + e % h]) * float(g[e]));
    } else if (gid < 2u * nx + nm) {
        uint t = gid - 2u * nx;
        uint m = t / h, c = t % h;
        float acc = 0.0f;
        for (uint r = m * a.seq_per_mod; r < (m + 1u) * a.seq_per_mod; ++r) {
            acc += float(y[r * h + c]) * float(g[r * h + c]);
        }
        out[gid] = T(acc);
    }
}

#define RLX_MOD_BWD(name, fn, T)                                                  \
template [[host_name(name)]] kernel void fn<T>(                                   \
    constant ModBwdArgs& a [[buffer(0)]], device const T* p1 [[buffer(1)]],      \
    device const T* p2 [[buffer(2)]], device const T* p3 [[buffer(3)]],          \
    device T* out [[buffer(4)]], uint gid [[thread_position_in_grid]]);
RLX_MOD_BWD("ada_ln_bwd_f32", ada_ln_bwd, float)
RLX_MOD_BWD("ada_ln_bwd_f16", ada_ln_bwd, half)
RLX_MOD_BWD("gated_residual_bwd_f32", gated_residual_bwd, float)
RLX_MOD_BWD("gated_residual_bwd_f16", gated_residual_bwd, half)

// ------------------------------------------------------------- log-mel / cross-entropy

kernel void log_mel_bwd_f32(constant LogMelArgs& a       [[buffer(0)]],
                            device const float*  spec    [[buffer(1)]],
                            device const float*  filters [[buffer(2)]],
                            device const float*  dy      [[buffer(3)]],
                            device float*        dst     [[buffer(4)]],
                            uint gid [[thread_position_in_grid]])
{
    uint width = 2u * a.n_fft;
    if (gid >= a.outer * width) {
        return;
    }
    uint r = gid / width, e = gid % width;
    uint k = e < a.n_fft ? e : e - a.n_fft;
    if (k >= a.n_bins) {
        dst[gid] = 0.0f;
        return;
    }
    device const float* row = spec + r * width;
    float dp = 0.0f;
    for (uint m = 0; m < a.n_mels; ++m) {
        device const float* f = filters + m * a.n_bins;
        float mel = 0.0f;
        for (uint j = 0; j < a.n_bins; ++j) {
            mel += f[j] * (row[j] * row[j] + row[a.n_fft + j] * row[a.n_fft + j]);
        }
        dp += dy[r * a.n_mels + m] * f[k] / (mel + 1e-10f);
    }
    dst[gid] = 2.0f * row[e] * dp;
}

kernel void softmax_ce_bwd_f32(constant SceArgs&   a       [[buffer(0)]],
                               device const float* logits  [[buffer(1)]],
                               device const int*   labels  [[buffer(2)]],
                               device const float* d_loss  [[buffer(3)]],
                               device float*       dlogits [[buffer(4)]],
                               uint gid [[thread_position_in_grid]])
{
    if (gid >= a.n) {
        return;
    }
    device const float* z = logits + gid * a.c;
    device float* o = dlogits + gid * a.c;
    int lab = labels[gid];
    if (lab < 0 || uint(lab) >= a.c) {
        for (uint k = 0; k < a.c; ++k) {
            o[k] = 0.0f;
        }
        return;
    }
    float mx = -INFINITY;
    for (uint k = 0; k < a.c; ++k) {
        mx = max(mx, z[k]);
    }
    float den = 0.0f;
    for (uint k = 0; k < a.c; ++k) {
        den += exp(z[k] - mx);
    }
    float dl = d_loss[gid];
    for (uint k = 0; k < a.c; ++k) {
        float p = exp(z[k] - mx) / den;
        o[k] = (p - (k == uint(lab) ? 1.0f : 0.0f)) * dl;
    }
}

kernel void softmax_ce_labels_f32(constant SceArgs&   a      [[buffer(0)]],
                                  device const float* logits [[buffer(1)]],
                                  device const int*   labels [[buffer(2)]],
                                  device float*       loss   [[buffer(3)]],
                                  uint gid [[thread_position_in_grid]])
{
    if (gid >= a.n) {
        return;
    }
    device const float* z = logits + gid * a.c;
    int lab = labels[gid];
    if (lab < 0 || uint(lab) >= a.c) {
        loss[gid] = NAN;
        return;
    }
    float mx = -INFINITY;
    for (uint k = 0; k < a.c; ++k) {
        mx = max(mx, z[k]);
    }
    float den = 0.0f;
    for (uint k = 0; k < a.c; ++k) {
        den += exp(z[k] - mx);
    }
    loss[gid] = mx + log(den) - z[lab];
}

kernel void softmax_ce_dense_f32(constant SceArgs&   a       [[buffer(0)]],
                                 device const float* logits  [[buffer(1)]],
                                 device const float* targets [[buffer(2)]],
                                 device float*       loss    [[buffer(3)]],
                                 uint gid [[thread_position_in_grid]])
{
    if (gid >= a.n) {
        return;
    }
    device const float* z = logits + (ulong)gid * a.c;
    device const float* t = targets + (ulong)gid * a.c;
    float mx = -INFINITY;
    for (uint k = 0; k < a.c; ++k) {
        mx = max(mx, z[k]);
    }
    float den = 0.0f;
    for (uint k = 0; k < a.c; ++k) {
        den += exp(z[k] - mx);
    }
    const float lse = mx + log(den);
    float acc = 0.0f;
    for (uint k = 0; k < a.c; ++k) {
        acc += t[k] * (z[k] - lse);
    }
    loss[gid] = -acc;
}
