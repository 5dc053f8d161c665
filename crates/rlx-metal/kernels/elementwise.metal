// elementwise.metal -- unary activations and f32 <-> f16 casts.
//
// Threadgroup layout: 1-D grid, one thread per element; any threadgroup
// size (256 is the host's choice), ceil(len / size) threadgroups; threads
// past `len` return at once. No threadgroup memory, no barriers.
//
// unary_f32 / unary_f16     args UnaryArgs: buffer(1) src, buffer(2) dst
//                           (src == dst for the in-place thunk)
// cast_f32_f16 / cast_f16_f32  args CastArgs: buffer(1) src, buffer(2) dst
// cast_trunc_f32            args CastArgs: buffer(1) src, buffer(2) dst:
//                           dst = trunc(src), f32 (CastTruncF32)
//
// Math is done in f32 for both element types (helpers in act.h).
#include <metal_stdlib>
#include "args.h"
using namespace metal;
#include "act.h"

template <typename T>
kernel void unary(constant UnaryArgs& a [[buffer(0)]],
                  device const T*     src [[buffer(1)]],
                  device T*           dst [[buffer(2)]],
                  uint gid [[thread_position_in_grid]])
{
    if (gid >= a.len) {
        return;
    }
    dst[gid] = T(rlx_act(a.op, float(src[gid])));
}

template <typename S, typename D>
kernel void cast(constant CastArgs& a [[buffer(0)]],
                 device const S*    src [[buffer(1)]],
                 device D*          dst [[buffer(2)]],
                 uint gid [[thread_position_in_grid]])
{
    if (gid >= a.len) {
        return;
    }
    dst[gid] = D(src[gid]);
}

#define RLX_UNARY(name, T)                                                   \
template [[host_name(name)]] kernel void unary<T>(                           \
    constant UnaryArgs& a [[buffer(0)]], device const T* src [[buffer(1)]], \
    device T* dst [[buffer(2)]], uint gid [[thread_position_in_grid]]);
RLX_UNARY("unary_f32", float)
RLX_UNARY("unary_f16", half)

#define RLX_CAST(name, S, D)                                                 \
template [[host_name(name)]] kernel void cast<S, D>(                         \
    constant CastArgs& a [[buffer(0)]], device const S* src [[buffer(1)]],  \
    device D* dst [[buffer(2)]], uint gid [[thread_position_in_grid]]);
RLX_CAST("cast_f32_f16", float, half)
RLX_CAST("cast_f16_f32", half, float)

kernel void cast_trunc_f32(constant CastArgs& a [[buffer(0)]],
                           device const float* src [[buffer(1)]],
                           device float*       dst [[buffer(2)]],
                           uint gid [[thread_position_in_grid]])
{
    if (gid >= a.len) {
        return;
    }
    dst[gid] = trunc(src[gid]);
}
