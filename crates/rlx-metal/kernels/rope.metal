// rope.metal -- rotary position embedding (Rope thunk), f32 math.
//
// dst [rows, hidden] (dense) from source rows `src_stride` elements apart
// (a column window of a wider parent when src_stride > hidden). Each head
// of head_dim elements rotates its first n_rot dims by the angle row
// t = per_token ? row : row % seq of the f32 cos / sin tables
// [*, n_rot/2]: pair (x_a, x_b) -> (x_a·cos - x_b·sin, x_a·sin + x_b·cos),
// NeoX pairs (c, c + n_rot/2) or interleaved (2c, 2c + 1); dims past n_rot
// are copied.
//
// Threadgroup layout: 1-D, one thread per output element (any threadgroup
// size; the host uses 256); each thread reads its element and its pair
// partner, so a simdgroup reads and writes contiguous runs.
//
// rope_{f32,f16}   args RopeArgs: buffer(1) src, (2) cos, (3) sin, (4) dst
#include <metal_stdlib>
#include "args.h"
using namespace metal;

template <typename T>
kernel void rope(constant RopeArgs&  a   [[buffer(0)]],
                 device const T*     src [[buffer(1)]],
                 device const float* cs  [[buffer(2)]],
                 device const float* sn  [[buffer(3)]],
                 device T*           dst [[buffer(4)]],
                 uint gid [[thread_position_in_grid]])
{
    if (gid >= a.len) {
        return;
    }
    const uint row = gid / a.hidden;
    const uint e = gid % a.hidden;
    const uint c = e % a.head_dim;
    device const T* x = src + (ulong)row * a.src_stride;
    if (c >= a.n_rot) {
        dst[gid] = x[e];
        return;
    }
    const uint half_rot = a.n_rot / 2;
    const uint trow = a.per_token != 0 ? row : row % a.seq;
    uint pair;  // index into the tables
    float xa;
    float xb;
    bool first;  // x is the pair's first element
    if (a.interleaved != 0) {
        pair = c / 2;
        first = (c & 1u) == 0;
        xa = float(x[first ? e : e - 1]);
        xb = float(x[first ? e + 1 : e]);
    } else {
        first = c < half_rot;
        pair = first ? c : c - half_rot;
        xa = float(x[first ? e : e - half_rot]);
        xb = float(x[first ? e + half_rot : e]);
    }
    const float co = cs[trow * half_rot + pair];
    const float si = sn[trow * half_rot + pair];
    dst[gid] = T(first ? xa * co - xb * si : xa * si + xb * co);
}

#define RLX_ROPE(name, T)                                                     \
template [[host_name(name)]] kernel void rope<T>(                             \
    constant RopeArgs& a [[buffer(0)]], device const T* src [[buffer(1)]],   \
    device const float* cs [[buffer(2)]], device const float* sn [[buffer(3)]], \
    device T* dst [[buffer(4)]], uint gid [[thread_position_in_grid]]);
RLX_ROPE("rope_f32", float)
RLX_ROPE("rope_f16", half)

// axial_rope2d_f32 -- SAM 2 axial 2-D RoPE (AxialRope2dHost thunk) on
// src / dst [rows, hidden], rows = batch * seq, hidden = heads * head_dim.
// Interleaved pairs (2p, 2p + 1) of each head; with q = head_dim / 4, pair
// p < q rotates by gx * f_p, pair q + p by gy * f_p, f_p = theta^(-4p /
// head_dim) (f32), at grid position (row % seq) % grid, gx = pos % end_x,
// gy = pos / end_x. f32 math (the host evaluates cos / sin in f64).
//
// Threadgroup layout: 1-D, one thread per pair (any threadgroup size; the
// host uses 256). args AxialRopeArgs: buffer(1) src, (2) dst.
kernel void axial_rope2d_f32(constant AxialRopeArgs& a   [[buffer(0)]],
                             device const float*     src [[buffer(1)]],
                             device float*           dst [[buffer(2)]],
                             uint gid [[thread_position_in_grid]])
{
    if (gid >= a.pairs) {
        return;
    }
    const ulong e = (ulong)gid * 2;
    const uint row = (uint)(e / a.hidden);
    const uint hc = (uint)(e % a.hidden) % a.head_dim;
    const uint p = hc / 2;
    const uint q = a.head_dim / 4;
    const uint pos = (row % a.seq) % a.grid;
    const uint fp = p < q ? p : p - q;
    const float g = p < q ? (float)(pos % a.end_x) : (float)(pos / a.end_x);
    const float ex = -(float)(4 * fp) / (float)a.head_dim;
    const float freq = precise::pow(a.theta, ex);
    const float ang = g * freq;
    const float c = precise::cos(ang);
    const float s = precise::sin(ang);
    const float x0 = src[e];
    const float x1 = src[e + 1];
    dst[e] = x0 * c - x1 * s;
    dst[e + 1] = x0 * s + x1 * c;
}
