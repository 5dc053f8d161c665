// matmul.metal -- dense row-major GEMM / GEMV with a bias + activation
// epilogue, and the [m, n] + bias[n] broadcast add.
//
// gemm_{f32,f32_w16,f16}   args MatmulArgs: buffer(1) a [batch|1, m, k],
//     buffer(2) b [batch|1, k, n], buffer(3) bias [n] (read only when
//     has_bias, but bound), buffer(4) c [batch, m, n];
//     c = act(a @ b + bias). `w16`: a and c f32, b f16.
//     Tiled: grid (ceil(n/64), ceil(m/64), batch), 256 threads. Each
//     threadgroup computes a 64x64 tile of c; per step of 16 along k it
//     stages a 64x16 tile of a (stored k-major) and a 16x64 tile of b in
//     threadgroup memory (8 KiB, static), with coalesced loads and zero
//     fill past the edges; thread (tx, ty) = (lid % 16, lid / 16)
//     accumulates the 4x4 outputs rows ty + 16i, columns tx + 16j in
//     registers (f32, fused multiply-add).
// gemv_{f32,f32_w16,f16}   the same args and bindings, for m == 1 (LLM
//     decode): grid (ceil(n/64), 1, batch), 256 threads = 8 simdgroups.
//     Lane l owns columns col0 + l and col0 + l + 32 (coalesced reads of
//     a row of b); simdgroup s sums the k = s, s + 8, ... terms; the 8
//     partial sums per column meet in threadgroup memory. (b is [k, n]
//     row-major, so the reduction runs across simdgroups, not lanes: a
//     lane-wise simd_sum would read b column-wise, uncoalesced.)
// gemm_sg_{f32,f32_w16,f16}  the same args and bindings, simdgroup-matrix
//     tiles: grid (ceil(n/32), ceil(m/32), batch), 128 threads = 4
//     simdgroups. a 32x16 tile of a and a 16x32 tile of b are staged in
//     threadgroup memory as f32 (zero fill past the edges); simdgroup s
//     owns the 16x16 quarter (s / 2, s % 2) of the 32x32 output tile as
//     2x2 simdgroup_float8x8 accumulators (simdgroup_multiply_accumulate),
//     stores them to a threadgroup tile, and all threads write the
//     epilogue with bounds checks.
// bias_add_{f32,f16}       args BiasAddArgs: buffer(1) src [m, n],
//     buffer(2) bias [n], buffer(3) dst [m, n] (src == dst allowed);
//     1-D grid, one thread per element.
//
// All arithmetic in f32; f16 results are rounded once at the store.
#include <metal_stdlib>
#include "args.h"
using namespace metal;
#include "act.h"

#define RLX_MM_BM 64
#define RLX_MM_BN 64
#define RLX_MM_BK 16
#define RLX_MM_THREADS 256

static inline float rlx_epilogue(constant MatmulArgs& p, float v, float bias) {
    v += bias;
    return p.has_act != 0 ? rlx_act(p.act, v) : v;
}

template <typename TA, typename TB>
kernel void gemm(constant MatmulArgs& p    [[buffer(0)]],
                 device const TA*     a    [[buffer(1)]],
                 device const TB*     b    [[buffer(2)]],
                 device const TA*     bias [[buffer(3)]],
                 device TA*           c    [[buffer(4)]],
                 uint3 tg  [[threadgroup_position_in_grid]],
                 uint  lid [[thread_index_in_threadgroup]])
{
    threadgroup float as[RLX_MM_BK][RLX_MM_BM];
    threadgroup float bs[RLX_MM_BK][RLX_MM_BN];
    const uint m = p.m, k = p.k, n = p.n;
    const uint row0 = tg.y * RLX_MM_BM;
    const uint col0 = tg.x * RLX_MM_BN;
    a += (ulong)tg.z * p.a_batch_stride;
    b += (ulong)tg.z * p.b_batch_stride;
    c += (ulong)tg.z * m * n;
    const uint tx = lid % 16;
    const uint ty = lid / 16;
    float acc[4][4];
    for (uint i = 0; i < 4; ++i) {
        for (uint j = 0; j < 4; ++j) {
            acc[i][j] = 0.0f;
        }
    }
    for (uint k0 = 0; k0 < k; k0 += RLX_MM_BK) {
        for (uint r = 0; r < 4; ++r) {
            const uint e = lid + RLX_MM_THREADS * r;
            // a tile: 64 rows x 16 k, row-major reads
            const uint ar = row0 + e / RLX_MM_BK;
            const uint ak = k0 + e % RLX_MM_BK;
            as[e % RLX_MM_BK][e / RLX_MM_BK] =
                (ar < m && ak < k) ? float(a[(ulong)ar * k + ak]) : 0.0f;
            // b tile: 16 k x 64 columns
            const uint bk = k0 + e / RLX_MM_BN;
            const uint bc = col0 + e % RLX_MM_BN;
            bs[e / RLX_MM_BN][e % RLX_MM_BN] =
                (bk < k && bc < n) ? float(b[(ulong)bk * n + bc]) : 0.0f;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint kk = 0; kk < RLX_MM_BK; ++kk) {
            float av[4];
            float bv[4];
            for (uint i = 0; i < 4; ++i) {
                av[i] = as[kk][ty + 16 * i];
                bv[i] = bs[kk][tx + 16 * i];
            }
            for (uint i = 0; i < 4; ++i) {
                for (uint j = 0; j < 4; ++j) {
                    acc[i][j] = fma(av[i], bv[j], acc[i][j]);
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    for (uint i = 0; i < 4; ++i) {
        const uint r = row0 + ty + 16 * i;
        for (uint j = 0; j < 4; ++j) {
            const uint col = col0 + tx + 16 * j;
            if (r < m && col < n) {
                const float bv = p.has_bias != 0 ? float(bias[col]) : 0.0f;
                c[(ulong)r * n + col] = TA(rlx_epilogue(p, acc[i][j], bv));
            }
        }
    }
}

template <typename TA, typename TB>
kernel void gemm_sg(constant MatmulArgs& p    [[buffer(0)]],
                    device const TA*     a    [[buffer(1)]],
                    device const TB*     b    [[buffer(2)]],
                    device const TA*     bias [[buffer(3)]],
                    device TA*           c    [[buffer(4)]],
                    uint3 tg  [[threadgroup_position_in_grid]],
                    uint  lid [[thread_index_in_threadgroup]],
                    uint  sid [[simdgroup_index_in_threadgroup]])
{
    threadgroup float as[32][16];
    threadgroup float bs[16][32];
    threadgroup float cs[32][32];
    const uint m = p.m, k = p.k, n = p.n;
    const uint row0 = tg.y * 32;
    const uint col0 = tg.x * 32;
    a += (ulong)tg.z * p.a_batch_stride;
    b += (ulong)tg.z * p.b_batch_stride;
    c += (ulong)tg.z * m * n;
    const uint sr = (sid / 2) * 16;
    const uint sc = (sid % 2) * 16;
    simdgroup_float8x8 acc[2][2];
    for (uint i = 0; i < 2; ++i) {
        for (uint j = 0; j < 2; ++j) {
            acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
        }
    }
    for (uint k0 = 0; k0 < k; k0 += 16) {
        for (uint r = 0; r < 4; ++r) {
            const uint e = lid + 128 * r;
            const uint ar = row0 + e / 16;
            const uint ak = k0 + e % 16;
            as[e / 16][e % 16] = (ar < m && ak < k) ? float(a[(ulong)ar * k + ak]) : 0.0f;
            const uint bk = k0 + e / 32;
            const uint bc = col0 + e % 32;
            bs[e / 32][e % 32] = (bk < k && bc < n) ? float(b[(ulong)bk * n + bc]) : 0.0f;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint kk = 0; kk < 16; kk += 8) {
            simdgroup_float8x8 af[2];
            simdgroup_float8x8 bf[2];
            for (uint i = 0; i < 2; ++i) {
                simdgroup_load(af[i], &as[sr + 8 * i][kk], 16);
                simdgroup_load(bf[i], &bs[kk][sc + 8 * i], 32);
            }
            for (uint i = 0; i < 2; ++i) {
                for (uint j = 0; j < 2; ++j) {
                    simdgroup_multiply_accumulate(acc[i][j], af[i], bf[j], acc[i][j]);
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    for (uint i = 0; i < 2; ++i) {
        for (uint j = 0; j < 2; ++j) {
            simdgroup_store(acc[i][j], &cs[sr + 8 * i][sc + 8 * j], 32);
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint r = 0; r < 8; ++r) {
        const uint e = lid + 128 * r;
        const uint gr = row0 + e / 32;
        const uint gc = col0 + e % 32;
        if (gr < m && gc < n) {
            const float bv = p.has_bias != 0 ? float(bias[gc]) : 0.0f;
            c[(ulong)gr * n + gc] = TA(rlx_epilogue(p, cs[e / 32][e % 32], bv));
        }
    }
}

template <typename TA, typename TB>
kernel void gemv(constant MatmulArgs& p    [[buffer(0)]],
                 device const TA*     a    [[buffer(1)]],
                 device const TB*     b    [[buffer(2)]],
                 device const TA*     bias [[buffer(3)]],
                 device TA*           c    [[buffer(4)]],
                 uint3 tg   [[threadgroup_position_in_grid]],
                 uint  sid  [[simdgroup_index_in_threadgroup]],
                 uint  lane [[thread_index_in_simdgroup]],
                 uint  nsg  [[simdgroups_per_threadgroup]])
{
    threadgroup float part[32][64];
    const uint k = p.k, n = p.n;
    a += (ulong)tg.z * p.a_batch_stride;
    b += (ulong)tg.z * p.b_batch_stride;
    c += (ulong)tg.z * n;
    const uint c0 = tg.x * 64 + lane;
    const uint c1 = c0 + 32;
    float s0 = 0.0f;
    float s1 = 0.0f;
    for (uint kk = sid; kk < k; kk += nsg) {
        const float x = float(a[kk]);
        device const TB* brow = b + (ulong)kk * n;
        if (c0 < n) {
            s0 = fma(x, float(brow[c0]), s0);
        }
        if (c1 < n) {
            s1 = fma(x, float(brow[c1]), s1);
        }
    }
    part[sid][lane] = s0;
    part[sid][lane + 32] = s1;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint j = sid * 32 + lane; j < 64; j += nsg * 32) {
        const uint col = tg.x * 64 + j;
        float s = 0.0f;
        for (uint g = 0; g < nsg; ++g) {
            s += part[g][j];
        }
        if (col < n) {
            const float bv = p.has_bias != 0 ? float(bias[col]) : 0.0f;
            c[col] = TA(rlx_epilogue(p, s, bv));
        }
    }
}

template <typename T>
kernel void bias_add(constant BiasAddArgs& p    [[buffer(0)]],
                     device const T*       src  [[buffer(1)]],
                     device const T*       bias [[buffer(2)]],
                     device T*             dst  [[buffer(3)]],
                     uint gid [[thread_position_in_grid]])
{
    if (gid >= p.m * p.n) {
        return;
    }
    dst[gid] = T(float(src[gid]) + float(bias[gid % p.n]));
}

#define RLX_MM(kind, name, TA, TB)                                              \
template [[host_name(name)]] kernel void kind<TA, TB>(                          \
    constant MatmulArgs& p [[buffer(0)]], device const TA* a [[buffer(1)]],     \
    device const TB* b [[buffer(2)]], device const TA* bias [[buffer(3)]],      \
    device TA* c [[buffer(4)]], uint3 tg [[threadgroup_position_in_grid]],      \
    uint lid [[thread_index_in_threadgroup]]);
RLX_MM(gemm, "gemm_f32", float, float)
RLX_MM(gemm, "gemm_f32_w16", float, half)
RLX_MM(gemm, "gemm_f16", half, half)

#define RLX_SG(name, TA, TB)                                                    \
template [[host_name(name)]] kernel void gemm_sg<TA, TB>(                       \
    constant MatmulArgs& p [[buffer(0)]], device const TA* a [[buffer(1)]],     \
    device const TB* b [[buffer(2)]], device const TA* bias [[buffer(3)]],      \
    device TA* c [[buffer(4)]], uint3 tg [[threadgroup_position_in_grid]],      \
    uint lid [[thread_index_in_threadgroup]],                                   \
    uint sid [[simdgroup_index_in_threadgroup]]);
RLX_SG("gemm_sg_f32", float, float)
RLX_SG("gemm_sg_f32_w16", float, half)
RLX_SG("gemm_sg_f16", half, half)

#define RLX_MV(name, TA, TB)                                                    \
template [[host_name(name)]] kernel void gemv<TA, TB>(                          \
    constant MatmulArgs& p [[buffer(0)]], device const TA* a [[buffer(1)]],     \
    device const TB* b [[buffer(2)]], device const TA* bias [[buffer(3)]],      \
    device TA* c [[buffer(4)]], uint3 tg [[threadgroup_position_in_grid]],      \
    uint sid [[simdgroup_index_in_threadgroup]],                                \
    uint lane [[thread_index_in_simdgroup]],                                    \
    uint nsg [[simdgroups_per_threadgroup]]);
RLX_MV("gemv_f32", float, float)
RLX_MV("gemv_f32_w16", float, half)
RLX_MV("gemv_f16", half, half)

#define RLX_BIAS(name, T)                                                       \
template [[host_name(name)]] kernel void bias_add<T>(                           \
    constant BiasAddArgs& p [[buffer(0)]], device const T* src [[buffer(1)]],   \
    device const T* bias [[buffer(2)]], device T* dst [[buffer(3)]],            \
    uint gid [[thread_position_in_grid]]);
RLX_BIAS("bias_add_f32", float)
RLX_BIAS("bias_add_f16", half)
