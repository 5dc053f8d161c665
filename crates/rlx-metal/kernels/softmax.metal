// softmax.metal -- softmax over the last axis of [rows, cols], in place.
//
// Threadgroup layout: one threadgroup per row (grid = rows threadgroups);
// any threadgroup size 1..1024 (the host picks min(1024, cols rounded up
// to 32)); each thread strides over the row. Three passes over the row:
// max, sum of exp(x - max), normalise; the row max and sum reduce with
// simd_max / simd_sum and a 32-float threadgroup array. Math in f32.
//
// softmax_{f32,f16}   args SoftmaxArgs: buffer(1) data (updated in place)
#include <metal_stdlib>
#include "args.h"
using namespace metal;

template <typename T>
kernel void softmax(constant SoftmaxArgs& a    [[buffer(0)]],
                    device T*             data [[buffer(1)]],
                    uint row  [[threadgroup_position_in_grid]],
                    uint lid  [[thread_position_in_threadgroup]],
                    uint tpg  [[threads_per_threadgroup]],
                    uint sid  [[simdgroup_index_in_threadgroup]],
                    uint lane [[thread_index_in_simdgroup]],
                    uint nsg  [[simdgroups_per_threadgroup]])
{
    threadgroup float part[32];
    device T* x = data + (ulong)row * a.cols;

    float m = -INFINITY;
    for (uint i = lid; i < a.cols; i += tpg) {
        m = max(m, float(x[i]));
    }
    m = simd_max(m);
    if (lane == 0) {
        part[sid] = m;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    m = simd_max(lane < nsg ? part[lane] : -INFINITY);
    threadgroup_barrier(mem_flags::mem_threadgroup);

    float s = 0.0f;
    for (uint i = lid; i < a.cols; i += tpg) {
        s += exp(float(x[i]) - m);
    }
    s = simd_sum(s);
    if (lane == 0) {
        part[sid] = s;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    s = simd_sum(lane < nsg ? part[lane] : 0.0f);

    const float inv = 1.0f / s;
    for (uint i = lid; i < a.cols; i += tpg) {
        x[i] = T(exp(float(x[i]) - m) * inv);
    }
}

#define RLX_SOFTMAX(name, T)                                                  \
template [[host_name(name)]] kernel void softmax<T>(                          \
    constant SoftmaxArgs& a [[buffer(0)]], device T* data [[buffer(1)]],     \
    uint row [[threadgroup_position_in_grid]],                                \
    uint lid [[thread_position_in_threadgroup]],                              \
    uint tpg [[threads_per_threadgroup]],                                     \
    uint sid [[simdgroup_index_in_threadgroup]],                              \
    uint lane [[thread_index_in_simdgroup]],                                  \
    uint nsg [[simdgroups_per_threadgroup]]);
RLX_SOFTMAX("softmax_f32", float)
RLX_SOFTMAX("softmax_f16", half)
