// elementwise.metal -- unary activations, f32 <-> f16 casts and the
// general numeric casts of CastHost.
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
// cast_host_<s>_<d>         args CastArgs: buffer(1) src, buffer(2) dst,
//                           s, d in f32 f16 i8 i16 i32 i64 u8 u32 bool
//                           (CastHost; the host's cast_numeric, bit for bit)
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

// ---------------------------------------------------------------------------
// cast_host_<s>_<d>: CastHost with the host's semantics (Rust `as`, i.e.
// rlx_metal::host::kernels::elementwise::cast_numeric) bit for bit:
//   float -> int   truncate toward zero, saturate to the target's range,
//                  NaN -> 0 (-inf / +inf -> min / max);
//   int   -> int   wrap (two's complement, low bits kept);
//   int   -> float round to nearest even (f16: |v| >= 65520 -> inf);
//   f32   -> f16   round to nearest even, NaN quiet with its top payload
//                  bits; f16 -> f32 exact, NaN quiet; f32 -> f32 quiets NaN;
//   x     -> bool  x != 0 (NaN -> 1, -0.0 -> 0; any non-zero byte of a
//                  bool source is true), bool -> number 0 / 1.
// Everything is done on the bit patterns with integer arithmetic: MSL's own
// float -> int conversion is undefined out of range, and fast math may
// assume no NaN / inf or flush subnormals. Floats are loaded as their bits
// (uint / ushort); i8 as uchar (char's signedness is not relied on).
// ---------------------------------------------------------------------------

// Index of the highest set bit of x (x != 0).
static inline uint rlx_cv_top_bit(ulong x) {
    uint p = 0u;
    if ((x >> 32) != 0ul) { p += 32u; x >>= 32; }
    if ((x >> 16) != 0ul) { p += 16u; x >>= 16; }
    if ((x >> 8) != 0ul)  { p += 8u;  x >>= 8; }
    if ((x >> 4) != 0ul)  { p += 4u;  x >>= 4; }
    if ((x >> 2) != 0ul)  { p += 2u;  x >>= 2; }
    if ((x >> 1) != 0ul)  { p += 1u; }
    return p;
}

// f32 bits of trunc(x) toward zero, saturated to [lo, hi] (lo <= 0 <= hi);
// NaN -> 0.
static inline long rlx_cv_trunc(uint b, long lo, long hi) {
    const uint e = (b >> 23) & 0xffu;
    const bool neg = (b >> 31) != 0u;
    if (e == 0xffu && (b & 0x7fffffu) != 0u) {
        return 0;                                   // NaN
    }
    if (e < 127u) {
        return 0;                                   // |x| < 1
    }
    if (e >= 127u + 63u) {
        return neg ? lo : hi;                       // |x| >= 2^63, inf
    }
    const ulong m = ulong((b & 0x7fffffu) | 0x800000u);
    const ulong mag = e >= 150u ? m << (e - 150u) : m >> (150u - e);
    const long v = neg ? -long(mag) : long(mag);    // |v| < 2^63
    return v < lo ? lo : (v > hi ? hi : v);
}

// f32 bits of v, rounded to nearest even.
static inline uint rlx_cv_long_to_f32(long v) {
    const uint sign = v < 0 ? 0x80000000u : 0u;
    const ulong mag = v < 0 ? 0ul - ulong(v) : ulong(v);
    if (mag == 0ul) {
        return 0u;
    }
    const uint p = rlx_cv_top_bit(mag);
    ulong m;
    if (p <= 23u) {
        m = mag << (23u - p);
    } else {
        const uint s = p - 23u;
        m = mag >> s;
        const ulong rem = mag & ((1ul << s) - 1ul);
        const ulong half_ulp = 1ul << (s - 1u);
        if (rem > half_ulp || (rem == half_ulp && (m & 1ul) != 0ul)) {
            m += 1ul;                               // may carry into the exponent
        }
    }
    return sign | (((p + 126u) << 23) + uint(m));
}

// f16 bits of the f32 with bits b, rounded to nearest even.
static inline ushort rlx_cv_f32_to_f16(uint b) {
    const uint sign = (b >> 16) & 0x8000u;
    const uint a = b & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return ushort(sign | 0x7e00u | ((a & 0x7fffffu) >> 13));   // NaN
    }
    if (a >= 0x477ff000u) {
        return ushort(sign | 0x7c00u);              // >= 65520 rounds to inf
    }
    if (a >= 0x38800000u) {                         // a normal f16 (>= 2^-14)
        const uint r = a - 0x38000000u;             // exponent bias 127 -> 15
        uint h = r >> 13;
        const uint rem = r & 0x1fffu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) {
            h += 1u;
        }
        return ushort(sign | h);
    }
    if (a <= 0x33000000u) {
        return ushort(sign);                        // <= 2^-25 rounds to 0
    }
    // a subnormal f16: x / 2^-24 = m * 2^(e - 126), rounded
    const uint e = a >> 23;                         // 102 ..= 112
    const uint m = (a & 0x7fffffu) | 0x800000u;
    const uint s = 126u - e;                        // 14 ..= 24
    uint h = m >> s;
    const uint rem = m & ((1u << s) - 1u);
    const uint half_ulp = 1u << (s - 1u);
    if (rem > half_ulp || (rem == half_ulp && (h & 1u) != 0u)) {
        h += 1u;
    }
    return ushort(sign | h);
}

// f32 bits of the f16 with bits h (exact; NaN quiet, payload kept).
static inline uint rlx_cv_f16_to_f32(ushort h) {
    const uint sign = (uint(h) & 0x8000u) << 16;
    const uint e = (uint(h) >> 10) & 0x1fu;
    const uint m = uint(h) & 0x3ffu;
    if (e == 0x1fu) {
        return sign | 0x7f800000u | (m != 0u ? 0x400000u | (m << 13) : 0u);
    }
    if (e != 0u) {
        return sign | ((e + 112u) << 23) | (m << 13);
    }
    if (m == 0u) {
        return sign;
    }
    const uint p = rlx_cv_top_bit(ulong(m));        // m * 2^-24 = 1.f * 2^(p - 24)
    return sign | ((p + 103u) << 23) | ((m << (23u - p)) & 0x7fffffu);
}

// One struct per dtype: T is the stored element; `to<D>` converts an element
// through D's from_f32 (float sources, as f32 bits) or from_long (integer
// and bool sources, as their value).
#define RLX_CV_INT(Name, Store, load_expr, wrap_expr, LO, HI)                  \
struct Name {                                                                  \
    typedef Store T;                                                           \
    template <typename D> static typename D::T to(T x) {                       \
        return D::from_long(load_expr);                                        \
    }                                                                          \
    static T from_long(long v) { return wrap_expr; }                           \
    static T from_f32(uint b) { return from_long(rlx_cv_trunc(b, LO, HI)); }   \
};
RLX_CV_INT(CvI8, uchar, long(int(uint(x) << 24) >> 24), uchar(ulong(v)),
           -128, 127)
RLX_CV_INT(CvI16, short, long(x), as_type<short>(ushort(ulong(v))),
           -32768, 32767)
RLX_CV_INT(CvI32, int, long(x), as_type<int>(uint(ulong(v))),
           -2147483647 - 1, 2147483647)
RLX_CV_INT(CvI64, long, x, v, -9223372036854775807L - 1L,
           9223372036854775807L)
RLX_CV_INT(CvU8, uchar, long(x), uchar(ulong(v)), 0, 255)
RLX_CV_INT(CvU32, uint, long(x), uint(ulong(v)), 0, 4294967295L)

struct CvBool {
    typedef uchar T;
    template <typename D> static typename D::T to(T x) {
        return D::from_long(x != 0 ? 1 : 0);
    }
    static T from_long(long v) { return v != 0 ? 1 : 0; }
    static T from_f32(uint b) { return (b & 0x7fffffffu) != 0u ? 1 : 0; }
};

struct CvF32 {
    typedef uint T;
    template <typename D> static typename D::T to(T x) { return D::from_f32(x); }
    static T from_long(long v) { return rlx_cv_long_to_f32(v); }
    static T from_f32(uint b) {
        return (b & 0x7fffffffu) > 0x7f800000u ? (b | 0x400000u) : b;
    }
};

struct CvF16 {
    typedef ushort T;
    template <typename D> static typename D::T to(T x) {
        return D::from_f32(rlx_cv_f16_to_f32(x));
    }
    static T from_long(long v) {
        // |v| < 2^24 is exact in f32 and |v| >= 65520 is inf either way,
        // so rounding through f32 rounds once
        return rlx_cv_f32_to_f16(rlx_cv_long_to_f32(v));
    }
    static T from_f32(uint b) { return rlx_cv_f32_to_f16(b); }
};

template <typename S, typename D>
kernel void cast_host(constant CastArgs&       a [[buffer(0)]],
                      device const typename S::T* src [[buffer(1)]],
                      device typename D::T*      dst [[buffer(2)]],
                      uint gid [[thread_position_in_grid]])
{
    if (gid >= a.len) {
        return;
    }
    dst[gid] = S::template to<D>(src[gid]);
}

#define RLX_CAST_HOST(name, S, D)                                             \
template [[host_name(name)]] kernel void cast_host<S, D>(                     \
    constant CastArgs& a [[buffer(0)]], device const S::T* src [[buffer(1)]], \
    device D::T* dst [[buffer(2)]], uint gid [[thread_position_in_grid]]);
RLX_CAST_HOST("cast_host_f32_f32", CvF32, CvF32)
RLX_CAST_HOST("cast_host_f32_f16", CvF32, CvF16)
RLX_CAST_HOST("cast_host_f32_i8", CvF32, CvI8)
RLX_CAST_HOST("cast_host_f32_i16", CvF32, CvI16)
RLX_CAST_HOST("cast_host_f32_i32", CvF32, CvI32)
RLX_CAST_HOST("cast_host_f32_i64", CvF32, CvI64)
RLX_CAST_HOST("cast_host_f32_u8", CvF32, CvU8)
RLX_CAST_HOST("cast_host_f32_u32", CvF32, CvU32)
RLX_CAST_HOST("cast_host_f32_bool", CvF32, CvBool)
RLX_CAST_HOST("cast_host_f16_f32", CvF16, CvF32)
RLX_CAST_HOST("cast_host_f16_f16", CvF16, CvF16)
RLX_CAST_HOST("cast_host_f16_i8", CvF16, CvI8)
RLX_CAST_HOST("cast_host_f16_i16", CvF16, CvI16)
RLX_CAST_HOST("cast_host_f16_i32", CvF16, CvI32)
RLX_CAST_HOST("cast_host_f16_i64", CvF16, CvI64)
RLX_CAST_HOST("cast_host_f16_u8", CvF16, CvU8)
RLX_CAST_HOST("cast_host_f16_u32", CvF16, CvU32)
RLX_CAST_HOST("cast_host_f16_bool", CvF16, CvBool)
RLX_CAST_HOST("cast_host_i8_f32", CvI8, CvF32)
RLX_CAST_HOST("cast_host_i8_f16", CvI8, CvF16)
RLX_CAST_HOST("cast_host_i8_i8", CvI8, CvI8)
RLX_CAST_HOST("cast_host_i8_i16", CvI8, CvI16)
RLX_CAST_HOST("cast_host_i8_i32", CvI8, CvI32)
RLX_CAST_HOST("cast_host_i8_i64", CvI8, CvI64)
RLX_CAST_HOST("cast_host_i8_u8", CvI8, CvU8)
RLX_CAST_HOST("cast_host_i8_u32", CvI8, CvU32)
RLX_CAST_HOST("cast_host_i8_bool", CvI8, CvBool)
RLX_CAST_HOST("cast_host_i16_f32", CvI16, CvF32)
RLX_CAST_HOST("cast_host_i16_f16", CvI16, CvF16)
RLX_CAST_HOST("cast_host_i16_i8", CvI16, CvI8)
RLX_CAST_HOST("cast_host_i16_i16", CvI16, CvI16)
RLX_CAST_HOST("cast_host_i16_i32", CvI16, CvI32)
RLX_CAST_HOST("cast_host_i16_i64", CvI16, CvI64)
RLX_CAST_HOST("cast_host_i16_u8", CvI16, CvU8)
RLX_CAST_HOST("cast_host_i16_u32", CvI16, CvU32)
RLX_CAST_HOST("cast_host_i16_bool", CvI16, CvBool)
RLX_CAST_HOST("cast_host_i32_f32", CvI32, CvF32)
RLX_CAST_HOST("cast_host_i32_f16", CvI32, CvF16)
RLX_CAST_HOST("cast_host_i32_i8", CvI32, CvI8)
RLX_CAST_HOST("cast_host_i32_i16", CvI32, CvI16)
RLX_CAST_HOST("cast_host_i32_i32", CvI32, CvI32)
RLX_CAST_HOST("cast_host_i32_i64", CvI32, CvI64)
RLX_CAST_HOST("cast_host_i32_u8", CvI32, CvU8)
RLX_CAST_HOST("cast_host_i32_u32", CvI32, CvU32)
RLX_CAST_HOST("cast_host_i32_bool", CvI32, CvBool)
RLX_CAST_HOST("cast_host_i64_f32", CvI64, CvF32)
RLX_CAST_HOST("cast_host_i64_f16", CvI64, CvF16)
RLX_CAST_HOST("cast_host_i64_i8", CvI64, CvI8)
RLX_CAST_HOST("cast_host_i64_i16", CvI64, CvI16)
RLX_CAST_HOST("cast_host_i64_i32", CvI64, CvI32)
RLX_CAST_HOST("cast_host_i64_i64", CvI64, CvI64)
RLX_CAST_HOST("cast_host_i64_u8", CvI64, CvU8)
RLX_CAST_HOST("cast_host_i64_u32", CvI64, CvU32)
RLX_CAST_HOST("cast_host_i64_bool", CvI64, CvBool)
RLX_CAST_HOST("cast_host_u8_f32", CvU8, CvF32)
RLX_CAST_HOST("cast_host_u8_f16", CvU8, CvF16)
RLX_CAST_HOST("cast_host_u8_i8", CvU8, CvI8)
RLX_CAST_HOST("cast_host_u8_i16", CvU8, CvI16)
RLX_CAST_HOST("cast_host_u8_i32", CvU8, CvI32)
RLX_CAST_HOST("cast_host_u8_i64", CvU8, CvI64)
RLX_CAST_HOST("cast_host_u8_u8", CvU8, CvU8)
RLX_CAST_HOST("cast_host_u8_u32", CvU8, CvU32)
RLX_CAST_HOST("cast_host_u8_bool", CvU8, CvBool)
RLX_CAST_HOST("cast_host_u32_f32", CvU32, CvF32)
RLX_CAST_HOST("cast_host_u32_f16", CvU32, CvF16)
RLX_CAST_HOST("cast_host_u32_i8", CvU32, CvI8)
RLX_CAST_HOST("cast_host_u32_i16", CvU32, CvI16)
RLX_CAST_HOST("cast_host_u32_i32", CvU32, CvI32)
RLX_CAST_HOST("cast_host_u32_i64", CvU32, CvI64)
RLX_CAST_HOST("cast_host_u32_u8", CvU32, CvU8)
RLX_CAST_HOST("cast_host_u32_u32", CvU32, CvU32)
RLX_CAST_HOST("cast_host_u32_bool", CvU32, CvBool)
RLX_CAST_HOST("cast_host_bool_f32", CvBool, CvF32)
RLX_CAST_HOST("cast_host_bool_f16", CvBool, CvF16)
RLX_CAST_HOST("cast_host_bool_i8", CvBool, CvI8)
RLX_CAST_HOST("cast_host_bool_i16", CvBool, CvI16)
RLX_CAST_HOST("cast_host_bool_i32", CvBool, CvI32)
RLX_CAST_HOST("cast_host_bool_i64", CvBool, CvI64)
RLX_CAST_HOST("cast_host_bool_u8", CvBool, CvU8)
RLX_CAST_HOST("cast_host_bool_u32", CvBool, CvU32)
RLX_CAST_HOST("cast_host_bool_bool", CvBool, CvBool)
