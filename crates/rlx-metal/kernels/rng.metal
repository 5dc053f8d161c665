// rng.metal -- Philox 4x32-10 random fills (rlx_ir::rng; Salmon, Moraes,
// Dror & Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3", SC 2011).
//
// Stream word i is lane i % 4 of the block with counter
// [lo(i/4), hi(i/4), offset_lo, offset_hi] and key [key_lo, key_hi]; a
// uniform is the word's top 24 bits * 2^-24; a normal is Box-Muller (cos
// branch, f32) on the uniforms of words 2i, 2i + 1, with the explicit f32
// log / cos of rlx_ir::rng::{log_f32, cos_turn24} (same constants, same
// operation order; the numpy reference evaluates them likewise), so no
// library log / cos is involved. Every element is a pure function of
// (key, offset, i), so the result does not depend on the grid. Products
// and sums are separate statements so that no compiler contracts them into
// an fma (the host rounds each).
//
// Threadgroup layout: 1-D, any threadgroup size (the host uses 256).
// rng_uniform_f32   args RngArgs: buffer(1) dst; one thread per Philox
//   block (4 elements): dst[i] = a + b * u(i).
// rng_normal_f32    args RngArgs: buffer(1) dst; one thread per block
//   (2 elements): dst[i] = a + b * z(i).
#include <metal_stdlib>
#include "args.h"
using namespace metal;

// Ten Philox rounds; the key is bumped by the Weyl constants between them.
static inline void philox4x32_10(thread uint* c, uint k0, uint k1)
{
    for (uint r = 0; r < 10; ++r) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const ulong p0 = (ulong)0xD2511F53u * (ulong)c[0];
        const ulong p1 = (ulong)0xCD9E8D57u * (ulong)c[2];
        const uint hi0 = (uint)(p0 >> 32), lo0 = (uint)p0;
        const uint hi1 = (uint)(p1 >> 32), lo1 = (uint)p1;
        const uint n0 = hi1 ^ c[1] ^ k0;
        const uint n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
    }
}

static inline void philox_block(constant RngArgs& a, ulong block, thread uint* c)
{
    c[0] = (uint)block;
    c[1] = (uint)(block >> 32);
    c[2] = a.offset_lo;
    c[3] = a.offset_hi;
    philox4x32_10(c, a.key_lo, a.key_hi);
}

static inline float word_uniform(uint w)
{
    return (float)(w >> 8) * (1.0f / 16777216.0f);
}

// ln x for a positive normal x: x = 2^e * m, m in [sqrt(1/2), sqrt(2)),
// f = m - 1, ((f * f^2) * P(f) + e * ln2_lo - f^2 / 2) + f + e * ln2_hi.
static inline float log_f32(float x)
{
    const uint b = as_type<uint>(x);
    int e = (int)(b >> 23) - 127;
    float m = as_type<float>((b & 0x007FFFFFu) | 0x3F800000u);
    if (m > 1.41421354f) {
        m = m * 0.5f;
        e = e + 1;
    }
    const float f = m - 1.0f;
    const float ef = (float)e;
    const float P[9] = {3.3333313e-1f, -2.500001e-1f, 2.0002119e-1f, -1.6667996e-1f,
                        1.4219551e-1f, -1.24055915e-1f, 1.1888175e-1f, -1.1675641e-1f,
                        6.746601e-2f};
    float p = P[8];
    for (int i = 7; i >= 0; --i) {
        const float pf = p * f;
        p = pf + P[i];
    }
    const float z = f * f;
    const float fz = f * z;
    float y = fz * p;
    const float lo = ef * -2.1219444e-4f;
    y = y + lo;
    const float hz = 0.5f * z;
    y = y - hz;
    const float r = f + y;
    const float hi = ef * 0.693359375f;
    return r + hi;
}

// cos(2 pi k / 2^24) for a 24-bit k: quadrant q = round(k / 2^22),
// t = (k - q * 2^22) * (2 pi / 2^24) in [-pi/4, pi/4], Taylor sin / cos.
static inline float cos_turn24(uint k)
{
    k = k & 0x00FFFFFFu;
    const uint q = (k + (1u << 21)) >> 22;
    const int r = (int)k - (int)(q << 22);
    const float t = (float)r * 3.7450704e-7f;
    const float z = t * t;
    const float S[4] = {-1.6666667e-1f, 8.333334e-3f, -1.984127e-4f, 2.7557319e-6f};
    float s = S[3];
    for (int i = 2; i >= 0; --i) {
        const float sz = s * z;
        s = sz + S[i];
    }
    const float tz = t * z;
    const float tzs = tz * s;
    const float sn = t + tzs;
    const float C[5] = {-5.0e-1f, 4.1666668e-2f, -1.3888889e-3f, 2.4801588e-5f, -2.755732e-7f};
    float c = C[4];
    for (int i = 3; i >= 0; --i) {
        const float cz = c * z;
        c = cz + C[i];
    }
    const float zc = z * c;
    const float cs = 1.0f + zc;
    switch (q & 3u) {
    case 0u: return cs;
    case 1u: return -sn;
    case 2u: return -cs;
    default: return sn;
    }
}

kernel void rng_uniform_f32(constant RngArgs& a   [[buffer(0)]],
                            device float*     dst [[buffer(1)]],
                            uint gid [[thread_position_in_grid]])
{
    const ulong first = (ulong)gid * 4;
    if (first >= a.len) {
        return;
    }
    uint c[4];
    philox_block(a, gid, c);
    for (uint l = 0; l < 4 && first + l < a.len; ++l) {
        const float t = a.b * word_uniform(c[l]);
        dst[first + l] = a.a + t;
    }
}

kernel void rng_normal_f32(constant RngArgs& a   [[buffer(0)]],
                           device float*     dst [[buffer(1)]],
                           uint gid [[thread_position_in_grid]])
{
    const ulong first = (ulong)gid * 2;
    if (first >= a.len) {
        return;
    }
    uint c[4];
    philox_block(a, gid, c);
    for (uint l = 0; l < 2 && first + l < a.len; ++l) {
        const float u1 = word_uniform(c[2 * l]);
        const float lg = log_f32(1.0f - u1);
        const float r = precise::sqrt(-2.0f * lg);
        const float z = r * cos_turn24(c[2 * l + 1] >> 8);
        const float t = a.b * z;
        dst[first + l] = a.a + t;
    }
}
