// quant.metal -- dst[m, n] = x[m, k] @ dequant(w)ᵀ on packed GGUF rows.
//
// w is n rows of `row_bytes` bytes, each k elements stored as ggml blocks
// (the layouts of src/host/kernels/quant/{legacy,kquants,seed,float}.rs).
// x and dst are f32 or f16 by the QuantArgs flags (bound as bytes), so one
// kernel per block type and path covers the four dtype combinations.
// Accumulation is f32.
//
// Every block type (gguf_blocks.h) provides `decode16(row, e0, k, w)`: elements e0 ..
// e0 + 15 of a row (e0 a multiple of 16) dequantised into w[16]; elements
// at or past k are 0 (only the float types can have a k that is not a
// multiple of 16). The four kernel templates below are shared by all types
// (RLX_QUANT instantiates them per type).
//
// gemv_<type>  (m <= 8, decode)  args QuantArgs: buffer(1) x, (2) w, (3) dst
//     One simdgroup per output column j (weight row), QG_SG simdgroups per
//     threadgroup, grid = ceil(n / QG_SG). Lanes take 16-element chunks
//     of the row round robin (lane l: chunks l, l + 32, ...), decode each
//     once and dot it with all m rows of x; simd_sum per row of x.
// gemm_<type>  (any m, prefill)  args QuantArgs: buffer(1) x, (2) w, (3) dst
//     128 threads per threadgroup, a QT_M x QT_N tile of dst each, grid =
//     (ceil(n / QT_N), ceil(m / QT_M)). Per QT_K step, the 128 threads
//     decode the QT_N x QT_K weight tile (one 16-element chunk each) and
//     load the x tile into threadgroup memory; each thread then accumulates
//     a 2 x 4 block of outputs.
// gate_up_<type>  (decode MLP)  args MlpArgs: buffer(1) x [k], (2) gate_w,
//     (3) up_w, (4) dst [n]: dst[j] = act(gate_w[j]·x) · (up_w[j]·x), act
//     silu (op 0) or tanh-GELU (op 1); one simdgroup per j as gemv_*.
// down_residual_<type>  args MlpArgs: buffer(1) x [k], (2) w, (3) res [n],
//     (4) dst [n]: dst[j] = res[j] + w[j]·x. res may be dst itself (each
//     lane 0 reads res[j] before writing dst[j]); x must not overlap dst.
// gemm_t_<type>  (transposed product)  args QuantArgs: buffer(1) x [m, n],
//     (2) w, (3) dst [m, k]: dst = x @ dequant(w), the input gradient of a
//     quantised matmul (DequantMatMulGgufT). Thread (c, r) of a 2D grid,
//     QTT_THREADS per threadgroup along c, computes columns 16c .. 16c + 15
//     of rows QTT_M·r ..: for each weight row j it decodes that chunk once
//     and adds x[i, j] · w[j, 16c + t] to QTT_M × 16 accumulators (f32, in
//     order of j). No threadgroup memory, no barriers.
//
// Weight bytes are read one at a time (blocks are 18, 22, 110 ... bytes
// long, so wider fields are not aligned in general); f16 fields are built
// from two bytes.
#include <metal_stdlib>
#include "args.h"
using namespace metal;
#include "gguf_blocks.h"

#define QG_SG 4
#define QT_M 32
#define QT_N 32
#define QT_K 64
#define QT_LD 65     // padded tile row (QT_K + 1): no bank conflicts
// Floats of a 32-row tile (QT_M = QT_N rows of QT_LD).
#define QT_TILE (QT_M * QT_LD)
#define QT_THREADS 128
#define QTT_M 4
static_assert(QT_M == QT_N, "square tiles");
static_assert(QT_THREADS == QT_N * QT_K / 16, "one weight chunk per thread");

// ---------------------------------------------------------------------------
// Activations and results: f32 or f16 by flag.
// ---------------------------------------------------------------------------
static inline float q_load(device const uchar* x, uint f16, ulong i) {
    return f16 ? float(((device const half*)x)[i]) : ((device const float*)x)[i];
}

static inline void q_store(device uchar* d, uint f16, ulong i, float v) {
    if (f16) {
        ((device half*)d)[i] = half(v);
    } else {
        ((device float*)d)[i] = v;
    }
}

template <typename Q>
kernel void quant_gemv(constant QuantArgs&  a    [[buffer(0)]],
                       device const uchar*  x    [[buffer(1)]],
                       device const uchar*  w    [[buffer(2)]],
                       device uchar*        dst  [[buffer(3)]],
                       uint tg   [[threadgroup_position_in_grid]],
                       uint sid  [[simdgroup_index_in_threadgroup]],
                       uint lane [[thread_index_in_simdgroup]])
{
    const uint j = tg * QG_SG + sid;
    if (j >= a.n) {
        return;  // the whole simdgroup: no simd_sum is left waiting
    }
    device const uchar* row = w + (ulong)j * a.row_bytes;
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    const uint nch = (a.k + 15) / 16;
    for (uint c = lane; c < nch; c += 32) {
        float wv[16];
        const uint e0 = 16 * c;
        Q::decode16(row, e0, a.k, wv);
        const uint cnt = min(16u, a.k - e0);
        for (uint i = 0; i < 8; ++i) {
            if (i < a.m) {
                const ulong xo = (ulong)i * a.k + e0;
                float s = 0.0f;
                for (uint t = 0; t < cnt; ++t) {
                    s += wv[t] * q_load(x, a.x_f16, xo + t);
                }
                acc[i] += s;
            }
        }
    }
    for (uint i = 0; i < 8; ++i) {
        if (i < a.m) {
            const float s = simd_sum(acc[i]);
            if (lane == 0) {
                q_store(dst, a.dst_f16, (ulong)i * a.n + j, s);
            }
        }
    }
}

template <typename Q>
kernel void quant_gemm(constant QuantArgs&  a    [[buffer(0)]],
                       device const uchar*  x    [[buffer(1)]],
                       device const uchar*  w    [[buffer(2)]],
                       device uchar*        dst  [[buffer(3)]],
                       uint2 tg  [[threadgroup_position_in_grid]],
                       uint  lid [[thread_index_in_threadgroup]])
{
    threadgroup float xs[QT_TILE];
    threadgroup float ws[QT_TILE];
    const uint n0 = tg.x * QT_N, m0 = tg.y * QT_M;
    const uint rr = lid / 8, cc = lid % 8;  // rows rr, rr + 16; cols cc + 8u
    float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    for (uint k0 = 0; k0 < a.k; k0 += QT_K) {
        {   // weight tile: thread lid decodes chunk lid % 4 of row lid / 4
            const uint r = lid / 4, h = lid % 4, e0 = k0 + 16 * h;
            float wv[16];
            if (n0 + r < a.n && e0 < a.k) {
                Q::decode16(w + (ulong)(n0 + r) * a.row_bytes, e0, a.k, wv);
            } else {
                for (uint t = 0; t < 16; ++t) {
                    wv[t] = 0.0f;
                }
            }
            for (uint t = 0; t < 16; ++t) {
                ws[r * QT_LD + 16 * h + t] = wv[t];
            }
        }
        for (uint s = lid; s < QT_M * QT_K; s += QT_THREADS) {
            const uint r = s / QT_K, col = s % QT_K;
            const bool in = m0 + r < a.m && k0 + col < a.k;
            xs[r * QT_LD + col] =
                in ? q_load(x, a.x_f16, (ulong)(m0 + r) * a.k + k0 + col) : 0.0f;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint kk = 0; kk < QT_K; ++kk) {
            const float x0 = xs[rr * QT_LD + kk];
            const float x1 = xs[(rr + 16) * QT_LD + kk];
            for (uint c = 0; c < 4; ++c) {
                const float wv = ws[(cc + 8 * c) * QT_LD + kk];
                acc[0][c] += x0 * wv;
                acc[1][c] += x1 * wv;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    for (uint i = 0; i < 2; ++i) {
        const uint row = m0 + rr + 16 * i;
        for (uint c = 0; c < 4; ++c) {
            const uint col = n0 + cc + 8 * c;
            if (row < a.m && col < a.n) {
                q_store(dst, a.dst_f16, (ulong)row * a.n + col, acc[i][c]);
            }
        }
    }
}

// Lane `lane`'s share of row·x (x[k], f32 or f16): chunks lane, lane + 32 ...
template <typename Q>
static inline float q_row_dot(device const uchar* row, device const uchar* x,
                              uint x_f16, uint k, uint lane) {
    float acc = 0.0f;
    for (uint c = lane; c < (k + 15) / 16; c += 32) {
        float wv[16];
        const uint e0 = 16 * c;
        Q::decode16(row, e0, k, wv);
        const uint cnt = min(16u, k - e0);
        for (uint t = 0; t < cnt; ++t) {
            acc += wv[t] * q_load(x, x_f16, e0 + t);
        }
    }
    return acc;
}

template <typename Q>
kernel void quant_gate_up(constant MlpArgs&    a    [[buffer(0)]],
                          device const uchar*  x    [[buffer(1)]],
                          device const uchar*  gw   [[buffer(2)]],
                          device const uchar*  uw   [[buffer(3)]],
                          device uchar*        dst  [[buffer(4)]],
                          uint tg   [[threadgroup_position_in_grid]],
                          uint sid  [[simdgroup_index_in_threadgroup]],
                          uint lane [[thread_index_in_simdgroup]])
{
    const uint j = tg * QG_SG + sid;
    if (j >= a.n) {
        return;
    }
    const ulong at = (ulong)j * a.row_bytes;
    const float g = simd_sum(q_row_dot<Q>(gw + at, x, a.x_f16, a.k, lane));
    const float u = simd_sum(q_row_dot<Q>(uw + at, x, a.x_f16, a.k, lane));
    if (lane == 0) {
        const float act = a.op == 0
            ? g / (1.0f + exp(-g))
            : 0.5f * g * (1.0f + precise::tanh(0.79788456080286536f
                                               * (g + 0.044715f * g * g * g)));
        q_store(dst, a.dst_f16, j, act * u);
    }
}

template <typename Q>
kernel void quant_down_residual(constant MlpArgs&    a    [[buffer(0)]],
                                device const uchar*  x    [[buffer(1)]],
                                device const uchar*  w    [[buffer(2)]],
                                device const uchar*  res  [[buffer(3)]],
                                device uchar*        dst  [[buffer(4)]],
                                uint tg   [[threadgroup_position_in_grid]],
                                uint sid  [[simdgroup_index_in_threadgroup]],
                                uint lane [[thread_index_in_simdgroup]])
{
    const uint j = tg * QG_SG + sid;
    if (j >= a.n) {
        return;
    }
    const float d = simd_sum(q_row_dot<Q>(w + (ulong)j * a.row_bytes, x, a.x_f16, a.k, lane));
    if (lane == 0) {
        q_store(dst, a.dst_f16, j, q_load(res, a.res_f16, j) + d);
    }
}

// ---------------------------------------------------------------------------
// Fused decode-layer kernels of the Metal plan (metal::fuse: one dispatch
// for a run of decode thunks), f32 activations, m = 1. Both stage the GEMV
// input in threadgroup memory first (hg_stage, k <= HG_MAXK):
//   xs = x;  HG_POST: s = x + (y·rsqrt(mean(y²) + post_eps)·pg + pb), the
//   post-norm and residual add of the previous block (with HG_WRITE_S,
//   threadgroup 0 writes s to s_out, the residual stream; without it s_out
//   is neither read nor written; HG_RAW: s = x + y, no post-norm);
//   HG_NORM: xs = xs·rsqrt(mean(xs²) +
//   eps)·g + b (the pre-norm). Unused buffers are bound but not read.
// Then simdgroup s of HG_SG dots rows s, s + HG_SG, ... with xs (the lanes
// take 16-element chunks round robin, as gemv_*).
//
// qkv_head_<type>  args HeadGemvArgs: buffer(1) x, (2) g, (3) b, (4) y,
//     (5) pg, (6) pb, (7) s_out, (8) w, (9) bias, (10) hg, (11) hb,
//     (12) cos, (13) sin, (14) idx (i32), (15) dst. One threadgroup per
//     head of d = head_dim <= HG_MAXD rows (grid = n / d): y_j = w_j·xs
//     (+ bias_j, HG_BIAS); HG_HNORM: the head's d values RMSNormed with
//     hg / hb / head_eps; HG_ROPE: its first n_rot dims rotated with cos /
//     sin row 0 (decode: one token), NeoX pairs (c, c + n_rot/2) or
//     HG_INTERLEAVED (2c, 2c + 1); written to dst[h·d + c], or with
//     HG_CACHE to row idx[0] of the cache (cache_rows rows of cache_row
//     elements; a negative index adds cache_rows, out of range: nothing
//     is written, as scatter_nd; HG_CACHE_F16: the cache is half, each
//     value rounded to nearest even as it is stored).
// norm_gate_up_<type>  args HeadGemvArgs: buffer(1) x, (2) g, (3) b,
//     (4) y, (5) pg, (6) pb, (7) s_out, (8) gate_w, (9) up_w, (10) dst:
//     dst_j = act(gate_w_j·xs)·(up_w_j·xs), act silu (op 0) or tanh-GELU
//     (op 1); NG_ROWS rows per threadgroup (grid = ceil(n / NG_ROWS)).
#define HG_SG 8
#define HG_THREADS 256
#define HG_MAXK 4096
#define HG_MAXD 512
#define NG_ROWS 32
#define HG_NORM 1u
#define HG_BIAS 2u
#define HG_HNORM 4u
#define HG_ROPE 8u
#define HG_INTERLEAVED 16u
#define HG_CACHE 32u
#define HG_POST 64u
#define HG_RAW 128u
#define HG_WRITE_S 256u
#define HG_CACHE_F16 512u

static inline float hg_tg_sum(float v, threadgroup float* part, uint sid, uint lane) {
    v = simd_sum(v);
    if (lane == 0) {
        part[sid] = v;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float t = lane < HG_SG ? part[lane] : 0.0f;
    t = simd_sum(t);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return t;
}

static inline void hg_stage(constant HeadGemvArgs& a, device const float* x,
                            device const float* g, device const float* b,
                            device const float* y, device const float* pg,
                            device const float* pb, device float* s_out, bool writer,
                            threadgroup float* xs, threadgroup float* part,
                            uint lid, uint sid, uint lane) {
    if ((a.flags & HG_POST) != 0 && (a.flags & HG_RAW) != 0) {
        for (uint i = lid; i < a.k; i += HG_THREADS) {
            const float v = x[i] + y[i];
            xs[i] = v;
            if (writer) {
                s_out[i] = v;
            }
        }
    } else if ((a.flags & HG_POST) != 0) {
        float ss = 0.0f;
        for (uint i = lid; i < a.k; i += HG_THREADS) {
            const float v = y[i];
            ss += v * v;
        }
        ss = hg_tg_sum(ss, part, sid, lane);
        const float scale = rsqrt(ss / float(a.k) + a.post_eps);
        for (uint i = lid; i < a.k; i += HG_THREADS) {
            const float v = x[i] + (y[i] * scale * pg[i] + pb[i]);
            xs[i] = v;
            if (writer) {
                s_out[i] = v;
            }
        }
    } else {
        for (uint i = lid; i < a.k; i += HG_THREADS) {
            xs[i] = x[i];
        }
    }
    if ((a.flags & HG_NORM) != 0) {
        float ss = 0.0f;
        for (uint i = lid; i < a.k; i += HG_THREADS) {
            ss += xs[i] * xs[i];
        }
        ss = hg_tg_sum(ss, part, sid, lane);
        const float scale = rsqrt(ss / float(a.k) + a.eps);
        for (uint i = lid; i < a.k; i += HG_THREADS) {
            xs[i] = xs[i] * scale * g[i] + b[i];
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
}

// row·xs over the whole simdgroup (every lane gets the sum).
template <typename Q>
static inline float hg_dot(device const uchar* row, threadgroup const float* xs,
                           uint k, uint lane) {
    float acc = 0.0f;
    for (uint c = lane; c < (k + 15) / 16; c += 32) {
        float wv[16];
        const uint e0 = 16 * c;
        Q::decode16(row, e0, k, wv);
        const uint cnt = min(16u, k - e0);
        for (uint t = 0; t < cnt; ++t) {
            acc += wv[t] * xs[e0 + t];
        }
    }
    return simd_sum(acc);
}

template <typename Q>
kernel void qkv_head(constant HeadGemvArgs& a     [[buffer(0)]],
                     device const float*    x     [[buffer(1)]],
                     device const float*    g     [[buffer(2)]],
                     device const float*    b     [[buffer(3)]],
                     device const float*    y     [[buffer(4)]],
                     device const float*    pg    [[buffer(5)]],
                     device const float*    pb    [[buffer(6)]],
                     device float*          s_out [[buffer(7)]],
                     device const uchar*    w     [[buffer(8)]],
                     device const float*    bias  [[buffer(9)]],
                     device const float*    hg    [[buffer(10)]],
                     device const float*    hb    [[buffer(11)]],
                     device const float*    cs    [[buffer(12)]],
                     device const float*    sn    [[buffer(13)]],
                     device const int*      idx   [[buffer(14)]],
                     device float*          dst   [[buffer(15)]],
                     uint h    [[threadgroup_position_in_grid]],
                     uint lid  [[thread_position_in_threadgroup]],
                     uint sid  [[simdgroup_index_in_threadgroup]],
                     uint lane [[thread_index_in_simdgroup]])
{
    threadgroup float xs[HG_MAXK];
    threadgroup float ys[HG_MAXD];
    threadgroup float part[HG_SG];
    const bool writer = h == 0 && (a.flags & HG_WRITE_S) != 0;
    hg_stage(a, x, g, b, y, pg, pb, s_out, writer, xs, part, lid, sid, lane);
    const uint d = a.head_dim;
    const uint j0 = h * d;
    for (uint r = sid; r < d; r += HG_SG) {
        const float v = hg_dot<Q>(w + (ulong)(j0 + r) * a.row_bytes, xs, a.k, lane);
        if (lane == 0) {
            ys[r] = (a.flags & HG_BIAS) != 0 ? v + bias[j0 + r] : v;
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if ((a.flags & HG_HNORM) != 0) {
        float ss = 0.0f;
        for (uint c = lid; c < d; c += HG_THREADS) {
            ss += ys[c] * ys[c];
        }
        ss = hg_tg_sum(ss, part, sid, lane);
        const float scale = rsqrt(ss / float(d) + a.head_eps);
        for (uint c = lid; c < d; c += HG_THREADS) {
            ys[c] = ys[c] * scale * hg[c] + hb[c];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    ulong o = j0;
    if ((a.flags & HG_CACHE) != 0) {
        long row = idx[0];
        if (row < 0) {
            row += long(a.cache_rows);
        }
        if (row < 0 || row >= long(a.cache_rows)) {
            return;
        }
        o += (ulong)row * a.cache_row;
    }
    device float* out = dst + o;
    device half* out_h = (device half*)dst + o;
    const bool to_half = (a.flags & HG_CACHE_F16) != 0;
    const uint half_rot = a.n_rot / 2;
    for (uint c = lid; c < d; c += HG_THREADS) {
        float v = ys[c];
        if ((a.flags & HG_ROPE) != 0 && c < a.n_rot) {
            uint pair;
            bool first;
            float xa;
            float xb;
            if ((a.flags & HG_INTERLEAVED) != 0) {
                pair = c / 2;
                first = (c & 1u) == 0;
                xa = ys[first ? c : c - 1];
                xb = ys[first ? c + 1 : c];
            } else {
                first = c < half_rot;
                pair = first ? c : c - half_rot;
                xa = ys[first ? c : c - half_rot];
                xb = ys[first ? c + half_rot : c];
            }
            const float co = cs[pair];
            const float si = sn[pair];
            v = first ? xa * co - xb * si : xa * si + xb * co;
        }
        if (to_half) {
            out_h[c] = half(v);
        } else {
            out[c] = v;
        }
    }
}

template <typename Q>
kernel void norm_gate_up(constant HeadGemvArgs& a     [[buffer(0)]],
                         device const float*    x     [[buffer(1)]],
                         device const float*    g     [[buffer(2)]],
                         device const float*    b     [[buffer(3)]],
                         device const float*    y     [[buffer(4)]],
                         device const float*    pg    [[buffer(5)]],
                         device const float*    pb    [[buffer(6)]],
                         device float*          s_out [[buffer(7)]],
                         device const uchar*    gw    [[buffer(8)]],
                         device const uchar*    uw    [[buffer(9)]],
                         device float*          dst   [[buffer(10)]],
                         uint tg   [[threadgroup_position_in_grid]],
                         uint lid  [[thread_position_in_threadgroup]],
                         uint sid  [[simdgroup_index_in_threadgroup]],
                         uint lane [[thread_index_in_simdgroup]])
{
    threadgroup float xs[HG_MAXK];
    threadgroup float part[HG_SG];
    const bool writer = tg == 0 && (a.flags & HG_WRITE_S) != 0;
    hg_stage(a, x, g, b, y, pg, pb, s_out, writer, xs, part, lid, sid, lane);
    for (uint r = sid; r < NG_ROWS; r += HG_SG) {
        const uint j = tg * NG_ROWS + r;
        if (j >= a.n) {
            break;  // the whole simdgroup
        }
        const ulong at = (ulong)j * a.row_bytes;
        const float gv = hg_dot<Q>(gw + at, xs, a.k, lane);
        const float u = hg_dot<Q>(uw + at, xs, a.k, lane);
        if (lane == 0) {
            const float act = a.op == 0
                ? gv / (1.0f + exp(-gv))
                : 0.5f * gv * (1.0f + precise::tanh(0.79788456080286536f
                                                    * (gv + 0.044715f * gv * gv * gv)));
            dst[j] = act * u;
        }
    }
}

template <typename Q>
kernel void quant_gemm_t(constant QuantArgs&  a    [[buffer(0)]],
                         device const uchar*  x    [[buffer(1)]],
                         device const uchar*  w    [[buffer(2)]],
                         device uchar*        dst  [[buffer(3)]],
                         uint2 gid [[thread_position_in_grid]])
{
    const uint e0 = 16 * gid.x, r0 = QTT_M * gid.y;
    if (e0 >= a.k || r0 >= a.m) {
        return;
    }
    const uint rows = min((uint)QTT_M, a.m - r0);
    float acc[QTT_M][16];
    for (uint i = 0; i < QTT_M; ++i) {
        for (uint t = 0; t < 16; ++t) {
            acc[i][t] = 0.0f;
        }
    }
    for (uint j = 0; j < a.n; ++j) {
        float wv[16];
        Q::decode16(w + (ulong)j * a.row_bytes, e0, a.k, wv);
        for (uint i = 0; i < rows; ++i) {
            const float xv = q_load(x, a.x_f16, (ulong)(r0 + i) * a.n + j);
            for (uint t = 0; t < 16; ++t) {
                acc[i][t] += xv * wv[t];
            }
        }
    }
    const uint cnt = min(16u, a.k - e0);
    for (uint i = 0; i < rows; ++i) {
        for (uint t = 0; t < cnt; ++t) {
            q_store(dst, a.dst_f16, (ulong)(r0 + i) * a.k + e0 + t, acc[i][t]);
        }
    }
}

#define RLX_QUANT_T(name, Q)                                                      \
template [[host_name(name)]] kernel void quant_gemm_t<Q>(                        \
    constant QuantArgs& a [[buffer(0)]], device const uchar* x [[buffer(1)]],    \
    device const uchar* w [[buffer(2)]], device uchar* dst [[buffer(3)]],        \
    uint2 gid [[thread_position_in_grid]]);
RLX_QUANT_T("gemm_t_f32", QF32)
RLX_QUANT_T("gemm_t_f16", QF16)
RLX_QUANT_T("gemm_t_bf16", QBF16)
RLX_QUANT_T("gemm_t_q4_0", QQ4_0)
RLX_QUANT_T("gemm_t_q4_1", QQ4_1)
RLX_QUANT_T("gemm_t_q5_0", QQ5_0)
RLX_QUANT_T("gemm_t_q5_1", QQ5_1)
RLX_QUANT_T("gemm_t_q8_0", QQ8_0)
RLX_QUANT_T("gemm_t_q8_1", QQ8_1)
RLX_QUANT_T("gemm_t_q2_k", QQ2K)
RLX_QUANT_T("gemm_t_q3_k", QQ3K)
RLX_QUANT_T("gemm_t_q4_k", QQ4K)
RLX_QUANT_T("gemm_t_q5_k", QQ5K)
RLX_QUANT_T("gemm_t_q6_k", QQ6K)
RLX_QUANT_T("gemm_t_q8_k", QQ8K)
RLX_QUANT_T("gemm_t_q1_0", QQ1_0)
RLX_QUANT_T("gemm_t_q2_0", QQ2_0)

#define RLX_DECODE(qkv_name, gate_up_name, Q)                                     \
template [[host_name(qkv_name)]] kernel void qkv_head<Q>(                        \
    constant HeadGemvArgs& a [[buffer(0)]], device const float* x [[buffer(1)]], \
    device const float* g [[buffer(2)]], device const float* b [[buffer(3)]],    \
    device const float* y [[buffer(4)]], device const float* pg [[buffer(5)]],   \
    device const float* pb [[buffer(6)]], device float* s_out [[buffer(7)]],     \
    device const uchar* w [[buffer(8)]], device const float* bias [[buffer(9)]], \
    device const float* hg [[buffer(10)]], device const float* hb [[buffer(11)]], \
    device const float* cs [[buffer(12)]], device const float* sn [[buffer(13)]], \
    device const int* idx [[buffer(14)]], device float* dst [[buffer(15)]],      \
    uint h [[threadgroup_position_in_grid]],                                     \
    uint lid [[thread_position_in_threadgroup]],                                 \
    uint sid [[simdgroup_index_in_threadgroup]],                                 \
    uint lane [[thread_index_in_simdgroup]]);                                    \
template [[host_name(gate_up_name)]] kernel void norm_gate_up<Q>(                \
    constant HeadGemvArgs& a [[buffer(0)]], device const float* x [[buffer(1)]], \
    device const float* g [[buffer(2)]], device const float* b [[buffer(3)]],    \
    device const float* y [[buffer(4)]], device const float* pg [[buffer(5)]],   \
    device const float* pb [[buffer(6)]], device float* s_out [[buffer(7)]],     \
    device const uchar* gw [[buffer(8)]], device const uchar* uw [[buffer(9)]],  \
    device float* dst [[buffer(10)]], uint tg [[threadgroup_position_in_grid]],  \
    uint lid [[thread_position_in_threadgroup]],                                 \
    uint sid [[simdgroup_index_in_threadgroup]],                                 \
    uint lane [[thread_index_in_simdgroup]]);

#define RLX_QUANT(gemv_name, gemm_name, gate_up_name, down_name, Q)                                                       \
template [[host_name(gemv_name)]] kernel void quant_gemv<Q>(                 \
    constant QuantArgs& a [[buffer(0)]], device const uchar* x [[buffer(1)]],    \
    device const uchar* w [[buffer(2)]], device uchar* dst [[buffer(3)]],        \
    uint tg [[threadgroup_position_in_grid]],                                    \
    uint sid [[simdgroup_index_in_threadgroup]],                                 \
    uint lane [[thread_index_in_simdgroup]]);                                    \
template [[host_name(gemm_name)]] kernel void quant_gemm<Q>(                 \
    constant QuantArgs& a [[buffer(0)]], device const uchar* x [[buffer(1)]],    \
    device const uchar* w [[buffer(2)]], device uchar* dst [[buffer(3)]],        \
    uint2 tg [[threadgroup_position_in_grid]],                                   \
    uint lid [[thread_index_in_threadgroup]]);                                   \
template [[host_name(gate_up_name)]] kernel void quant_gate_up<Q>(               \
    constant MlpArgs& a [[buffer(0)]], device const uchar* x [[buffer(1)]],      \
    device const uchar* gw [[buffer(2)]], device const uchar* uw [[buffer(3)]],  \
    device uchar* dst [[buffer(4)]], uint tg [[threadgroup_position_in_grid]],   \
    uint sid [[simdgroup_index_in_threadgroup]],                                 \
    uint lane [[thread_index_in_simdgroup]]);                                    \
template [[host_name(down_name)]] kernel void quant_down_residual<Q>(            \
    constant MlpArgs& a [[buffer(0)]], device const uchar* x [[buffer(1)]],      \
    device const uchar* w [[buffer(2)]], device const uchar* res [[buffer(3)]],  \
    device uchar* dst [[buffer(4)]], uint tg [[threadgroup_position_in_grid]],   \
    uint sid [[simdgroup_index_in_threadgroup]],                                 \
    uint lane [[thread_index_in_simdgroup]]);
RLX_QUANT("gemv_f32", "gemm_f32", "gate_up_f32", "down_residual_f32", QF32)
RLX_QUANT("gemv_f16", "gemm_f16", "gate_up_f16", "down_residual_f16", QF16)
RLX_QUANT("gemv_bf16", "gemm_bf16", "gate_up_bf16", "down_residual_bf16", QBF16)
RLX_QUANT("gemv_q4_0", "gemm_q4_0", "gate_up_q4_0", "down_residual_q4_0", QQ4_0)
RLX_QUANT("gemv_q4_1", "gemm_q4_1", "gate_up_q4_1", "down_residual_q4_1", QQ4_1)
RLX_QUANT("gemv_q5_0", "gemm_q5_0", "gate_up_q5_0", "down_residual_q5_0", QQ5_0)
RLX_QUANT("gemv_q5_1", "gemm_q5_1", "gate_up_q5_1", "down_residual_q5_1", QQ5_1)
RLX_QUANT("gemv_q8_0", "gemm_q8_0", "gate_up_q8_0", "down_residual_q8_0", QQ8_0)
RLX_QUANT("gemv_q8_1", "gemm_q8_1", "gate_up_q8_1", "down_residual_q8_1", QQ8_1)
RLX_QUANT("gemv_q2_k", "gemm_q2_k", "gate_up_q2_k", "down_residual_q2_k", QQ2K)
RLX_QUANT("gemv_q3_k", "gemm_q3_k", "gate_up_q3_k", "down_residual_q3_k", QQ3K)
RLX_QUANT("gemv_q4_k", "gemm_q4_k", "gate_up_q4_k", "down_residual_q4_k", QQ4K)
RLX_QUANT("gemv_q5_k", "gemm_q5_k", "gate_up_q5_k", "down_residual_q5_k", QQ5K)
RLX_QUANT("gemv_q6_k", "gemm_q6_k", "gate_up_q6_k", "down_residual_q6_k", QQ6K)
RLX_QUANT("gemv_q8_k", "gemm_q8_k", "gate_up_q8_k", "down_residual_q8_k", QQ8K)
RLX_QUANT("gemv_q1_0", "gemm_q1_0", "gate_up_q1_0", "down_residual_q1_0", QQ1_0)
RLX_QUANT("gemv_q2_0", "gemm_q2_0", "gate_up_q2_0", "down_residual_q2_0", QQ2_0)
RLX_DECODE("qkv_head_f32", "norm_gate_up_f32", QF32)
RLX_DECODE("qkv_head_f16", "norm_gate_up_f16", QF16)
RLX_DECODE("qkv_head_bf16", "norm_gate_up_bf16", QBF16)
RLX_DECODE("qkv_head_q4_0", "norm_gate_up_q4_0", QQ4_0)
RLX_DECODE("qkv_head_q4_1", "norm_gate_up_q4_1", QQ4_1)
RLX_DECODE("qkv_head_q5_0", "norm_gate_up_q5_0", QQ5_0)
RLX_DECODE("qkv_head_q5_1", "norm_gate_up_q5_1", QQ5_1)
RLX_DECODE("qkv_head_q8_0", "norm_gate_up_q8_0", QQ8_0)
RLX_DECODE("qkv_head_q8_1", "norm_gate_up_q8_1", QQ8_1)
RLX_DECODE("qkv_head_q2_k", "norm_gate_up_q2_k", QQ2K)
RLX_DECODE("qkv_head_q3_k", "norm_gate_up_q3_k", QQ3K)
RLX_DECODE("qkv_head_q4_k", "norm_gate_up_q4_k", QQ4K)
RLX_DECODE("qkv_head_q5_k", "norm_gate_up_q5_k", QQ5K)
RLX_DECODE("qkv_head_q6_k", "norm_gate_up_q6_k", QQ6K)
RLX_DECODE("qkv_head_q8_k", "norm_gate_up_q8_k", QQ8K)
RLX_DECODE("qkv_head_q1_0", "norm_gate_up_q1_0", QQ1_0)
RLX_DECODE("qkv_head_q2_0", "norm_gate_up_q2_0", QQ2_0)
