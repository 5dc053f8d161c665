// quant_formats.metal -- the non-GGUF weight formats and the scaled codes.
//
// Numerics as src/host/kernels/quant/formats.rs (OCP FP8 E4M3 / E5M2,
// E2M1, round-to-nearest-even saturating encoders); accumulation is f32.
//
// dqmm_int8 / dqmm_int4 / dqmm_fp8 / dqmm_nvfp4  args QuantFormatArgs:
//     dst[m, n] = x[m, k] @ dequant(w)ᵀ, x / dst f32.
//     buffer(1) x, (2) w codes, (3) scale, (4) zero points (int, asym) or
//     global scale (nvfp4), (5) dst. Int8 codes [n, k] signed; int4 codes
//     [n, ceil(k/2)], element 2j in the low nibble of byte j, signed
//     (-8..7) when symmetric, 0..15 when asymmetric; f32 scale / zp
//     [n, ceil(k / block_size)]; fp8 codes [n, k] with f32 scale [n]; nvfp4
//     E2M1 [n, k/2] with E4M3 scale bytes [n, ceil(k/16)] and f32 global.
//     One simdgroup per output (i, j), QF_SG simdgroups per threadgroup:
//     grid = (ceil(n / QF_SG), m); lanes stride k, simd_sum.
// scaled_matmul  args ScaledArgs: buffer(1) lhs [m, k], (2) rhs [n, k],
//     (3) lhs_scale, (4) rhs_scale, (5) bias [n] (has_bias), (6) dst [m, n]:
//     dst = (dec(lhs)·s_l) @ (dec(rhs)·s_r)ᵀ (+ bias). Grid as dqmm_*.
// scaled_quantize  args ScaledArgs (m rows, k cols, lhs_fmt): buffer(1)
//     x f32, (2) scale, (3) codes; one thread per element, 256 per group.
// scaled_dequantize  as scaled_quantize with (1) codes, (3) f32 dst.
// scaled_quant_scale  args ScaledArgs: buffer(1) x, (2) scales; one thread
//     per scale group (per tensor: one thread), 256 per threadgroup.
//
// Formats (ScaledArgs fmt fields): 0 fp8_e4m3, 1 fp8_e5m2, 2 int8.
// Layouts: 0 per tensor, 1 per row, 2 blocks of `block` columns.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

#define QF_SG 4

static inline float qf_e4m3(uint b) {
    const uint s = (b >> 7) << 31, e = (b >> 3) & 15u, m = b & 7u;
    if (e == 15u && m == 7u) {
        return as_type<float>(s | 0x7FC00000u);
    }
    const float mag = e == 0u ? float(m) * (1.0f / 512.0f)
                              : as_type<float>(((e + 120u) << 23) | (m << 20));
    return as_type<float>(s | as_type<uint>(mag));
}

static inline float qf_e5m2(uint b) {
    const uint s = (b >> 7) << 31, e = (b >> 2) & 31u, m = b & 3u;
    if (e == 31u) {
        return as_type<float>(s | (m == 0u ? 0x7F800000u : 0x7FC00000u));
    }
    const float mag = e == 0u ? float(m) * (1.0f / 65536.0f)
                              : as_type<float>(((e + 112u) << 23) | (m << 21));
    return as_type<float>(s | as_type<uint>(mag));
}

static inline float qf_e2m1(uint c) {
    const uint e = (c >> 1) & 3u, m = c & 1u;
    const float mag = e == 0u ? 0.5f * float(m) : (1.0f + 0.5f * float(m)) * float(1u << (e - 1u));
    return (c & 8u) ? -mag : mag;
}

// A byte as a signed int8 (two's complement).
static inline float qf_i8(uint b) {
    return float(int(b << 24) >> 24);
}

static inline float qf_decode(uint fmt, uint b) {
    return fmt == 0u ? qf_e4m3(b) : fmt == 1u ? qf_e5m2(b) : qf_i8(b);
}

// Nearest code (ties to the even code), saturating; NaN -> S.1111111 / 0.
static inline uchar qf_encode(uint fmt, float x) {
    if (fmt == 2u) {
        return isnan(x) ? uchar(0) : uchar(int(clamp(rint(x), -127.0f, 127.0f)) & 0xFF);
    }
    const uint sign = as_type<uint>(x) >> 31 << 7;
    if (isnan(x)) {
        return uchar(0x7Fu | sign);
    }
    const uint top = fmt == 0u ? 0x7Eu : 0x7Bu;
    const float a = min(fabs(x), qf_decode(fmt, top));
    uint lo = 0u, hi = top;
    while (lo < hi) {
        const uint mid = (lo + hi) / 2u;
        if (qf_decode(fmt, mid) >= a) {
            hi = mid;
        } else {
            lo = mid + 1u;
        }
    }
    const uint up = lo, down = up == 0u ? 0u : up - 1u;
    // neighbouring codes are within a factor of 2: both differences exact
    const float dd = a - qf_decode(fmt, down), du = qf_decode(fmt, up) - a;
    const uint pick = (dd < du || (dd == du && (down & 1u) == 0u)) ? down : up;
    return uchar(pick | sign);
}

static inline ulong qf_scale_index(uint layout, uint block, uint r, uint c, uint cols) {
    if (layout == 0u) {
        return 0;
    }
    if (layout == 1u) {
        return r;
    }
    return (ulong)r * ((cols + block - 1u) / block) + c / block;
}

// Weight element e of row j, dequantised, per kernel.
struct QfInt8 {
    static float w(constant QuantFormatArgs& a, device const uchar* w, device const float* s,
                   device const float* z, uint j, uint e) {
        const ulong b = (ulong)j * ((a.k + a.block_size - 1u) / a.block_size) + e / a.block_size;
        float q = qf_i8(w[(ulong)j * a.k + e]);
        if (a.flag != 0u) {
            q -= z[b];
        }
        return q * s[b];
    }
};

struct QfInt4 {
    static float w(constant QuantFormatArgs& a, device const uchar* w, device const float* s,
                   device const float* z, uint j, uint e) {
        const ulong b = (ulong)j * ((a.k + a.block_size - 1u) / a.block_size) + e / a.block_size;
        const uint byte = w[(ulong)j * ((a.k + 1u) / 2u) + e / 2u];
        const uint nib = (byte >> (4u * (e & 1u))) & 15u;
        float q;
        if (a.flag != 0u) {
            q = float(nib) - z[b];
        } else {
            q = nib >= 8u ? float(nib) - 16.0f : float(nib);
        }
        return q * s[b];
    }
};

struct QfFp8 {
    static float w(constant QuantFormatArgs& a, device const uchar* w, device const float* s,
                   device const float*, uint j, uint e) {
        const uint b = w[(ulong)j * a.k + e];
        return (a.flag != 0u ? qf_e5m2(b) : qf_e4m3(b)) * s[j];
    }
};

struct QfNvfp4 {
    static float w(constant QuantFormatArgs& a, device const uchar* w, device const float* s,
                   device const float* g, uint j, uint e) {
        const uint byte = w[(ulong)j * ((a.k + 1u) / 2u) + e / 2u];
        const uint code = (byte >> (4u * (e & 1u))) & 15u;
        // block scales are bytes: the float pointer is reinterpreted
        device const uchar* bs = (device const uchar*)s;
        const float sc = qf_e4m3(bs[(ulong)j * ((a.k + 15u) / 16u) + e / 16u]);
        return qf_e2m1(code) * sc * g[0];
    }
};

template <typename F>
kernel void qf_dqmm(constant QuantFormatArgs& a   [[buffer(0)]],
                    device const float*       x   [[buffer(1)]],
                    device const uchar*       w   [[buffer(2)]],
                    device const float*       s   [[buffer(3)]],
                    device const float*       z   [[buffer(4)]],
                    device float*             dst [[buffer(5)]],
                    uint2 tg   [[threadgroup_position_in_grid]],
                    uint  sid  [[simdgroup_index_in_threadgroup]],
                    uint  lane [[thread_index_in_simdgroup]])
{
    const uint j = tg.x * QF_SG + sid, i = tg.y;
    if (j >= a.n || i >= a.m) {
        return;  // the whole simdgroup
    }
    float acc = 0.0f;
    for (uint e = lane; e < a.k; e += 32u) {
        acc += F::w(a, w, s, z, j, e) * x[(ulong)i * a.k + e];
    }
    acc = simd_sum(acc);
    if (lane == 0u) {
        dst[(ulong)i * a.n + j] = acc;
    }
}

#define QF_DQMM(name, F)                                                                   \
template [[host_name(name)]] kernel void qf_dqmm<F>(                                        \
    constant QuantFormatArgs& a [[buffer(0)]], device const float* x [[buffer(1)]],        \
    device const uchar* w [[buffer(2)]], device const float* s [[buffer(3)]],              \
    device const float* z [[buffer(4)]], device float* dst [[buffer(5)]],                  \
    uint2 tg [[threadgroup_position_in_grid]], uint sid [[simdgroup_index_in_threadgroup]], \
    uint lane [[thread_index_in_simdgroup]]);
QF_DQMM("dqmm_int8", QfInt8)
QF_DQMM("dqmm_int4", QfInt4)
QF_DQMM("dqmm_fp8", QfFp8)
QF_DQMM("dqmm_nvfp4", QfNvfp4)

kernel void scaled_matmul(constant ScaledArgs&  a    [[buffer(0)]],
                          device const uchar*   lhs  [[buffer(1)]],
                          device const uchar*   rhs  [[buffer(2)]],
                          device const float*   ls   [[buffer(3)]],
                          device const float*   rs   [[buffer(4)]],
                          device const float*   bias [[buffer(5)]],
                          device float*         dst  [[buffer(6)]],
                          uint2 tg   [[threadgroup_position_in_grid]],
                          uint  sid  [[simdgroup_index_in_threadgroup]],
                          uint  lane [[thread_index_in_simdgroup]])
{
    const uint j = tg.x * QF_SG + sid, i = tg.y;
    if (j >= a.n || i >= a.m) {
        return;
    }
    float acc = 0.0f;
    for (uint e = lane; e < a.k; e += 32u) {
        const float l = qf_decode(a.lhs_fmt, lhs[(ulong)i * a.k + e]) *
                        ls[qf_scale_index(a.layout, a.block, i, e, a.k)];
        const float r = qf_decode(a.rhs_fmt, rhs[(ulong)j * a.k + e]) *
                        rs[qf_scale_index(a.layout, a.block, j, e, a.k)];
        acc += l * r;
    }
    acc = simd_sum(acc);
    if (lane == 0u) {
        dst[(ulong)i * a.n + j] = acc + (a.has_bias != 0u ? bias[j] : 0.0f);
    }
}

kernel void scaled_quantize(constant ScaledArgs& a   [[buffer(0)]],
                            device const float*  x   [[buffer(1)]],
                            device const float*  s   [[buffer(2)]],
                            device uchar*        dst [[buffer(3)]],
                            uint gid [[thread_position_in_grid]])
{
    if (gid >= a.m * a.k) {
        return;
    }
    const uint r = gid / a.k, c = gid % a.k;
    dst[gid] = qf_encode(a.lhs_fmt, x[gid] / s[qf_scale_index(a.layout, a.block, r, c, a.k)]);
}

kernel void scaled_dequantize(constant ScaledArgs& a     [[buffer(0)]],
                              device const uchar*  codes [[buffer(1)]],
                              device const float*  s     [[buffer(2)]],
                              device float*        dst   [[buffer(3)]],
                              uint gid [[thread_position_in_grid]])
{
    if (gid >= a.m * a.k) {
        return;
    }
    const uint r = gid / a.k, c = gid % a.k;
    dst[gid] = qf_decode(a.lhs_fmt, codes[gid]) * s[qf_scale_index(a.layout, a.block, r, c, a.k)];
}

kernel void scaled_quant_scale(constant ScaledArgs& a   [[buffer(0)]],
                               device const float*  x   [[buffer(1)]],
                               device float*        dst [[buffer(2)]],
                               uint gid [[thread_position_in_grid]])
{
    // group gid: rows r0..r1, columns c0..c1
    uint r0, r1, c0, c1;
    if (a.layout == 0u) {
        if (gid > 0u) {
            return;
        }
        r0 = 0u; r1 = a.m; c0 = 0u; c1 = a.k;
    } else if (a.layout == 1u) {
        if (gid >= a.m) {
            return;
        }
        r0 = gid; r1 = gid + 1u; c0 = 0u; c1 = a.k;
    } else {
        const uint nb = (a.k + a.block - 1u) / a.block;
        if (gid >= a.m * nb) {
            return;
        }
        r0 = gid / nb; r1 = r0 + 1u; c0 = (gid % nb) * a.block; c1 = min(a.k, c0 + a.block);
    }
    float amax = 0.0f;
    bool nan = false;
    for (uint r = r0; r < r1; ++r) {
        for (uint c = c0; c < c1; ++c) {
            const float v = x[(ulong)r * a.k + c];
            nan = nan || isnan(v);
            amax = max(amax, fabs(v));
        }
    }
    const float top = a.lhs_fmt == 0u ? 448.0f : a.lhs_fmt == 1u ? 57344.0f : 127.0f;
    dst[gid] = nan ? NAN : amax == 0.0f ? 1.0f : amax / top;
}
