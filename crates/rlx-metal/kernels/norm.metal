// norm.metal -- row normalisations over [rows, h].
//
// Threadgroup layout: one threadgroup per row (grid = rows threadgroups);
// any threadgroup size 1..1024 (the host picks min(1024, h rounded up to
// 32)); each thread strides over the row. Row sums reduce with simd_sum
// within each simdgroup, then across simdgroups through a 32-float
// threadgroup array (every simdgroup re-reduces the partials, so no
// broadcast step). Statistics in f32 for both element types.
//
// rms_norm_{f32,f16}       args RowNormArgs: buffer(1) src, (2) g, (3) b, (4) dst
//     dst = src * rsqrt(mean(src^2) + eps) * g + b
// layer_norm_{f32,f16}     args RowNormArgs: buffer(1) src, (2) g, (3) b, (4) dst
//     dst = (src - mean) * rsqrt(var + eps) * g + b   (two-pass variance)
// residual_rms_norm_{f32,f16}  args RowNormArgs: buffer(1) x, (2) res,
//     (3) bias (read only when has_bias, but bound), (4) g, (5) b, (6) out
//     s = x + res (+ bias); out = s * rsqrt(mean(s^2) + eps) * g + b
#include <metal_stdlib>
#include "args.h"
using namespace metal;

// Sum of v over the threadgroup, returned to every thread. `part` holds 32
// floats; the trailing barrier lets the caller reuse it at once.
static inline float rlx_tg_sum(float v, threadgroup float* part,
                               uint sid, uint lane, uint nsg) {
    v = simd_sum(v);
    if (lane == 0) {
        part[sid] = v;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float t = lane < nsg ? part[lane] : 0.0f;
    t = simd_sum(t);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return t;
}

template <typename T>
kernel void rms_norm(constant RowNormArgs& a   [[buffer(0)]],
                     device const T*       src [[buffer(1)]],
                     device const T*       g   [[buffer(2)]],
                     device const T*       b   [[buffer(3)]],
                     device T*             dst [[buffer(4)]],
                     uint row  [[threadgroup_position_in_grid]],
                     uint lid  [[thread_position_in_threadgroup]],
                     uint tpg  [[threads_per_threadgroup]],
                     uint sid  [[simdgroup_index_in_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]],
                     uint nsg  [[simdgroups_per_threadgroup]])
{
    threadgroup float part[32];
    device const T* x = src + (ulong)row * a.h;
    device T*       y = dst + (ulong)row * a.h;
    float ss = 0.0f;
    for (uint i = lid; i < a.h; i += tpg) {
        const float v = float(x[i]);
        ss += v * v;
    }
    ss = rlx_tg_sum(ss, part, sid, lane, nsg);
    const float scale = rsqrt(ss / float(a.h) + a.eps);
    for (uint i = lid; i < a.h; i += tpg) {
        y[i] = T(float(x[i]) * scale * float(g[i]) + float(b[i]));
    }
}

template <typename T>
kernel void layer_norm(constant RowNormArgs& a   [[buffer(0)]],
                       device const T*       src [[buffer(1)]],
                       device const T*       g   [[buffer(2)]],
                       device const T*       b   [[buffer(3)]],
                       device T*             dst [[buffer(4)]],
                       uint row  [[threadgroup_position_in_grid]],
                       uint lid  [[thread_position_in_threadgroup]],
                       uint tpg  [[threads_per_threadgroup]],
                       uint sid  [[simdgroup_index_in_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]],
                       uint nsg  [[simdgroups_per_threadgroup]])
{
    threadgroup float part[32];
    device const T* x = src + (ulong)row * a.h;
    device T*       y = dst + (ulong)row * a.h;
    float s = 0.0f;
    for (uint i = lid; i < a.h; i += tpg) {
        s += float(x[i]);
    }
    const float mean = rlx_tg_sum(s, part, sid, lane, nsg) / float(a.h);
    float sq = 0.0f;
    for (uint i = lid; i < a.h; i += tpg) {
        const float d = float(x[i]) - mean;
        sq += d * d;
    }
    const float var = rlx_tg_sum(sq, part, sid, lane, nsg) / float(a.h);
    const float scale = rsqrt(var + a.eps);
    for (uint i = lid; i < a.h; i += tpg) {
        y[i] = T((float(x[i]) - mean) * scale * float(g[i]) + float(b[i]));
    }
}

template <typename T>
kernel void residual_rms_norm(constant RowNormArgs& a    [[buffer(0)]],
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
    float ss = 0.0f;
    for (uint i = lid; i < a.h; i += tpg) {
        const float v = float(xs[base + i]) + float(res[base + i])
                      + (a.has_bias != 0 ? float(bias[i]) : 0.0f);
        ss += v * v;
    }
    ss = rlx_tg_sum(ss, part, sid, lane, nsg);
    const float scale = rsqrt(ss / float(a.h) + a.eps);
    for (uint i = lid; i < a.h; i += tpg) {
        const float v = float(xs[base + i]) + float(res[base + i])
                      + (a.has_bias != 0 ? float(bias[i]) : 0.0f);
        out[base + i] = T(v * scale * float(g[i]) + float(b[i]));
    }
}

#define RLX_ROW_NORM(name, fn, T)                                                 \
template [[host_name(name)]] kernel void fn<T>(                                   \
    constant RowNormArgs& a [[buffer(0)]], device const T* src [[buffer(1)]],    \
    device const T* g [[buffer(2)]], device const T* b [[buffer(3)]],            \
    device T* dst [[buffer(4)]], uint row [[threadgroup_position_in_grid]],      \
    uint lid [[thread_position_in_threadgroup]],                                 \
    uint tpg [[threads_per_threadgroup]],                                        \
    uint sid [[simdgroup_index_in_threadgroup]],                                 \
    uint lane [[thread_index_in_simdgroup]],                                     \
    uint nsg [[simdgroups_per_threadgroup]]);
RLX_ROW_NORM("rms_norm_f32", rms_norm, float)
RLX_ROW_NORM("rms_norm_f16", rms_norm, half)
RLX_ROW_NORM("layer_norm_f32", layer_norm, float)
RLX_ROW_NORM("layer_norm_f16", layer_norm, half)

#define RLX_RESIDUAL_RMS(name, T)                                                 \
template [[host_name(name)]] kernel void residual_rms_norm<T>(                    \
    constant RowNormArgs& a [[buffer(0)]], device const T* xs [[buffer(1)]],     \
    device const T* res [[buffer(2)]], device const T* bias [[buffer(3)]],       \
    device const T* g [[buffer(4)]], device const T* b [[buffer(5)]],            \
    device T* out [[buffer(6)]], uint row [[threadgroup_position_in_grid]],      \
    uint lid [[thread_position_in_threadgroup]],                                 \
    uint tpg [[threads_per_threadgroup]],                                        \
    uint sid [[simdgroup_index_in_threadgroup]],                                 \
    uint lane [[thread_index_in_simdgroup]],                                     \
    uint nsg [[simdgroups_per_threadgroup]]);
RLX_RESIDUAL_RMS("residual_rms_norm_f32", float)
RLX_RESIDUAL_RMS("residual_rms_norm_f16", half)
