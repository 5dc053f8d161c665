// ssm.metal -- state-space scans: Mamba selective scan and Mamba-2 SSD,
// recurrent form, f32.
//
// Both scans are a set of independent state rows r of n values, each
//     h_t = decay_t (.) h_{t-1} + u_t B_t,   y_t[r] = h_t . C_t
// with B, C [batch, seq, n] shared by all rows of a batch item:
//   selective_scan: row = (b, channel c), decay_t[j] = exp(delta * A[c, j]),
//                   u_t = delta * x   (delta, x at [b, t, c]);
//   mamba2:         row = (b, head, p-index i), decay_t = exp(dt * a[head]),
//                   u_t = dt * x   (dt at [b, t, head], x at [b, t, head*p + i]).
//
// Threadgroup layout: threads [32 * RLX_SSM_ROWS, 1, 1]; simdgroup `sid`
// of threadgroup (x, y, z) owns one state row, lane l the columns
// j = l + 32 c (c < RLX_SSM_COLS) in f32 registers, so n <= 128 (larger
// states run on the host); y_t is a simd_sum. No barriers: rows are
// independent.
//   selective_scan grid [ceil(hidden / RLX_SSM_ROWS), batch, 1],
//                  c = x * RLX_SSM_ROWS + sid, b = y;
//   mamba2         grid [ceil(head_dim / RLX_SSM_ROWS), heads, batch],
//                  i = x * RLX_SSM_ROWS + sid, head = y, b = z.
// With has_state the scan starts from `state` and writes the final h
// back in place; without it starts from zero and `state` is not touched
// (bind any buffer). dst must not overlap an input (other rows still read
// B / C / x at step t); the lowering keeps such thunks on the host.
//
// selective_scan_f32   args SsmArgs: buffer(1) x, (2) delta [batch, seq,
//   hidden], (3) A [hidden, n], (4) B, (5) C [batch, seq, n], (6) state
//   [batch, hidden, n], (7) dst [batch, seq, hidden].
// mamba2_f32           args Mamba2Args: buffer(1) x [batch, seq, heads * p],
//   (2) dt [batch, seq, heads], (3) a [heads], (4) B, (5) C [batch, seq, n],
//   (6) state [batch, heads, p, n], (7) dst [batch, seq, heads * p].
#include <metal_stdlib>
#include "args.h"
using namespace metal;

#define RLX_SSM_ROWS 4
#define RLX_SSM_COLS 4

kernel void selective_scan_f32(constant SsmArgs& a     [[buffer(0)]],
                               device const float* x     [[buffer(1)]],
                               device const float* delta [[buffer(2)]],
                               device const float* A     [[buffer(3)]],
                               device const float* B     [[buffer(4)]],
                               device const float* C     [[buffer(5)]],
                               device float*       state [[buffer(6)]],
                               device float*       dst   [[buffer(7)]],
                               uint3 tg   [[threadgroup_position_in_grid]],
                               uint  sid  [[simdgroup_index_in_threadgroup]],
                               uint  lane [[thread_index_in_simdgroup]])
{
    const uint n = a.n;
    const uint c = tg.x * RLX_SSM_ROWS + sid;
    const uint b = tg.y;
    // a whole simdgroup leaves together: no threadgroup barrier follows
    if (c >= a.hidden || n > 32 * RLX_SSM_COLS) {
        return;
    }
    device float* st = state + ((ulong)b * a.hidden + c) * n;
    float h[RLX_SSM_COLS];
    float ar[RLX_SSM_COLS];
    for (uint k = 0; k < RLX_SSM_COLS; ++k) {
        const uint j = lane + 32 * k;
        h[k] = j < n && a.has_state != 0 ? st[j] : 0.0f;
        ar[k] = j < n ? A[(ulong)c * n + j] : 0.0f;
    }
    for (uint t = 0; t < a.seq; ++t) {
        const ulong row = (ulong)b * a.seq + t;
        const float d = delta[row * a.hidden + c];
        const float u = d * x[row * a.hidden + c];
        device const float* bt = B + row * n;
        device const float* ct = C + row * n;
        float y = 0.0f;
        for (uint k = 0; k < RLX_SSM_COLS; ++k) {
            const uint j = lane + 32 * k;
            if (j < n) {
                h[k] = exp(d * ar[k]) * h[k] + u * bt[j];
                y += h[k] * ct[j];
            }
        }
        y = simd_sum(y);
        if (lane == 0) {
            dst[row * a.hidden + c] = y;
        }
    }
    if (a.has_state != 0) {
        for (uint k = 0; k < RLX_SSM_COLS; ++k) {
            const uint j = lane + 32 * k;
            if (j < n) {
                st[j] = h[k];
            }
        }
    }
}

kernel void mamba2_f32(constant Mamba2Args& a     [[buffer(0)]],
                       device const float*  x     [[buffer(1)]],
                       device const float*  dt    [[buffer(2)]],
                       device const float*  A     [[buffer(3)]],
                       device const float*  B     [[buffer(4)]],
                       device const float*  C     [[buffer(5)]],
                       device float*        state [[buffer(6)]],
                       device float*        dst   [[buffer(7)]],
                       uint3 tg   [[threadgroup_position_in_grid]],
                       uint  sid  [[simdgroup_index_in_threadgroup]],
                       uint  lane [[thread_index_in_simdgroup]])
{
    const uint n = a.n;
    const uint p = a.head_dim;
    const uint i = tg.x * RLX_SSM_ROWS + sid;
    const uint hd = tg.y;
    const uint b = tg.z;
    if (i >= p || n > 32 * RLX_SSM_COLS) {
        return;
    }
    device float* st = state + (((ulong)b * a.heads + hd) * p + i) * n;
    float h[RLX_SSM_COLS];
    for (uint k = 0; k < RLX_SSM_COLS; ++k) {
        const uint j = lane + 32 * k;
        h[k] = j < n && a.has_state != 0 ? st[j] : 0.0f;
    }
    const float ah = A[hd];
    const ulong width = (ulong)a.heads * p;
    for (uint t = 0; t < a.seq; ++t) {
        const ulong row = (ulong)b * a.seq + t;
        const float d = dt[row * a.heads + hd];
        const float decay = exp(d * ah);
        const ulong xi = row * width + (ulong)hd * p + i;
        const float u = d * x[xi];
        device const float* bt = B + row * n;
        device const float* ct = C + row * n;
        float y = 0.0f;
        for (uint k = 0; k < RLX_SSM_COLS; ++k) {
            const uint j = lane + 32 * k;
            if (j < n) {
                h[k] = decay * h[k] + u * bt[j];
                y += h[k] * ct[j];
            }
        }
        y = simd_sum(y);
        if (lane == 0) {
            dst[xi] = y;
        }
    }
    if (a.has_state != 0) {
        for (uint k = 0; k < RLX_SSM_COLS; ++k) {
            const uint j = lane + 32 * k;
            if (j < n) {
                st[j] = h[k];
            }
        }
    }
}
