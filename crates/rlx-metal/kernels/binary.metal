// binary.metal -- binary elementwise ops, same-shape and broadcasting.
//
// Threadgroup layout: 1-D grid, one thread per output element; any
// threadgroup size, ceil(len / size) threadgroups; threads past `len`
// return at once. No threadgroup memory, no barriers.
//
// binary_f32 / binary_f16                args BinaryArgs:
//     buffer(1) lhs, buffer(2) rhs, buffer(3) dst        (all len elements)
// binary_broadcast_f32 / binary_broadcast_f16  args BroadcastArgs:
//     buffer(1) lhs, buffer(2) rhs (strided, 0 = broadcast axis),
//     buffer(3) dst (dense, out_dims)
//
// Math in f32 (rlx_binary in act.h: NaN-propagating max / min, numpy's
// power for negative bases).
#include <metal_stdlib>
#include "args.h"
using namespace metal;
#include "act.h"

template <typename T>
kernel void binary(constant BinaryArgs& a   [[buffer(0)]],
                   device const T*      lhs [[buffer(1)]],
                   device const T*      rhs [[buffer(2)]],
                   device T*            dst [[buffer(3)]],
                   uint gid [[thread_position_in_grid]])
{
    if (gid >= a.len) {
        return;
    }
    dst[gid] = T(rlx_binary(a.op, float(lhs[gid]), float(rhs[gid])));
}

template <typename T>
kernel void binary_broadcast(constant BroadcastArgs& a   [[buffer(0)]],
                             device const T*         lhs [[buffer(1)]],
                             device const T*         rhs [[buffer(2)]],
                             device T*               dst [[buffer(3)]],
                             uint gid [[thread_position_in_grid]])
{
    if (gid >= a.len) {
        return;
    }
    // Peel output coordinates from the innermost axis outwards.
    uint rest = gid;
    uint li = 0;
    uint ri = 0;
    for (uint k = a.rank; k-- > 0;) {
        const uint d = a.out_dims[k];
        const uint c = rest % d;
        rest /= d;
        li += c * a.lhs_strides[k];
        ri += c * a.rhs_strides[k];
    }
    dst[gid] = T(rlx_binary(a.op, float(lhs[li]), float(rhs[ri])));
}

#define RLX_BINARY(name, T)                                                   \
template [[host_name(name)]] kernel void binary<T>(                           \
    constant BinaryArgs& a [[buffer(0)]], device const T* lhs [[buffer(1)]], \
    device const T* rhs [[buffer(2)]], device T* dst [[buffer(3)]],          \
    uint gid [[thread_position_in_grid]]);
RLX_BINARY("binary_f32", float)
RLX_BINARY("binary_f16", half)

#define RLX_BROADCAST(name, T)                                                   \
template [[host_name(name)]] kernel void binary_broadcast<T>(                    \
    constant BroadcastArgs& a [[buffer(0)]], device const T* lhs [[buffer(1)]], \
    device const T* rhs [[buffer(2)]], device T* dst [[buffer(3)]],             \
    uint gid [[thread_position_in_grid]]);
RLX_BROADCAST("binary_broadcast_f32", float)
RLX_BROADCAST("binary_broadcast_f16", half)
