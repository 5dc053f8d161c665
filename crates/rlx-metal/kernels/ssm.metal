// ssm.metal -- state-space scans: Mamba selective scan and Mamba-2 SSD,
// f32: both in their recurrent form (decode, short runs), Mamba-2 also in
// its chunked SSD form (prefill; `mamba2_chunked_f32`, last section).
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

// ---------------------------------------------------------------------------
// mamba2_chunked_f32: the chunked SSD (state-space duality) form of the same
// Mamba-2 scan, for prefill (the lowering picks it from seq >= 16, the
// host's CHUNKED_FROM; chunks of RLX_SSD_CHUNK = 64 tokens, the last
// partial). Within a chunk of L tokens with start state h_0 [p, n], G_t the
// cumulative sum of dt * a[head] over the chunk, gamma_t = exp(G_t) and
// u_t = dt_t x_t (one value per row i):
//     M[t, r] = e^{G_t - G_r} (C_t . B_r)                     (r <= t)
//     y_t[i]  = gamma_t (C_t . h_0[i]) + sum_{r <= t} M[t, r] u_r[i]
//     h_L[i]  = gamma_L h_0[i] + sum_r e^{G_L - G_r} u_r[i] B_r
// M depends on dt, a, B, C only (not on the row), so the threadgroup builds
// it once per chunk in threadgroup memory; every state row then forms its
// outputs and its next state from it.
//
// Threadgroup layout: grid [ceil(p / (nsg * RLX_SSDC_RPS)), heads, batch],
// threads [32 * nsg, 1, 1] with nsg <= RLX_SSDC_SG simdgroups. Simdgroup
// sid of threadgroup x owns rows i = x * nsg * RLX_SSDC_RPS + sid + nsg * m
// (m < RLX_SSDC_RPS); lane l holds columns j = l + 32 c of those rows in
// registers, as f32 for the whole sequence (n <= 128). Per row: the row is
// staged in threadgroup memory so that lane l can form C_t . h_0[i] for
// its tokens t = l and t = l + 32; u_r is broadcast from its lane with
// simd_shuffle. Same bindings and has_state rule as mamba2_f32.
#define RLX_SSD_CHUNK 64
#define RLX_SSDC_SG 8
#define RLX_SSDC_RPS 8

kernel void mamba2_chunked_f32(constant Mamba2Args& a     [[buffer(0)]],
                               device const float*  x     [[buffer(1)]],
                               device const float*  dt    [[buffer(2)]],
                               device const float*  A     [[buffer(3)]],
                               device const float*  B     [[buffer(4)]],
                               device const float*  C     [[buffer(5)]],
                               device float*        state [[buffer(6)]],
                               device float*        dst   [[buffer(7)]],
                               uint3 tg   [[threadgroup_position_in_grid]],
                               uint  tid  [[thread_index_in_threadgroup]],
                               uint  tpg  [[threads_per_threadgroup]],
                               uint  sid  [[simdgroup_index_in_threadgroup]],
                               uint  nsg  [[simdgroups_per_threadgroup]],
                               uint  lane [[thread_index_in_simdgroup]])
{
    threadgroup float m_m[RLX_SSD_CHUNK * RLX_SSD_CHUNK];  // M, row t, r <= t
    threadgroup float m_row[RLX_SSDC_SG * 32 * RLX_SSM_COLS];
    threadgroup float m_cum[RLX_SSD_CHUNK];  // G_t
    threadgroup float m_dt[RLX_SSD_CHUNK];   // dt_t
    threadgroup float m_gam[RLX_SSD_CHUNK];  // gamma_t
    threadgroup float m_dec[RLX_SSD_CHUNK];  // e^{G_L - G_t}
    const uint n = a.n;
    const uint p = a.head_dim;
    const uint hd = tg.y;
    const uint b = tg.z;
    // uniform over the threadgroup: every lane leaves before any barrier
    if (n > 32 * RLX_SSM_COLS || nsg > RLX_SSDC_SG) {
        return;
    }
    const uint i0 = tg.x * nsg * RLX_SSDC_RPS;
    const ulong width = (ulong)a.heads * p;
    const ulong sbase = ((ulong)b * a.heads + hd) * p * n;
    float h[RLX_SSDC_RPS][RLX_SSM_COLS];
    for (uint m = 0; m < RLX_SSDC_RPS; ++m) {
        const uint i = i0 + sid + nsg * m;
        for (uint c = 0; c < RLX_SSM_COLS; ++c) {
            const uint j = lane + 32 * c;
            const bool in = a.has_state != 0 && i < p && j < n;
            h[m][c] = in ? state[sbase + (ulong)i * n + j] : 0.0f;
        }
    }
    const float ah = A[hd];
    threadgroup float* rowbuf = m_row + sid * 32 * RLX_SSM_COLS;
    for (uint t0 = 0; t0 < a.seq; t0 += RLX_SSD_CHUNK) {
        const uint l = min((uint)RLX_SSD_CHUNK, a.seq - t0);
        const ulong row0 = (ulong)b * a.seq + t0;  // first token row of the chunk
        // the previous chunk is done with the shared arrays
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (tid == 0) {
            float acc = 0.0f;
            for (uint t = 0; t < l; ++t) {
                const float d = dt[(row0 + t) * a.heads + hd];
                acc += d * ah;
                m_cum[t] = acc;
                m_dt[t] = d;
                m_gam[t] = exp(acc);
            }
            for (uint t = 0; t < l; ++t) {
                m_dec[t] = exp(acc - m_cum[t]);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint q = tid; q < l * l; q += tpg) {
            const uint t = q / l;
            const uint r = q % l;
            if (r > t) {
                continue;
            }
            device const float* ct = C + (row0 + t) * n;
            device const float* br = B + (row0 + r) * n;
            float cb = 0.0f;
            for (uint j = 0; j < n; ++j) {
                cb += ct[j] * br[j];
            }
            m_m[t * RLX_SSD_CHUNK + r] = exp(m_cum[t] - m_cum[r]) * cb;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const float gl = m_gam[l - 1];
        for (uint m = 0; m < RLX_SSDC_RPS; ++m) {
            const uint i = i0 + sid + nsg * m;
            if (i >= p) {
                break;  // uniform over the simdgroup
            }
            for (uint c = 0; c < RLX_SSM_COLS; ++c) {
                const uint j = lane + 32 * c;
                if (j < n) {
                    rowbuf[j] = h[m][c];
                }
            }
            simdgroup_barrier(mem_flags::mem_threadgroup);
            // lane owns tokens t = lane + 32 e: u_t and the h_0 part of y_t
            float u[2];
            float o[2];
            for (uint e = 0; e < 2; ++e) {
                const uint t = lane + 32 * e;
                u[e] = 0.0f;
                o[e] = 0.0f;
                if (t < l) {
                    device const float* ct = C + (row0 + t) * n;
                    float ch = 0.0f;
                    for (uint j = 0; j < n; ++j) {
                        ch += ct[j] * rowbuf[j];
                    }
                    u[e] = m_dt[t] * x[(row0 + t) * width + (ulong)hd * p + i];
                    o[e] = m_gam[t] * ch;
                }
            }
            simdgroup_barrier(mem_flags::mem_threadgroup);
            float ns[RLX_SSM_COLS];
            for (uint c = 0; c < RLX_SSM_COLS; ++c) {
                ns[c] = 0.0f;
            }
            for (uint r = 0; r < l; ++r) {
                const float ur = simd_shuffle(r < 32 ? u[0] : u[1], r & 31);
                for (uint e = 0; e < 2; ++e) {
                    const uint t = lane + 32 * e;
                    if (t < l && t >= r) {
                        o[e] += m_m[t * RLX_SSD_CHUNK + r] * ur;
                    }
                }
                const float f = m_dec[r] * ur;
                device const float* br = B + (row0 + r) * n;
                for (uint c = 0; c < RLX_SSM_COLS; ++c) {
                    const uint j = lane + 32 * c;
                    if (j < n) {
                        ns[c] += f * br[j];
                    }
                }
            }
            for (uint c = 0; c < RLX_SSM_COLS; ++c) {
                h[m][c] = gl * h[m][c] + ns[c];
            }
            for (uint e = 0; e < 2; ++e) {
                const uint t = lane + 32 * e;
                if (t < l) {
                    dst[(row0 + t) * width + (ulong)hd * p + i] = o[e];
                }
            }
        }
    }
    if (a.has_state != 0) {
        for (uint m = 0; m < RLX_SSDC_RPS; ++m) {
            const uint i = i0 + sid + nsg * m;
            for (uint c = 0; c < RLX_SSM_COLS; ++c) {
                const uint j = lane + 32 * c;
                if (i < p && j < n) {
                    state[sbase + (ulong)i * n + j] = h[m][c];
                }
            }
        }
    }
}
