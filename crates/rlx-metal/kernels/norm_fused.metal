// norm_fused.metal -- fused row norms beyond norm.metal: residual
// LayerNorm and the gated RMSNorm·SiLU of gated-delta-net blocks.
//
// Threadgroup layout as norm.metal: one threadgroup per row of [rows, h],
// any threadgroup size 1..1024 (the host picks min(1024, h rounded up to
// 32)); threads stride over the row; row sums reduce with simd_sum and a
// 32-float threadgroup array. Statistics in f32 (the host's in f64).
//
// residual_layer_norm_{f32,f16}  args RowNormArgs: buffer(1) x, (2) res,
//     (3) bias (read only when has_bias, but bound), (4) g, (5) b, (6) out
//     s = x + res (+ bias); out = (s - mean) * rsqrt(var + eps) * g + b
//     (two-pass variance over the recomputed s)
// rms_norm_mul_silu_{f32,f16}    args RowNormArgs: buffer(1) x, (2) g,
//     (3) b, (4) z, (5) out
//     o = T(x * rsqrt(mean(x^2) + eps) * g * silu(z)); where b != 0,
//     out = T(o + b * silu(z)) (the host's two roundings)
// ada_layer_norm_{f32,f16}       args ModNormArgs: buffer(1) x, (2) scale,
//     (3) shift, (4) out; out = norm(x) * (1 + scale[m]) + shift[m] with m
//     the modulation row of x's row (rlx_mod_row); norm = LayerNorm or
//     RMSNorm (layer_norm), no affine
// gated_residual_{f32,f16}       args ModNormArgs: buffer(1) x, (2) y,
//     (3) gate, (4) out; out = x + gate[m] * y. 1-D grid over rows * h
//     elements (elementwise: no reduction).
// group_norm_{f32,f16}           args GroupNormArgs: buffer(1) src [n, c, hw],
//     (2) g [c], (3) b [c], (4) dst; one threadgroup per (sample, group):
//     the group's cg·hw contiguous elements, two-pass mean / variance,
//     dst = (v - mean) * (rsqrt(var + eps) * g[ch]) + b[ch]
// norm_residual_f32  args HeadGemvArgs (k = h, post_eps): buffer(1) y,
//     (2) res, (3) g, (4) b, (5) dst; dst = res + (y * rsqrt(mean(y^2) +
//     post_eps) * g + b): a post-norm and its residual add (Gemma3) in one
//     row pass, the Metal plan's fusion (metal::fuse); dst may be y or res
//     itself (each thread reads its elements before writing them).
#include <metal_stdlib>
#include "args.h"
using namespace metal;

// Sum of v over the threadgroup, returned to every thread; `part` is free
// again when it returns.
static inline float rlx_fused_sum(float v, threadgroup float* part,
                                  uint sid, uint lane, uint nsg) {
    v = simd_sum(v);
    if (lane == 0) {
        part[sid] = v;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float t = simd_sum(lane < nsg ? part[lane] : 0.0f);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return t;
}

// Modulation row of x row r: r itself when the lead dims match, else the
// mixed-radix walk over x's lead dims with stride 0 on broadcast dims.
static inline uint rlx_mod_row(constant ModNormArgs& a, uint r) {
    if (a.same != 0) {
        return r;
    }
    uint at = 0;
    for (uint i = a.rank; i-- > 0;) {
        const uint xi = max(a.x_lead[i], 1u);
        at += (r % xi) * a.mod_stride[i];
        r /= xi;
    }
    return at;
}

template <typename T>
kernel void ada_layer_norm(constant ModNormArgs& a     [[buffer(0)]],
                           device const T*       x     [[buffer(1)]],
                           device const T*       scale [[buffer(2)]],
                           device const T*       shift [[buffer(3)]],
                           device T*             out   [[buffer(4)]],
                           uint row  [[threadgroup_position_in_grid]],
                           uint lid  [[thread_position_in_threadgroup]],
                           uint tpg  [[threads_per_threadgroup]],
                           uint sid  [[simdgroup_index_in_threadgroup]],
                           uint lane [[thread_index_in_simdgroup]],
                           uint nsg  [[simdgroups_per_threadgroup]])
{
    threadgroup float part[32];
    const ulong base = (ulong)row * a.h;
    float mean = 0.0f;
    if (a.layer_norm != 0) {
        float s = 0.0f;
        for (uint i = lid; i < a.h; i += tpg) {
            s += float(x[base + i]);
        }
        mean = rlx_fused_sum(s, part, sid, lane, nsg) / float(a.h);
    }
    float sq = 0.0f;
    for (uint i = lid; i < a.h; i += tpg) {
        const float d = float(x[base + i]) - mean;
        sq += d * d;
    }
    const float inv = rsqrt(rlx_fused_sum(sq, part, sid, lane, nsg) / float(a.h) + a.eps);
    const ulong m = (ulong)rlx_mod_row(a, row) * a.h;
    for (uint i = lid; i < a.h; i += tpg) {
        out[base + i] = T((float(x[base + i]) - mean) * inv * (1.0f + float(scale[m + i]))
                          + float(shift[m + i]));
    }
}

template <typename T>
kernel void gated_residual(constant ModNormArgs& a    [[buffer(0)]],
                           device const T*       x    [[buffer(1)]],
                           device const T*       y    [[buffer(2)]],
                           device const T*       gate [[buffer(3)]],
                           device T*             out  [[buffer(4)]],
                           uint gid [[thread_position_in_grid]])
{
    if (a.h == 0 || gid >= a.rows * a.h) {
        return;
    }
    const uint r = gid / a.h;
    const uint j = gid - r * a.h;
    const float g = float(gate[(ulong)rlx_mod_row(a, r) * a.h + j]);
    out[gid] = T(float(x[gid]) + g * float(y[gid]));
}

template <typename T>
kernel void group_norm(constant GroupNormArgs& a   [[buffer(0)]],
                       device const T*         src [[buffer(1)]],
                       device const T*         g   [[buffer(2)]],
                       device const T*         b   [[buffer(3)]],
                       device T*               dst [[buffer(4)]],
                       uint grp  [[threadgroup_position_in_grid]],
                       uint lid  [[thread_position_in_threadgroup]],
                       uint tpg  [[threads_per_threadgroup]],
                       uint sid  [[simdgroup_index_in_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]],
                       uint nsg  [[simdgroups_per_threadgroup]])
{
    threadgroup float part[32];
    const uint glen = a.cg * a.hw;
    const ulong base = (ulong)grp * glen;
    float s = 0.0f;
    for (uint i = lid; i < glen; i += tpg) {
        s += float(src[base + i]);
    }
    const float mean = rlx_fused_sum(s, part, sid, lane, nsg) / float(glen);
    float sq = 0.0f;
    for (uint i = lid; i < glen; i += tpg) {
        const float d = float(src[base + i]) - mean;
        sq += d * d;
    }
    const float inv = rsqrt(rlx_fused_sum(sq, part, sid, lane, nsg) / float(glen) + a.eps);
    const uint c0 = (grp % a.groups) * a.cg;
    for (uint i = lid; i < glen; i += tpg) {
        const uint ch = c0 + i / a.hw;
        dst[base + i] = T((float(src[base + i]) - mean) * (inv * float(g[ch])) + float(b[ch]));
    }
}

template <typename T>
kernel void residual_layer_norm(constant RowNormArgs& a    [[buffer(0)]],
                                device const T*       xs   [[buffer(1)]],
                                device const T*       res  [[buffer(2)]],
                                device const T*       bias [[buffer(3)]],
                                device const T*       g    [[buffer(4)]],
                                device const T*       b    [[buffer(5)]],
                                device T*             out  [[buffer(6)]],
                                uint row  [[threadgroup_position_in_grid]],
                                uint lid  [[thread_position_in_threadgroup]],
                                uint tpg  [[threads_per_threadgroup]],
                                uint sid  [[simdgroup_index_in_threadgroup]],
                                uint lane [[thread_index_in_simdgroup]],
                                uint nsg  [[simdgroups_per_threadgroup]])
{
    threadgroup float part[32];
    const ulong base = (ulong)row * a.h;
    float s = 0.0f;
    for (uint i = lid; i < a.h; i += tpg) {
        s += float(xs[base + i]) + float(res[base + i])
           + (a.has_bias != 0 ? float(bias[i]) : 0.0f);
    }
    const float mean = rlx_fused_sum(s, part, sid, lane, nsg) / float(a.h);
    float sq = 0.0f;
    for (uint i = lid; i < a.h; i += tpg) {
        const float d = float(xs[base + i]) + float(res[base + i])
                      + (a.has_bias != 0 ? float(bias[i]) : 0.0f) - mean;
        sq += d * d;
    }
    const float var = rlx_fused_sum(sq, part, sid, lane, nsg) / float(a.h);
    const float inv = rsqrt(var + a.eps);
    for (uint i = lid; i < a.h; i += tpg) {
        const float v = float(xs[base + i]) + float(res[base + i])
                      + (a.has_bias != 0 ? float(bias[i]) : 0.0f);
        out[base + i] = T((v - mean) * inv * float(g[i]) + float(b[i]));
    }
}

template <typename T>
kernel void rms_norm_mul_silu(constant RowNormArgs& a   [[buffer(0)]],
                              device const T*       x   [[buffer(1)]],
                              device const T*       g   [[buffer(2)]],
                              device const T*       b   [[buffer(3)]],
                              device const T*       z   [[buffer(4)]],
                              device T*             out [[buffer(5)]],
                              uint row  [[threadgroup_position_in_grid]],
                              uint lid  [[thread_position_in_threadgroup]],
                              uint tpg  [[threads_per_threadgroup]],
                              uint sid  [[simdgroup_index_in_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]],
                              uint nsg  [[simdgroups_per_threadgroup]])
{
    threadgroup float part[32];
    const ulong base = (ulong)row * a.h;
    float ss = 0.0f;
    for (uint i = lid; i < a.h; i += tpg) {
        const float v = float(x[base + i]);
        ss += v * v;
    }
    ss = rlx_fused_sum(ss, part, sid, lane, nsg);
    const float inv = rsqrt(ss / float(a.h) + a.eps);
    for (uint i = lid; i < a.h; i += tpg) {
        const float zv = float(z[base + i]);
        const float act = zv / (1.0f + exp(-zv));
        T o = T(float(x[base + i]) * inv * float(g[i]) * act);
        const float bv = float(b[i]);
        if (bv != 0.0f) {
            o = T(float(o) + bv * act);
        }
        out[base + i] = o;
    }
}

#define RLX_RESIDUAL_LN(name, T)                                                  \
template [[host_name(name)]] kernel void residual_layer_norm<T>(                  \
    constant RowNormArgs& a [[buffer(0)]], device const T* xs [[buffer(1)]],     \
    device const T* res [[buffer(2)]], device const T* bias [[buffer(3)]],       \
    device const T* g [[buffer(4)]], device const T* b [[buffer(5)]],            \
    device T* out [[buffer(6)]], uint row [[threadgroup_position_in_grid]],      \
    uint lid [[thread_position_in_threadgroup]],                                 \
    uint tpg [[threads_per_threadgroup]],                                        \
    uint sid [[simdgroup_index_in_threadgroup]],                                 \
    uint lane [[thread_index_in_simdgroup]],                                     \
    uint nsg [[simdgroups_per_threadgroup]]);
RLX_RESIDUAL_LN("residual_layer_norm_f32", float)
RLX_RESIDUAL_LN("residual_layer_norm_f16", half)

#define RLX_RMS_MUL_SILU(name, T)                                                 \
template [[host_name(name)]] kernel void rms_norm_mul_silu<T>(                    \
    constant RowNormArgs& a [[buffer(0)]], device const T* x [[buffer(1)]],      \
    device const T* g [[buffer(2)]], device const T* b [[buffer(3)]],            \
    device const T* z [[buffer(4)]], device T* out [[buffer(5)]],                \
    uint row [[threadgroup_position_in_grid]],                                   \
    uint lid [[thread_position_in_threadgroup]],                                 \
    uint tpg [[threads_per_threadgroup]],                                        \
    uint sid [[simdgroup_index_in_threadgroup]],                                 \
    uint lane [[thread_index_in_simdgroup]],                                     \
    uint nsg [[simdgroups_per_threadgroup]]);
RLX_RMS_MUL_SILU("rms_norm_mul_silu_f32", float)
RLX_RMS_MUL_SILU("rms_norm_mul_silu_f16", half)

#define RLX_MOD(ada_n, gated_n, T)                                                \
template [[host_name(ada_n)]] kernel void ada_layer_norm<T>(                      \
    constant ModNormArgs& a [[buffer(0)]], device const T* x [[buffer(1)]],      \
    device const T* scale [[buffer(2)]], device const T* shift [[buffer(3)]],    \
    device T* out [[buffer(4)]], uint row [[threadgroup_position_in_grid]],      \
    uint lid [[thread_position_in_threadgroup]],                                 \
    uint tpg [[threads_per_threadgroup]],                                        \
    uint sid [[simdgroup_index_in_threadgroup]],                                 \
    uint lane [[thread_index_in_simdgroup]],                                     \
    uint nsg [[simdgroups_per_threadgroup]]);                                    \
template [[host_name(gated_n)]] kernel void gated_residual<T>(                    \
    constant ModNormArgs& a [[buffer(0)]], device const T* x [[buffer(1)]],      \
    device const T* y [[buffer(2)]], device const T* gate [[buffer(3)]],         \
    device T* out [[buffer(4)]], uint gid [[thread_position_in_grid]]);
RLX_MOD("ada_layer_norm_f32", "gated_residual_f32", float)
RLX_MOD("ada_layer_norm_f16", "gated_residual_f16", half)

#define RLX_GROUP_NORM(name, T)                                                   \
template [[host_name(name)]] kernel void group_norm<T>(                           \
    constant GroupNormArgs& a [[buffer(0)]], device const T* src [[buffer(1)]],  \
    device const T* g [[buffer(2)]], device const T* b [[buffer(3)]],            \
    device T* dst [[buffer(4)]], uint grp [[threadgroup_position_in_grid]],      \
    uint lid [[thread_position_in_threadgroup]],                                 \
    uint tpg [[threads_per_threadgroup]],                                        \
    uint sid [[simdgroup_index_in_threadgroup]],                                 \
    uint lane [[thread_index_in_simdgroup]],                                     \
    uint nsg [[simdgroups_per_threadgroup]]);
RLX_GROUP_NORM("group_norm_f32", float)
RLX_GROUP_NORM("group_norm_f16", half)

kernel void norm_residual_f32(constant HeadGemvArgs& a   [[buffer(0)]],
                              device const float*    y   [[buffer(1)]],
                              device const float*    res [[buffer(2)]],
                              device const float*    g   [[buffer(3)]],
                              device const float*    b   [[buffer(4)]],
                              device float*          dst [[buffer(5)]],
                              uint row  [[threadgroup_position_in_grid]],
                              uint lid  [[thread_position_in_threadgroup]],
                              uint tpg  [[threads_per_threadgroup]],
                              uint sid  [[simdgroup_index_in_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]],
                              uint nsg  [[simdgroups_per_threadgroup]])
{
    threadgroup float part[32];
    const ulong o = (ulong)row * a.k;
    float ss = 0.0f;
    for (uint i = lid; i < a.k; i += tpg) {
        const float v = y[o + i];
        ss += v * v;
    }
    ss = rlx_fused_sum(ss, part, sid, lane, nsg);
    const float scale = rsqrt(ss / float(a.k) + a.post_eps);
    for (uint i = lid; i < a.k; i += tpg) {
        dst[o + i] = res[o + i] + (y[o + i] * scale * g[i] + b[i]);
    }
}
