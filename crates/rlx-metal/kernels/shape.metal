// shape.metal -- layout moves: copy, narrow, split, concat, strided
// transpose / broadcast and reverse.
//
// Every kernel only moves words, so each is instantiated per word width
// (u8, u16, u32, u64 = uint2, u128 = uint4) instead of per dtype; the
// lowering picks the widest word that divides every column count and
// buffer offset (an f16 narrow of even columns moves u32 pairs, a copy of
// 16-byte-aligned bytes moves uint4). All dims and strides in the args are
// in words.
//
// Threadgroup layout: 1-D grid over the output words (x), one thread per
// word, any threadgroup size (256 is the host's choice), threads past the
// end return at once. split / concat run their pieces along grid y (one
// row of threadgroups per piece, sized for the longest). Consecutive
// threads write consecutive destination words (coalesced writes); reads
// are consecutive too except for transpose. No threadgroup memory.
//
// copy_{u8,u16,u32,u64,u128}      args CopyArgs:    buffer(1) src, buffer(2) dst
// narrow_{...}                    args NarrowArgs:  buffer(1) src, buffer(2) dst
// split_{...}                     args SplitArgs:   buffer(1) src,
//                                   buffer(2 + s) dst of segment s (s < 8;
//                                   unused ones bound to any buffer)
// concat_{...}                    args ConcatArgs:  buffer(1) dst,
//                                   buffer(2 + k) input k (k < 8; unused
//                                   ones bound to any buffer)
// transpose_u32                   args StridedArgs: buffer(1) src, buffer(2) dst
// reverse_{u8,u16,u32,u64}        args ReverseArgs: buffer(1) src, buffer(2) dst
#include <metal_stdlib>
#include "args.h"
using namespace metal;

template <typename W>
kernel void copy_words(constant CopyArgs& a  [[buffer(0)]],
                       device const W*   src [[buffer(1)]],
                       device W*         dst [[buffer(2)]],
                       uint gid [[thread_position_in_grid]])
{
    if (gid < a.len) {
        dst[gid] = src[gid];
    }
}

// dst [rows, len] = src [rows, src_cols][:, start .. start + len]
template <typename W>
kernel void narrow(constant NarrowArgs& a  [[buffer(0)]],
                   device const W*     src [[buffer(1)]],
                   device W*           dst [[buffer(2)]],
                   uint gid [[thread_position_in_grid]])
{
    if (a.len == 0 || gid >= a.rows * a.len) {
        return;
    }
    const uint r = gid / a.len;
    const uint c = gid - r * a.len;
    dst[gid] = src[(ulong)r * a.src_cols + a.start + c];
}

// segment s = gid.y: dst_s [rows, len[s]] = src[:, start[s] .. + len[s]]
template <typename W>
kernel void split(constant SplitArgs& a  [[buffer(0)]],
                  device const W*    src [[buffer(1)]],
                  device W* d0 [[buffer(2)]], device W* d1 [[buffer(3)]],
                  device W* d2 [[buffer(4)]], device W* d3 [[buffer(5)]],
                  device W* d4 [[buffer(6)]], device W* d5 [[buffer(7)]],
                  device W* d6 [[buffer(8)]], device W* d7 [[buffer(9)]],
                  uint2 gid [[thread_position_in_grid]])
{
    const uint s = gid.y;
    if (s >= a.count) {
        return;
    }
    const uint len = a.len[s];
    if (len == 0 || gid.x >= a.rows * len) {
        return;
    }
    device W* dst;
    switch (s) {
    case 0: dst = d0; break;
    case 1: dst = d1; break;
    case 2: dst = d2; break;
    case 3: dst = d3; break;
    case 4: dst = d4; break;
    case 5: dst = d5; break;
    case 6: dst = d6; break;
    default: dst = d7; break;
    }
    const uint r = gid.x / len;
    const uint c = gid.x - r * len;
    dst[gid.x] = src[(ulong)r * a.src_cols + a.start[s] + c];
}

// input k = gid.y: dst [outer, dst_cols][:, at[k] .. + cols[k]] = in_k
template <typename W>
kernel void concat(constant ConcatArgs& a [[buffer(0)]],
                   device W*           dst [[buffer(1)]],
                   device const W* i0 [[buffer(2)]], device const W* i1 [[buffer(3)]],
                   device const W* i2 [[buffer(4)]], device const W* i3 [[buffer(5)]],
                   device const W* i4 [[buffer(6)]], device const W* i5 [[buffer(7)]],
                   device const W* i6 [[buffer(8)]], device const W* i7 [[buffer(9)]],
                   uint2 gid [[thread_position_in_grid]])
{
    const uint k = gid.y;
    if (k >= a.count) {
        return;
    }
    const uint cols = a.cols[k];
    if (cols == 0 || gid.x >= a.outer * cols) {
        return;
    }
    device const W* src;
    switch (k) {
    case 0: src = i0; break;
    case 1: src = i1; break;
    case 2: src = i2; break;
    case 3: src = i3; break;
    case 4: src = i4; break;
    case 5: src = i5; break;
    case 6: src = i6; break;
    default: src = i7; break;
    }
    const uint o = gid.x / cols;
    const uint c = gid.x - o * cols;
    dst[(ulong)o * a.dst_cols + a.at[k] + c] = src[gid.x];
}

// dst (dense over out_dims) [i] = src[sum_d i_d * in_strides[d]]
kernel void transpose_u32(constant StridedArgs& a  [[buffer(0)]],
                          device const uint*   src [[buffer(1)]],
                          device uint*         dst [[buffer(2)]],
                          uint gid [[thread_position_in_grid]])
{
    if (gid >= a.len) {
        return;
    }
    uint rem = gid;
    ulong at = 0;
    for (uint d = a.rank; d-- > 0;) {
        const uint n = a.out_dims[d];
        const uint i = rem % n;
        rem /= n;
        at += (ulong)i * a.in_strides[d];
    }
    dst[gid] = src[at];
}

// dst[i] = src[i with the axes of rev_mask (bit d = axis d) flipped]
template <typename W>
kernel void reverse(constant ReverseArgs& a  [[buffer(0)]],
                    device const W*      src [[buffer(1)]],
                    device W*            dst [[buffer(2)]],
                    uint gid [[thread_position_in_grid]])
{
    if (gid >= a.len) {
        return;
    }
    uint rem = gid;
    uint at = 0;
    uint stride = 1;
    for (uint d = a.rank; d-- > 0;) {
        const uint n = a.dims[d];
        const uint i = rem % n;
        rem /= n;
        at += ((a.rev_mask >> d) & 1u ? n - 1 - i : i) * stride;
        stride *= n;
    }
    dst[gid] = src[at];
}

#define RLX_MOVES(copy_n, narrow_n, split_n, concat_n, W)                                                     \
template [[host_name(copy_n)]] kernel void copy_words<W>(               \
    constant CopyArgs& a [[buffer(0)]], device const W* src [[buffer(1)]],  \
    device W* dst [[buffer(2)]], uint gid [[thread_position_in_grid]]);      \
template [[host_name(narrow_n)]] kernel void narrow<W>(                 \
    constant NarrowArgs& a [[buffer(0)]], device const W* src [[buffer(1)]],\
    device W* dst [[buffer(2)]], uint gid [[thread_position_in_grid]]);      \
template [[host_name(split_n)]] kernel void split<W>(                   \
    constant SplitArgs& a [[buffer(0)]], device const W* src [[buffer(1)]], \
    device W* d0 [[buffer(2)]], device W* d1 [[buffer(3)]],                  \
    device W* d2 [[buffer(4)]], device W* d3 [[buffer(5)]],                  \
    device W* d4 [[buffer(6)]], device W* d5 [[buffer(7)]],                  \
    device W* d6 [[buffer(8)]], device W* d7 [[buffer(9)]],                  \
    uint2 gid [[thread_position_in_grid]]);                                  \
template [[host_name(concat_n)]] kernel void concat<W>(                 \
    constant ConcatArgs& a [[buffer(0)]], device W* dst [[buffer(1)]],      \
    device const W* i0 [[buffer(2)]], device const W* i1 [[buffer(3)]],      \
    device const W* i2 [[buffer(4)]], device const W* i3 [[buffer(5)]],      \
    device const W* i4 [[buffer(6)]], device const W* i5 [[buffer(7)]],      \
    device const W* i6 [[buffer(8)]], device const W* i7 [[buffer(9)]],      \
    uint2 gid [[thread_position_in_grid]]);
RLX_MOVES("copy_u8", "narrow_u8", "split_u8", "concat_u8", uchar)
RLX_MOVES("copy_u16", "narrow_u16", "split_u16", "concat_u16", ushort)
RLX_MOVES("copy_u32", "narrow_u32", "split_u32", "concat_u32", uint)
RLX_MOVES("copy_u64", "narrow_u64", "split_u64", "concat_u64", uint2)
RLX_MOVES("copy_u128", "narrow_u128", "split_u128", "concat_u128", uint4)

#define RLX_REVERSE(name, W)                                                  \
template [[host_name(name)]] kernel void reverse<W>(               \
    constant ReverseArgs& a [[buffer(0)]], device const W* src [[buffer(1)]],\
    device W* dst [[buffer(2)]], uint gid [[thread_position_in_grid]]);
RLX_REVERSE("reverse_u8", uchar)
RLX_REVERSE("reverse_u16", ushort)
RLX_REVERSE("reverse_u32", uint)
RLX_REVERSE("reverse_u64", uint2)
