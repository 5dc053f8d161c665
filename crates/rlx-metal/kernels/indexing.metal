// indexing.metal -- gathers, scatter-add and the in-place ScatterND (the
// KV-cache row write). Index operands are i32.
//
// Out-of-range indices: the host kernels check every index first and fail
// the run without writing anything. A kernel cannot fail a command buffer,
// so these kernels stay memory-safe instead: a gather writes zeros for an
// out-of-range row, scatter_add ignores the update, scatter_nd skips the
// tuple. In-range inputs give exactly the host's bytes.
//
// gather_{u8,u16,u32,u64,u128}   args GatherArgs: buffer(1) table, buffer(2)
//   idx, buffer(3) dst. 1-D grid over dst words, one thread per word
//   (coalesced: consecutive threads copy consecutive words of one row).
// scatter_add_f32                args ScatterAddArgs: buffer(1) updates,
//   buffer(2) idx, buffer(3) dst. 1-D grid over dst elements; each thread
//   sums the updates of its row in index order from 0, as the host does
//   (bit-exact, no atomics, duplicates accumulate in order).
// scatter_nd_{u8,u16,u32,u64,u128}  args ScatterNdArgs: buffer(1) indices,
//   buffer(2) updates, buffer(3) dst (updated in place). One threadgroup
//   per index tuple; the threads first look for a later tuple addressing
//   the same block (the later one wins, as on the host), then copy the
//   block word by word.
// scatter_nd_{f32_f16,f16_f32}  the same, with updates of the first type
//   converted element by element into data of the second (float -> half
//   rounds to nearest even; block counts elements): an f32 K / V row
//   appended to an f16 KV cache without a separate cast dispatch.
// gather_elements_{u8,u16,u32,u64}  args GatherElemArgs: buffer(1) data,
//   buffer(2) idx, buffer(3) dst. 1-D grid over dst elements (ONNX
//   GatherElements: the MoE router's chosen-probability gather).
#include <metal_stdlib>
#include "args.h"
using namespace metal;

// dst [outer, num_idx, trailing] = table [outer, axis_dim, trailing][:, idx, :]
template <typename W>
kernel void gather(constant GatherArgs& a   [[buffer(0)]],
                   device const W*     table [[buffer(1)]],
                   device const int*   idx   [[buffer(2)]],
                   device W*           dst   [[buffer(3)]],
                   uint gid [[thread_position_in_grid]])
{
    if (a.trailing == 0 || gid >= a.outer * a.num_idx * a.trailing) {
        return;
    }
    const uint row = gid / a.trailing;
    const uint j = gid - row * a.trailing;
    const uint o = row / a.num_idx;
    const uint n = row - o * a.num_idx;
    long i = idx[n];
    if (i < 0 && a.signed_idx != 0) {
        i += a.axis_dim;
    }
    if (i < 0 || i >= (long)a.axis_dim) {
        dst[gid] = W(0);
        return;
    }
    dst[gid] = table[((ulong)o * a.axis_dim + (ulong)i) * a.trailing + j];
}

// dst [out_dim, trailing] = 0; dst[idx[i], :] += updates[i, :] in order
kernel void scatter_add_f32(constant ScatterAddArgs& a   [[buffer(0)]],
                            device const float*      upd [[buffer(1)]],
                            device const int*        idx [[buffer(2)]],
                            device float*            dst [[buffer(3)]],
                            uint gid [[thread_position_in_grid]])
{
    if (a.trailing == 0 || gid >= a.out_dim * a.trailing) {
        return;
    }
    const uint r = gid / a.trailing;
    const uint j = gid - r * a.trailing;
    float acc = 0.0f;
    for (uint i = 0; i < a.num; ++i) {
        if (idx[i] == (int)r) {
            acc = acc + upd[(ulong)i * a.trailing + j];
        }
    }
    dst[gid] = acc;
}

// Block index of tuple t (q indices, negative from the end), or -1.
static inline long rlx_block_of(constant ScatterNdArgs& a, device const int* ind, uint t)
{
    long b = 0;
    for (uint k = 0; k < a.q; ++k) {
        long i = ind[(ulong)t * a.q + k];
        const long d = a.dims[k];
        if (i < 0) {
            i += d;
        }
        if (i < 0 || i >= d) {
            return -1;
        }
        b = b * d + i;
    }
    return b;
}

// Block of tuple t, or -1 when it is out of range or a later tuple
// addresses the same block (the later one wins). Every thread of the
// threadgroup calls it (it has a barrier).
static inline long rlx_scatter_block(constant ScatterNdArgs& a, device const int* ind,
                                     threadgroup uint* later, uint t, uint lid, uint tpg,
                                     uint sid, uint lane, uint nsg)
{
    const long b = rlx_block_of(a, ind, t);
    uint dup = 0;
    for (uint u = t + 1 + lid; u < a.tuples; u += tpg) {
        dup |= (uint)(rlx_block_of(a, ind, u) == b);
    }
    dup = simd_max(dup);
    if (lane == 0) {
        later[sid] = dup;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    dup = simd_max(lane < nsg ? later[lane] : 0u);
    return dup != 0 ? -1 : b;
}

// dst[block(indices[t])] = T(updates[t]) for each tuple t, in place
// (S == T: a plain word copy)
template <typename S, typename T>
kernel void scatter_nd(constant ScatterNdArgs& a   [[buffer(0)]],
                       device const int*       ind [[buffer(1)]],
                       device const S*         upd [[buffer(2)]],
                       device T*               dst [[buffer(3)]],
                       uint t    [[threadgroup_position_in_grid]],
                       uint lid  [[thread_position_in_threadgroup]],
                       uint tpg  [[threads_per_threadgroup]],
                       uint sid  [[simdgroup_index_in_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]],
                       uint nsg  [[simdgroups_per_threadgroup]])
{
    threadgroup uint later[32];
    if (t >= a.tuples) {
        return;
    }
    const long b = rlx_scatter_block(a, ind, later, t, lid, tpg, sid, lane, nsg);
    if (b < 0) {
        return;
    }
    device T* out = dst + (ulong)b * a.block;
    device const S* in = upd + (ulong)t * a.block;
    for (uint j = lid; j < a.block; j += tpg) {
        out[j] = T(in[j]);
    }
}

#define RLX_SCATTER_ND(name, S, T)                                           \
template [[host_name(name)]] kernel void scatter_nd<S, T>(                   \
    constant ScatterNdArgs& a [[buffer(0)]], device const int* ind [[buffer(1)]],\
    device const S* upd [[buffer(2)]], device T* dst [[buffer(3)]],          \
    uint t [[threadgroup_position_in_grid]],                                 \
    uint lid [[thread_position_in_threadgroup]],                             \
    uint tpg [[threads_per_threadgroup]],                                    \
    uint sid [[simdgroup_index_in_threadgroup]],                             \
    uint lane [[thread_index_in_simdgroup]],                                 \
    uint nsg [[simdgroups_per_threadgroup]]);
RLX_SCATTER_ND("scatter_nd_f32_f16", float, half)
RLX_SCATTER_ND("scatter_nd_f16_f32", half, float)

// dst[p] = data[p's coordinates over idx_dims, `axis` one replaced by idx[p]]
template <typename W>
kernel void gather_elements(constant GatherElemArgs& a [[buffer(0)]],
                            device const W*   data [[buffer(1)]],
                            device const int* idx  [[buffer(2)]],
                            device W*         dst  [[buffer(3)]],
                            uint gid [[thread_position_in_grid]])
{
    if (gid >= a.len) {
        return;
    }
    long i = idx[gid];
    if (i < 0) {
        i += a.axis_dim;
    }
    if (i < 0 || i >= (long)a.axis_dim) {
        dst[gid] = W(0);
        return;
    }
    ulong off = 0;
    uint p = gid;
    for (uint d = a.rank; d-- > 0;) {
        const uint c = p % a.idx_dims[d];
        p /= a.idx_dims[d];
        off += (ulong)(d == a.axis ? uint(i) : c) * a.data_strides[d];
    }
    dst[gid] = data[off];
}

#define RLX_GATHER_ELEMENTS(name, W)                                         \
template [[host_name(name)]] kernel void gather_elements<W>(                 \
    constant GatherElemArgs& a [[buffer(0)]], device const W* data [[buffer(1)]],\
    device const int* idx [[buffer(2)]], device W* dst [[buffer(3)]],        \
    uint gid [[thread_position_in_grid]]);
RLX_GATHER_ELEMENTS("gather_elements_u8", uchar)
RLX_GATHER_ELEMENTS("gather_elements_u16", ushort)
RLX_GATHER_ELEMENTS("gather_elements_u32", uint)
RLX_GATHER_ELEMENTS("gather_elements_u64", uint2)

#define RLX_INDEXING(gather_n, scatter_n, W)                                 \
template [[host_name(gather_n)]] kernel void gather<W>(                      \
    constant GatherArgs& a [[buffer(0)]], device const W* table [[buffer(1)]],\
    device const int* idx [[buffer(2)]], device W* dst [[buffer(3)]],        \
    uint gid [[thread_position_in_grid]]);                                   \
RLX_SCATTER_ND(scatter_n, W, W)
RLX_INDEXING("gather_u8", "scatter_nd_u8", uchar)
RLX_INDEXING("gather_u16", "scatter_nd_u16", ushort)
RLX_INDEXING("gather_u32", "scatter_nd_u32", uint)
RLX_INDEXING("gather_u64", "scatter_nd_u64", uint2)
RLX_INDEXING("gather_u128", "scatter_nd_u128", uint4)
