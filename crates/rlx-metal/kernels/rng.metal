// rng.metal -- Philox 4x32-10 random fills (rlx_ir::rng; Salmon, Moraes,
// Dror & Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3", SC 2011).
//
// Stream word i is lane i % 4 of the block with counter
// [lo(i/4), hi(i/4), offset_lo, offset_hi] and key [key_lo, key_hi]; a
// uniform is the word's top 24 bits * 2^-24; a normal is Box-Muller (cos
// branch, f32) on the uniforms of words 2i, 2i + 1. Every element is a
// pure function of (key, offset, i), so the result does not depend on the
// grid. Products and sums are separate statements so that no compiler
// contracts them into an fma (the host rounds each).
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
        const float u2 = word_uniform(c[2 * l + 1]);
        const float lg = precise::log(1.0f - u1);
        const float r = precise::sqrt(-2.0f * lg);
        const float th = 6.28318548f * u2;
        const float z = r * precise::cos(th);
        const float t = a.b * z;
        dst[first + l] = a.a + t;
    }
}
