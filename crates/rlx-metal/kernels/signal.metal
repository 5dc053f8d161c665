// signal.metal -- 1-D FFT on the 2N-real-block layout and log-mel, f32.
//
// Row layouts (FftArgs.layout): 0 block [re_0..re_{n-1}, im_0..im_{n-1}]
// (2n floats), 1 real input (n floats, imaginary part 0; the output is a
// block row), 2 interleaved [re_0, im_0, ..] (c64 rows, in and out).
// FftArgs.scale is numpy's norm factor (1, 1/n or 1/sqrt(n)), applied once
// at the end; inverse flips the twiddle sign.
//
// fft_stockham_f32   args FftArgs: buffer(1) src, (2) dst;
//   [[threadgroup(0)]] 16·n bytes (two float2 ping-pong rows).
//   One threadgroup per row, n a power of two 1..2048, any threadgroup
//   size. Stockham autosort passes (no bit reversal): radix 4 while the
//   remaining factor allows, then one radix-2 pass when log2 n is odd.
//   Pass with radix R over Ns already-combined points: item j (0..n/R)
//   reads x[j + r·n/R], twiddles by w^(r·(j mod Ns)) with
//   w = e^{∓2πi/(Ns·R)}, does an R-point DFT and writes
//   y[(j/Ns)·Ns·R + j mod Ns + r·Ns]. The row is read whole into
//   threadgroup memory before any write, so dst may equal src.
// fft_dft_f32        args FftArgs: buffer(1) src, (2) dst.
//   Any n (the general path): grid (ceil(n/threads), outer), one thread
//   per output bin k, X_k = Σ_j x_j e^{∓2πi (j·k mod n)/n} summed in f32
//   in blocks of 32 terms (the exact index reduction keeps the angle in
//   [0, 2π)). O(n²) per row; dst must not overlap src.
// log_mel_f32        args LogMelArgs: buffer(1) spec [outer, 2·n_fft],
//   (2) filters [n_mels, n_bins], (3) dst [outer, n_mels]; 1-D grid, one
//   thread per (row, mel): log(Σ_k filters[m,k]·(re_k² + im_k²) + 1e-10).
// welch_peaks_f32    args WelchArgs: buffer(1) spec [batch·n_segments,
//   2·n_fft] block rows, (2) dst [batch, k] f32 bin indices;
//   [[threadgroup(0)]] 4·nb bytes (nb = n_fft/2 + 1: the mean power's
//   total-order keys), (1) 8·threads bytes of (key, bin) scratch, (2) nb
//   bytes of taken flags. One threadgroup per batch row: the mean of
//   re² + im² over the row's segments per bin, then k rounds of a
//   threadgroup arg max (largest first in f32::total_cmp order, ties to the
//   lower bin), each winner marked taken; rounds past nb write −1.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

#define RLX_TWO_PI 6.283185307179586f

static inline float2 rlx_cmul(float2 a, float2 b) {
    return float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

// e^{i·2π·num/den·sign} with num reduced mod den by the caller.
static inline float2 rlx_twiddle(uint num, uint den, float sign) {
    float ang = sign * RLX_TWO_PI * (float)num / (float)den;
    return float2(cos(ang), sin(ang));
}

static inline float2 rlx_load(device const float* row, uint n, uint j, uint layout) {
    if (layout == 1u) {
        return float2(row[j], 0.0f);
    }
    if (layout == 2u) {
        return float2(row[2u * j], row[2u * j + 1u]);
    }
    return float2(row[j], row[n + j]);
}

static inline void rlx_store(device float* row, uint n, uint k, uint layout, float2 v) {
    if (layout == 2u) {
        row[2u * k] = v.x;
        row[2u * k + 1u] = v.y;
    } else {
        row[k] = v.x;
        row[n + k] = v.y;
    }
}

kernel void fft_stockham_f32(constant FftArgs&   a   [[buffer(0)]],
                             device const float* src [[buffer(1)]],
                             device float*       dst [[buffer(2)]],
                             threadgroup float2* tg  [[threadgroup(0)]],
                             uint row [[threadgroup_position_in_grid]],
                             uint lid [[thread_position_in_threadgroup]],
                             uint tpg [[threads_per_threadgroup]])
{
    const uint n = a.n;
    const uint in_w = a.layout == 1u ? n : 2u * n;
    device const float* s = src + (ulong)row * in_w;
    device float* d = dst + (ulong)row * 2u * n;
    const float sign = a.inverse != 0u ? 1.0f : -1.0f;
    threadgroup float2* x = tg;
    threadgroup float2* y = tg + n;
    for (uint j = lid; j < n; j += tpg) {
        x[j] = rlx_load(s, n, j, a.layout);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint ns = 1u;
    while (ns < n) {
        const uint radix = (n / ns) % 4u == 0u ? 4u : 2u;
        const uint stride = n / radix;
        for (uint j = lid; j < stride; j += tpg) {
            const uint k = j % ns;
            const uint span = ns * radix;
            const uint out = (j / ns) * span + k;
            if (radix == 4u) {
                float2 v0 = x[j];
                float2 v1 = rlx_cmul(x[j + stride], rlx_twiddle(k, span, sign));
                float2 v2 = rlx_cmul(x[j + 2u * stride], rlx_twiddle(2u * k, span, sign));
                float2 v3 = rlx_cmul(x[j + 3u * stride], rlx_twiddle(3u * k, span, sign));
                float2 s02 = v0 + v2, d02 = v0 - v2;
                float2 s13 = v1 + v3, d13 = v1 - v3;
                // ∓i·d13: the quarter-turn of the 4-point DFT
                float2 rot = float2(-sign * d13.y, sign * d13.x);
                y[out] = s02 + s13;
                y[out + ns] = d02 + rot;
                y[out + 2u * ns] = s02 - s13;
                y[out + 3u * ns] = d02 - rot;
            } else {
                float2 v0 = x[j];
                float2 v1 = rlx_cmul(x[j + stride], rlx_twiddle(k, span, sign));
                y[out] = v0 + v1;
                y[out + ns] = v0 - v1;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        threadgroup float2* t = x;
        x = y;
        y = t;
        ns *= radix;
    }
    for (uint k = lid; k < n; k += tpg) {
        rlx_store(d, n, k, a.layout, x[k] * a.scale);
    }
}

kernel void fft_dft_f32(constant FftArgs&   a   [[buffer(0)]],
                        device const float* src [[buffer(1)]],
                        device float*       dst [[buffer(2)]],
                        uint2 tg  [[threadgroup_position_in_grid]],
                        uint  lid [[thread_position_in_threadgroup]],
                        uint  tpg [[threads_per_threadgroup]])
{
    const uint n = a.n;
    const uint k = tg.x * tpg + lid;
    const uint row = tg.y;
    if (k >= n) {
        return;
    }
    const uint in_w = a.layout == 1u ? n : 2u * n;
    device const float* s = src + (ulong)row * in_w;
    const float sign = a.inverse != 0u ? 1.0f : -1.0f;
    // blocked sum: 32-term partials folded into the total keep the f32
    // rounding error near (32 + n/32)·eps instead of n·eps
    float2 acc = float2(0.0f, 0.0f);
    float2 part = float2(0.0f, 0.0f);
    uint idx = 0u;  // j·k mod n, advanced by k each step
    for (uint j = 0u; j < n; ++j) {
        part += rlx_cmul(rlx_load(s, n, j, a.layout), rlx_twiddle(idx, n, sign));
        idx += k;
        if (idx >= n) {
            idx -= n;
        }
        if ((j & 31u) == 31u) {
            acc += part;
            part = float2(0.0f, 0.0f);
        }
    }
    acc += part;
    rlx_store(dst + (ulong)row * 2u * n, n, k, a.layout, acc * a.scale);
}

kernel void log_mel_f32(constant LogMelArgs& a       [[buffer(0)]],
                        device const float*  spec    [[buffer(1)]],
                        device const float*  filters [[buffer(2)]],
                        device float*        dst     [[buffer(3)]],
                        uint gid [[thread_position_in_grid]])
{
    if (gid >= a.outer * a.n_mels) {
        return;
    }
    const uint row = gid / a.n_mels;
    const uint m = gid % a.n_mels;
    device const float* s = spec + (ulong)row * 2u * a.n_fft;
    device const float* f = filters + (ulong)m * a.n_bins;
    float acc = 0.0f;
    for (uint k = 0u; k < a.n_bins; ++k) {
        const float re = s[k];
        const float im = s[a.n_fft + k];
        acc += f[k] * (re * re + im * im);
    }
    dst[gid] = log(acc + 1e-10f);
}

// Rust's f32::total_cmp as a signed key: −NaN < −inf < … < −0 < +0 < … <
// +inf < +NaN, the host's order for the bins' power.
static inline int rlx_total_key(float v) {
    const int i = as_type<int>(v);
    return i ^ int(uint(i >> 31) >> 1);
}

// (key, bin) pairs: larger key first, ties to the lower bin; bin 0xffffffff
// (nothing) last.
static inline bool rlx_welch_before(int ka, uint ia, int kb, uint ib) {
    if (ia == 0xffffffffu || ib == 0xffffffffu) {
        return ib == 0xffffffffu && ia != 0xffffffffu;
    }
    return ka > kb || (ka == kb && ia < ib);
}

kernel void welch_peaks_f32(constant WelchArgs&   a       [[buffer(0)]],
                            device const float*   spec    [[buffer(1)]],
                            device float*         dst     [[buffer(2)]],
                            threadgroup int*      key     [[threadgroup(0)]],
                            threadgroup uint2*    scratch [[threadgroup(1)]],
                            threadgroup uchar*    taken   [[threadgroup(2)]],
                            uint row [[threadgroup_position_in_grid]],
                            uint tid [[thread_position_in_threadgroup]],
                            uint nt  [[threads_per_threadgroup]])
{
    if (row >= a.batch) {
        return;
    }
    const uint nb = a.n_fft / 2u + 1u;
    const float inv = 1.0f / (float)a.n_segments;
    for (uint b = tid; b < nb; b += nt) {
        float acc = 0.0f;
        for (uint s = 0u; s < a.n_segments; ++s) {
            device const float* r = spec + ((ulong)row * a.n_segments + s) * 2u * a.n_fft;
            acc += r[b] * r[b] + r[a.n_fft + b] * r[a.n_fft + b];
        }
        key[b] = rlx_total_key(acc * inv);
        taken[b] = 0;
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint r = 0u; r < a.k; ++r) {
        int bk = 0;
        uint bi = 0xffffffffu;
        for (uint b = tid; b < nb; b += nt) {
            if (taken[b] == 0 && rlx_welch_before(key[b], b, bk, bi)) {
                bk = key[b];
                bi = b;
            }
        }
        scratch[tid] = uint2(as_type<uint>(bk), bi);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint live = nt; live > 1u;) {
            const uint h = (live + 1u) / 2u;
            if (tid < live - h) {
                const uint2 o = scratch[tid + h];
                const uint2 m = scratch[tid];
                if (rlx_welch_before(as_type<int>(o.x), o.y, as_type<int>(m.x), m.y)) {
                    scratch[tid] = o;
                }
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
            live = h;
        }
        if (tid == 0u) {
            const uint win = scratch[0].y;
            dst[(ulong)row * a.k + r] = win == 0xffffffffu ? -1.0f : (float)win;
            if (win != 0xffffffffu) {
                taken[win] = 1;
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
}
