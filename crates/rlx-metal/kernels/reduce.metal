// reduce.metal -- axis reductions, arg max / min and the last-axis
// cumulative sum. Inputs are viewed as [outer, reduced, inner].
//
// Row kernels (inner == 1: the reduced axis is contiguous): one
// threadgroup per row, any size 32..1024 (the host picks min(1024,
// reduced rounded up to 32)); threads stride over the row, then simd
// reductions and a 32-entry threadgroup array combine the partials.
// Column kernels (inner > 1): 1-D grid, one thread per output, walking
// the reduced axis in order (consecutive threads read consecutive words).
//
// Math in f32 (the host accumulates sums / products in f64: results agree
// to f32 rounding of the sum, not bit for bit). Max / min propagate NaN;
// an empty reduction gives the identity (0, 1, -inf, +inf; NaN for mean).
// Arg max / min return the first extreme index, a NaN winning at its first
// occurrence (the host's rule), exactly.
//
// reduce_rows_{f32,f16}, reduce_cols_{f32,f16}   args ReduceArgs:
//   buffer(1) src, buffer(2) dst [outer, inner]
// argreduce_rows_f32, argreduce_cols_f32       args ArgReduceArgs:
//   buffer(1) src (f32), buffer(2) dst (i32) [outer, inner]
// topk_f32   args TopKArgs: buffer(1) src [outer, n] (f32), buffer(2) dst
//   (i32) [outer, k]; one threadgroup per row, threads a multiple of 32
//   (full simdgroups). k rounds; round r picks the first-ranked element
//   ranked after round r-1's pick (rank: value descending, ties by lower
//   index, NaN after every number, NaNs by index: the host's order), by
//   a strided scan, a simd butterfly and a pass over the simdgroups'
//   picks. O(k·n) reads: meant for small k (the lowering caps k at 64).
// cumsum_f32  args CumsumArgs: buffer(1) src [rows, cols], buffer(2) dst;
//   one threadgroup per row, scanned in chunks of the threadgroup size
//   (simd prefix sums + the simdgroup totals + a running carry).
#include <metal_stdlib>
#include "args.h"
using namespace metal;

// "no index yet" marker of the arg reductions.
#define RLX_NONE 0xFFFFFFFFu

static inline float rlx_red_init(uint op) {
    switch (op) {
    case RLX_RED_PROD: return 1.0f;
    case RLX_RED_MAX:  return -INFINITY;
    case RLX_RED_MIN:  return INFINITY;
    default:           return 0.0f;
    }
}

static inline float rlx_red_step(uint op, float acc, float v) {
    switch (op) {
    case RLX_RED_PROD: return acc * v;
    case RLX_RED_MAX:  return (isnan(v) || v > acc) ? v : acc;
    case RLX_RED_MIN:  return (isnan(v) || v < acc) ? v : acc;
    default:           return acc + v;
    }
}

// NaN is handled by the caller's flag (simd max / min drop NaN).
static inline float rlx_red_simd(uint op, float v) {
    switch (op) {
    case RLX_RED_PROD: return simd_product(v);
    case RLX_RED_MAX:  return simd_max(v);
    case RLX_RED_MIN:  return simd_min(v);
    default:           return simd_sum(v);
    }
}

static inline float rlx_red_finish(constant ReduceArgs& a, float acc, uint nan) {
    if (nan != 0 && (a.op == RLX_RED_MAX || a.op == RLX_RED_MIN)) {
        return NAN;
    }
    return a.op == RLX_RED_MEAN ? acc / float(a.reduced) : acc;
}

template <typename T>
kernel void reduce_rows(constant ReduceArgs& a  [[buffer(0)]],
                        device const T*     src [[buffer(1)]],
                        device T*           dst [[buffer(2)]],
                        uint row  [[threadgroup_position_in_grid]],
                        uint lid  [[thread_position_in_threadgroup]],
                        uint tpg  [[threads_per_threadgroup]],
                        uint sid  [[simdgroup_index_in_threadgroup]],
                        uint lane [[thread_index_in_simdgroup]],
                        uint nsg  [[simdgroups_per_threadgroup]])
{
    threadgroup float part[32];
    threadgroup uint nanp[32];
    device const T* x = src + (ulong)row * a.reduced;
    const float init = rlx_red_init(a.op);
    float acc = init;
    uint nan = 0;
    for (uint i = lid; i < a.reduced; i += tpg) {
        const float v = float(x[i]);
        nan |= (uint)isnan(v);
        acc = rlx_red_step(a.op, acc, v);
    }
    acc = rlx_red_simd(a.op, acc);
    nan = simd_max(nan);
    if (lane == 0) {
        part[sid] = acc;
        nanp[sid] = nan;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    acc = rlx_red_simd(a.op, lane < nsg ? part[lane] : init);
    nan = simd_max(lane < nsg ? nanp[lane] : 0u);
    if (lid == 0) {
        dst[row] = T(rlx_red_finish(a, acc, nan));
    }
}

template <typename T>
kernel void reduce_cols(constant ReduceArgs& a  [[buffer(0)]],
                        device const T*     src [[buffer(1)]],
                        device T*           dst [[buffer(2)]],
                        uint gid [[thread_position_in_grid]])
{
    if (a.inner == 0 || gid >= a.outer * a.inner) {
        return;
    }
    const uint o = gid / a.inner;
    const uint i = gid - o * a.inner;
    device const T* x = src + (ulong)o * a.reduced * a.inner + i;
    float acc = rlx_red_init(a.op);
    uint nan = 0;
    for (uint r = 0; r < a.reduced; ++r) {
        const float v = float(x[(ulong)r * a.inner]);
        nan |= (uint)isnan(v);
        acc = rlx_red_step(a.op, acc, v);
    }
    dst[gid] = T(rlx_red_finish(a, acc, nan));
}

kernel void argreduce_rows_f32(constant ArgReduceArgs& a  [[buffer(0)]],
                               device const float*     src [[buffer(1)]],
                               device int*             dst [[buffer(2)]],
                               uint row  [[threadgroup_position_in_grid]],
                               uint lid  [[thread_position_in_threadgroup]],
                               uint tpg  [[threads_per_threadgroup]],
                               uint sid  [[simdgroup_index_in_threadgroup]],
                               uint lane [[thread_index_in_simdgroup]],
                               uint nsg  [[simdgroups_per_threadgroup]])
{
    threadgroup uint first_nan[32];
    threadgroup float bestp[32];
    threadgroup uint idxp[32];
    device const float* x = src + (ulong)row * a.reduced;
    const bool mx = a.is_max != 0;
    // per thread: its first NaN, its extreme value and that value's first index
    uint nan_i = RLX_NONE, bi = RLX_NONE;
    float best = mx ? -INFINITY : INFINITY;
    for (uint i = lid; i < a.reduced; i += tpg) {
        const float v = x[i];
        if (isnan(v)) {
            nan_i = min(nan_i, i);
        } else if (bi == RLX_NONE || (mx ? v > best : v < best)) {
            best = v;
            bi = i;
        }
    }
    nan_i = simd_min(nan_i);
    const float sbest = mx ? simd_max(best) : simd_min(best);
    if (lane == 0) {
        first_nan[sid] = nan_i;
        bestp[sid] = sbest;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    nan_i = simd_min(lane < nsg ? first_nan[lane] : RLX_NONE);
    const float fill = mx ? -INFINITY : INFINITY;
    const float gb = mx ? simd_max(lane < nsg ? bestp[lane] : fill)
                        : simd_min(lane < nsg ? bestp[lane] : fill);
    uint cand = simd_min(bi != RLX_NONE && best == gb ? bi : RLX_NONE);
    if (lane == 0) {
        idxp[sid] = cand;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    cand = simd_min(lane < nsg ? idxp[lane] : RLX_NONE);
    if (lid == 0) {
        dst[row] = int(nan_i != RLX_NONE ? nan_i : (cand == RLX_NONE ? 0u : cand));
    }
}

kernel void argreduce_cols_f32(constant ArgReduceArgs& a  [[buffer(0)]],
                               device const float*     src [[buffer(1)]],
                               device int*             dst [[buffer(2)]],
                               uint gid [[thread_position_in_grid]])
{
    if (a.inner == 0 || gid >= a.outer * a.inner) {
        return;
    }
    const uint o = gid / a.inner;
    const uint i = gid - o * a.inner;
    device const float* x = src + (ulong)o * a.reduced * a.inner + i;
    float best = x[0];
    uint bi = 0;
    for (uint r = 1; r < a.reduced && !isnan(best); ++r) {
        const float v = x[(ulong)r * a.inner];
        if (isnan(v) || (a.is_max != 0 ? v > best : v < best)) {
            best = v;
            bi = r;
        }
    }
    dst[gid] = int(bi);
}

kernel void cumsum_f32(constant CumsumArgs& a  [[buffer(0)]],
                       device const float* src [[buffer(1)]],
                       device float*       dst [[buffer(2)]],
                       uint row  [[threadgroup_position_in_grid]],
                       uint lid  [[thread_position_in_threadgroup]],
                       uint tpg  [[threads_per_threadgroup]],
                       uint sid  [[simdgroup_index_in_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]],
                       uint nsg  [[simdgroups_per_threadgroup]])
{
    threadgroup float tot[32];
    device const float* x = src + (ulong)row * a.cols;
    device float* y = dst + (ulong)row * a.cols;
    float carry = 0.0f;
    for (uint base = 0; base < a.cols; base += tpg) {
        const uint i = base + lid;
        const float v = i < a.cols ? x[i] : 0.0f;
        const float incl = simd_prefix_inclusive_sum(v);
        const float excl = simd_prefix_exclusive_sum(v);
        if (lane == 31 || lid == tpg - 1) {
            tot[sid] = incl;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        float before = carry;
        for (uint s = 0; s < sid; ++s) {
            before += tot[s];
        }
        if (i < a.cols) {
            y[i] = before + (a.exclusive != 0 ? excl : incl);
        }
        for (uint s = sid; s < nsg; ++s) {
            before += tot[s];
        }
        carry = before;
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
}

// True when (av, ai) ranks before (bv, bi) in top-k order; index RLX_NONE
// is "nothing" and ranks after everything.
static inline bool rlx_before(float av, uint ai, float bv, uint bi) {
    if (ai == RLX_NONE || bi == RLX_NONE) {
        return bi == RLX_NONE && ai != RLX_NONE;
    }
    const bool an = isnan(av), bn = isnan(bv);
    if (an != bn) {
        return bn;
    }
    if (!an && av != bv) {
        return av > bv;
    }
    return ai < bi;
}

kernel void topk_f32(constant TopKArgs& a  [[buffer(0)]],
                     device const float* src [[buffer(1)]],
                     device int*         dst [[buffer(2)]],
                     uint row  [[threadgroup_position_in_grid]],
                     uint lid  [[thread_position_in_threadgroup]],
                     uint tpg  [[threads_per_threadgroup]],
                     uint sid  [[simdgroup_index_in_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]],
                     uint nsg  [[simdgroups_per_threadgroup]])
{
    threadgroup float pv_s[32];
    threadgroup uint pi_s[32];
    device const float* x = src + (ulong)row * a.n;
    float pv = 0.0f;
    uint pi = RLX_NONE;  // the previous pick (none yet)
    for (uint r = 0; r < a.k; ++r) {
        float cv = 0.0f;
        uint ci = RLX_NONE;
        for (uint i = lid; i < a.n; i += tpg) {
            const float v = x[i];
            if ((pi == RLX_NONE || rlx_before(pv, pi, v, i)) && rlx_before(v, i, cv, ci)) {
                cv = v;
                ci = i;
            }
        }
        for (uint off = 16; off > 0; off >>= 1) {
            const float ov = simd_shuffle_xor(cv, off);
            const uint oi = simd_shuffle_xor(ci, off);
            if (rlx_before(ov, oi, cv, ci)) {
                cv = ov;
                ci = oi;
            }
        }
        if (lane == 0) {
            pv_s[sid] = cv;
            pi_s[sid] = ci;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        pv = pv_s[0];
        pi = pi_s[0];
        for (uint s = 1; s < nsg; ++s) {
            if (rlx_before(pv_s[s], pi_s[s], pv, pi)) {
                pv = pv_s[s];
                pi = pi_s[s];
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (lid == 0) {
            dst[(ulong)row * a.k + r] = int(pi);
        }
    }
}

#define RLX_REDUCE(rows_n, cols_n, T)                                        \
template [[host_name(rows_n)]] kernel void reduce_rows<T>(                   \
    constant ReduceArgs& a [[buffer(0)]], device const T* src [[buffer(1)]],\
    device T* dst [[buffer(2)]], uint row [[threadgroup_position_in_grid]],  \
    uint lid [[thread_position_in_threadgroup]],                             \
    uint tpg [[threads_per_threadgroup]],                                    \
    uint sid [[simdgroup_index_in_threadgroup]],                             \
    uint lane [[thread_index_in_simdgroup]],                                 \
    uint nsg [[simdgroups_per_threadgroup]]);                                \
template [[host_name(cols_n)]] kernel void reduce_cols<T>(                   \
    constant ReduceArgs& a [[buffer(0)]], device const T* src [[buffer(1)]],\
    device T* dst [[buffer(2)]], uint gid [[thread_position_in_grid]]);
RLX_REDUCE("reduce_rows_f32", "reduce_cols_f32", float)
RLX_REDUCE("reduce_rows_f16", "reduce_cols_f16", half)
