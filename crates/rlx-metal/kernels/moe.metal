// moe.metal -- mixture-of-experts (grouped) matmuls: row i of x [m, k]
// (f32) times expert idx[i] (i32) of an expert stack, into dst [m, n]
// (f32). The f32 stack is [E, k, n] (GroupedMatMul); the GGUF stack is
// E * n packed rows of row_bytes bytes (DequantGroupedMatMulGguf), decoded
// by gguf_blocks.h (every GGUF type of the host kernel). Accumulation is f32.
//
// grouped_gemv_f32  (m <= 8, decode)  args MoeArgs: buffer(1) x, (2) w,
//     (3) idx, (4) dst. One thread per output: grid = (ceil(n / 256), m),
//     256 threads; thread j of row i walks column j of expert idx[i]
//     (consecutive threads read consecutive words of a weight row).
// grouped_gemv_<type>  (m <= 8)  same buffers. One simdgroup per output
//     (i, j), MG_SG per threadgroup, grid = (ceil(n / MG_SG), m); lanes
//     take 16-element chunks of the packed row round robin, simd_sum.
//     A decode step thus reads only the experts its rows chose.
// grouped_gemm_f32 / grouped_gemm_<type>  (any m, prefill)  same buffers.
//     Grid = (ceil(n / MT_N), E), MT_THREADS threads. The threadgroup of
//     expert e walks idx in row order, collects the rows routed to e
//     MT_M at a time (thread 0 scans, the list lives in threadgroup
//     memory) and multiplies each batch by the [MT_N] slice of expert e
//     in MT_K steps: one grouped GEMM per expert, each expert's weights
//     read once per batch of MT_M rows. An expert no row chose costs a
//     scan of idx and no weight read.
//
// Out-of-range expert ids: the row of dst is zero (as the GGUF host kernel
// gives; the f32 host kernel fails the run, which a kernel cannot do).
// The GEMM's expert-0 threadgroups collect those rows too and write zeros.
#include <metal_stdlib>
#include "args.h"
using namespace metal;
#include "gguf_blocks.h"

#define MG_SG 4
#define MV_THREADS 256
#define MT_M 32
#define MT_N 32
#define MT_K 64
#define MT_LD 65     // padded tile row (MT_K + 1)
#define MT_TILE (MT_M * MT_LD)
#define MT_THREADS 128
static_assert(MT_M == MT_N, "square tiles");
static_assert(MT_M <= 32, "the batch's zero-row flags are one uint");
static_assert(MT_THREADS == MT_N * MT_K / 16, "one GGUF weight chunk per thread");

// The expert of row i, or -1 when idx[i] is outside 0 .. num_experts - 1.
static inline int moe_expert(device const int* idx, uint i, uint num_experts) {
    const int e = idx[i];
    return (e >= 0 && uint(e) < num_experts) ? e : -1;
}

kernel void grouped_gemv_f32(constant MoeArgs&   a    [[buffer(0)]],
                             device const float* x    [[buffer(1)]],
                             device const uchar* w    [[buffer(2)]],
                             device const int*   idx  [[buffer(3)]],
                             device float*       dst  [[buffer(4)]],
                             uint2 tg  [[threadgroup_position_in_grid]],
                             uint  lid [[thread_index_in_threadgroup]])
{
    const uint j = tg.x * MV_THREADS + lid, i = tg.y;
    if (j >= a.n || i >= a.m) {
        return;
    }
    const int e = moe_expert(idx, i, a.num_experts);
    float s = 0.0f;
    if (e >= 0) {
        device const float* col = (device const float*)w + (ulong)e * a.k * a.n + j;
        device const float* xr = x + (ulong)i * a.k;
        for (uint kk = 0; kk < a.k; ++kk) {
            s += xr[kk] * col[(ulong)kk * a.n];
        }
    }
    dst[(ulong)i * a.n + j] = s;
}

template <typename Q>
kernel void grouped_gemv_q(constant MoeArgs&   a    [[buffer(0)]],
                           device const float* x    [[buffer(1)]],
                           device const uchar* w    [[buffer(2)]],
                           device const int*   idx  [[buffer(3)]],
                           device float*       dst  [[buffer(4)]],
                           uint2 tg   [[threadgroup_position_in_grid]],
                           uint  sid  [[simdgroup_index_in_threadgroup]],
                           uint  lane [[thread_index_in_simdgroup]])
{
    const uint j = tg.x * MG_SG + sid, i = tg.y;
    if (j >= a.n || i >= a.m) {
        return;  // the whole simdgroup: no simd_sum is left waiting
    }
    const int e = moe_expert(idx, i, a.num_experts);
    float acc = 0.0f;
    if (e >= 0) {
        device const uchar* row = w + ((ulong)e * a.n + j) * a.row_bytes;
        device const float* xr = x + (ulong)i * a.k;
        for (uint c = lane; c < (a.k + 15) / 16; c += 32) {
            float wv[16];
            const uint e0 = 16 * c;
            Q::decode16(row, e0, a.k, wv);
            const uint cnt = min(16u, a.k - e0);
            for (uint t = 0; t < cnt; ++t) {
                acc += wv[t] * xr[e0 + t];
            }
        }
    }
    const float s = simd_sum(acc);
    if (lane == 0) {
        dst[(ulong)i * a.n + j] = s;
    }
}

// Weight tiles of the GEMM: ws[r * MT_LD + kk] = expert e's weight for
// output n0 + r and reduction index k0 + kk (0 outside [n, k]).
struct MoeF32 {
    static void tile(constant MoeArgs& a, device const uchar* w, uint e, uint n0,
                     uint k0, uint lid, threadgroup float* ws) {
        device const float* we = (device const float*)w + (ulong)e * a.k * a.n;
        for (uint s = lid; s < MT_N * MT_K; s += MT_THREADS) {
            const uint kk = s / MT_N, r = s % MT_N;  // coalesced along n
            const bool in = n0 + r < a.n && k0 + kk < a.k;
            ws[r * MT_LD + kk] = in ? we[(ulong)(k0 + kk) * a.n + n0 + r] : 0.0f;
        }
    }
};

template <typename Q>
struct MoeGguf {
    // thread lid decodes chunk lid % 4 of row lid / 4
    static void tile(constant MoeArgs& a, device const uchar* w, uint e, uint n0,
                     uint k0, uint lid, threadgroup float* ws) {
        const uint r = lid / 4, h = lid % 4, e0 = k0 + 16 * h;
        float wv[16];
        if (n0 + r < a.n && e0 < a.k) {
            Q::decode16(w + ((ulong)e * a.n + n0 + r) * a.row_bytes, e0, a.k, wv);
        } else {
            for (uint t = 0; t < 16; ++t) {
                wv[t] = 0.0f;
            }
        }
        for (uint t = 0; t < 16; ++t) {
            ws[r * MT_LD + 16 * h + t] = wv[t];
        }
    }
};

template <typename W>
kernel void grouped_gemm(constant MoeArgs&   a    [[buffer(0)]],
                         device const float* x    [[buffer(1)]],
                         device const uchar* w    [[buffer(2)]],
                         device const int*   idx  [[buffer(3)]],
                         device float*       dst  [[buffer(4)]],
                         uint2 tg  [[threadgroup_position_in_grid]],
                         uint  lid [[thread_index_in_threadgroup]])
{
    threadgroup float xs[MT_TILE];
    threadgroup float ws[MT_TILE];
    threadgroup uint sel[MT_M];  // rows of this batch
    threadgroup uint sel_n;      // how many
    threadgroup uint sel_ok;     // bit r: sel[r] is routed to e (else a zero row)
    threadgroup uint next;       // scan cursor into idx
    const uint n0 = tg.x * MT_N, e = tg.y;
    const uint rr = lid / 8, cc = lid % 8;  // rows rr, rr + 16; cols cc + 8c
    if (lid == 0) {
        next = 0;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (;;) {
        if (lid == 0) {
            uint c = 0, ok = 0, i = next;
            for (; i < a.m && c < MT_M; ++i) {
                const int ei = moe_expert(idx, i, a.num_experts);
                if (ei >= 0 ? uint(ei) == e : e == 0) {
                    sel[c] = i;
                    ok |= uint(ei >= 0) << c;
                    ++c;
                }
            }
            next = i;
            sel_n = c;
            sel_ok = ok;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const uint cnt = sel_n, ok = sel_ok;
        if (cnt == 0) {
            break;  // uniform: every thread read the same count
        }
        float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        for (uint k0 = 0; ok != 0 && k0 < a.k; k0 += MT_K) {
            W::tile(a, w, e, n0, k0, lid, ws);
            for (uint s = lid; s < MT_M * MT_K; s += MT_THREADS) {
                const uint r = s / MT_K, col = s % MT_K;
                const bool in = r < cnt && k0 + col < a.k;
                xs[r * MT_LD + col] = in ? x[(ulong)sel[r] * a.k + k0 + col] : 0.0f;
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
            for (uint kk = 0; kk < MT_K; ++kk) {
                const float x0 = xs[rr * MT_LD + kk];
                const float x1 = xs[(rr + 16) * MT_LD + kk];
                for (uint c = 0; c < 4; ++c) {
                    const float wv = ws[(cc + 8 * c) * MT_LD + kk];
                    acc[0][c] += x0 * wv;
                    acc[1][c] += x1 * wv;
                }
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        for (uint h = 0; h < 2; ++h) {
            const uint r = rr + 16 * h;
            if (r < cnt) {
                const bool routed = (ok >> r) & 1u;
                for (uint c = 0; c < 4; ++c) {
                    const uint col = n0 + cc + 8 * c;
                    if (col < a.n) {
                        dst[(ulong)sel[r] * a.n + col] = routed ? acc[h][c] : 0.0f;
                    }
                }
            }
        }
        // every thread is done with sel before thread 0 refills it
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
}

#define RLX_MOE_GEMM(name, W)                                                    \
template [[host_name(name)]] kernel void grouped_gemm<W>(                        \
    constant MoeArgs& a [[buffer(0)]], device const float* x [[buffer(1)]],      \
    device const uchar* w [[buffer(2)]], device const int* idx [[buffer(3)]],    \
    device float* dst [[buffer(4)]], uint2 tg [[threadgroup_position_in_grid]],  \
    uint lid [[thread_index_in_threadgroup]]);

#define RLX_MOE(gemv_name, gemm_name, Q)                                         \
template [[host_name(gemv_name)]] kernel void grouped_gemv_q<Q>(                 \
    constant MoeArgs& a [[buffer(0)]], device const float* x [[buffer(1)]],      \
    device const uchar* w [[buffer(2)]], device const int* idx [[buffer(3)]],    \
    device float* dst [[buffer(4)]], uint2 tg [[threadgroup_position_in_grid]],  \
    uint sid [[simdgroup_index_in_threadgroup]],                                 \
    uint lane [[thread_index_in_simdgroup]]);                                    \
RLX_MOE_GEMM(gemm_name, MoeGguf<Q>)

RLX_MOE_GEMM("grouped_gemm_f32", MoeF32)
RLX_MOE("grouped_gemv_gguf_f32", "grouped_gemm_gguf_f32", QF32)
RLX_MOE("grouped_gemv_gguf_f16", "grouped_gemm_gguf_f16", QF16)
RLX_MOE("grouped_gemv_gguf_bf16", "grouped_gemm_gguf_bf16", QBF16)
RLX_MOE("grouped_gemv_q4_0", "grouped_gemm_q4_0", QQ4_0)
RLX_MOE("grouped_gemv_q4_1", "grouped_gemm_q4_1", QQ4_1)
RLX_MOE("grouped_gemv_q5_0", "grouped_gemm_q5_0", QQ5_0)
RLX_MOE("grouped_gemv_q5_1", "grouped_gemm_q5_1", QQ5_1)
RLX_MOE("grouped_gemv_q8_0", "grouped_gemm_q8_0", QQ8_0)
RLX_MOE("grouped_gemv_q8_1", "grouped_gemm_q8_1", QQ8_1)
RLX_MOE("grouped_gemv_q2_k", "grouped_gemm_q2_k", QQ2K)
RLX_MOE("grouped_gemv_q3_k", "grouped_gemm_q3_k", QQ3K)
RLX_MOE("grouped_gemv_q4_k", "grouped_gemm_q4_k", QQ4K)
RLX_MOE("grouped_gemv_q5_k", "grouped_gemm_q5_k", QQ5K)
RLX_MOE("grouped_gemv_q6_k", "grouped_gemm_q6_k", QQ6K)
RLX_MOE("grouped_gemv_q8_k", "grouped_gemm_q8_k", QQ8K)
RLX_MOE("grouped_gemv_q1_0", "grouped_gemm_q1_0", QQ1_0)
RLX_MOE("grouped_gemv_q2_0", "grouped_gemm_q2_0", QQ2_0)
