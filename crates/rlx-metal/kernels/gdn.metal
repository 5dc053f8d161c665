// gdn.metal -- gated DeltaNet recurrence: the recurrent form (decode, short
// runs; first kernel below) and the chunked WY form (prefill; second).
//
// Per (batch b, head h) the state S is [n, n] (row i = value dim, column
// j = key dim); for t = 0 .. seq-1:
//     S <- exp(g_t) * (S - beta_t (S k_t) k_t^T) + beta_t v_t k_t^T
//     o_t = S q_t
// rewritten row by row as s_i <- a s_i + beta (v_i - a (s_i . k)) k with
// a = exp(g_t): every row of S evolves on its own, so rows never talk to
// each other and need no barrier.
//
// Threadgroup layout: threads [32 * RLX_GDN_ROWS, 1, 1] (RLX_GDN_ROWS
// simdgroups), grid [ceil(n / RLX_GDN_ROWS), heads, batch]. Simdgroup
// `sid` of threadgroup (x, h, b) owns row i = x * RLX_GDN_ROWS + sid of
// S(b, h); lane l holds columns j = l + 32 c (c < RLX_GDN_COLS) in
// registers, as f32 for the whole sequence, so n <= 32 * RLX_GDN_COLS =
// 128 (larger states run on the host). Row dot products (s_i . k,
// s_i . q) are simd_sum over the lanes. The state is read once at the
// start and written once at the end, in place.
//
// gated_delta_net_{f32,f16}   args GdnArgs: buffer(1) q, (2) k, (3) v
//   [batch, seq, heads * n], (4) g, (5) beta [batch, seq, heads],
//   (6) state [batch, heads, n, n] (read and written), (7) dst
//   [batch, seq, heads * n]; all of the element type, f32 arithmetic.
//   dst must not overlap an input (the lowering keeps such thunks on the
//   host): rows of other simdgroups still read q / k / v at step t.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

#define RLX_GDN_ROWS 4
#define RLX_GDN_COLS 4

template <typename T>
kernel void gated_delta_net(constant GdnArgs& a     [[buffer(0)]],
                            device const T*   q     [[buffer(1)]],
                            device const T*   k     [[buffer(2)]],
                            device const T*   v     [[buffer(3)]],
                            device const T*   g     [[buffer(4)]],
                            device const T*   beta  [[buffer(5)]],
                            device T*         state [[buffer(6)]],
                            device T*         dst   [[buffer(7)]],
                            uint3 tg   [[threadgroup_position_in_grid]],
                            uint  sid  [[simdgroup_index_in_threadgroup]],
                            uint  lane [[thread_index_in_simdgroup]])
{
    const uint n = a.n;
    const uint i = tg.x * RLX_GDN_ROWS + sid;
    const uint h = tg.y;
    const uint b = tg.z;
    // a whole simdgroup leaves together: no threadgroup barrier follows
    if (i >= n || n > 32 * RLX_GDN_COLS) {
        return;
    }
    device T* st = state + (((ulong)b * a.heads + h) * n + i) * n;
    float s[RLX_GDN_COLS];
    for (uint c = 0; c < RLX_GDN_COLS; ++c) {
        const uint j = lane + 32 * c;
        s[c] = j < n ? float(st[j]) : 0.0f;
    }
    const ulong hn = (ulong)a.heads * n;
    for (uint t = 0; t < a.seq; ++t) {
        const ulong row = (ulong)b * a.seq + t;
        const ulong base = row * hn + (ulong)h * n;
        const float decay = exp(float(g[row * a.heads + h]));
        const float bt = float(beta[row * a.heads + h]);
        float kk[RLX_GDN_COLS];
        float sk = 0.0f;
        for (uint c = 0; c < RLX_GDN_COLS; ++c) {
            const uint j = lane + 32 * c;
            kk[c] = j < n ? float(k[base + j]) : 0.0f;
            sk += s[c] * kk[c];
        }
        sk = simd_sum(sk);
        const float w = bt * (float(v[base + i]) - decay * sk);
        float o = 0.0f;
        for (uint c = 0; c < RLX_GDN_COLS; ++c) {
            const uint j = lane + 32 * c;
            s[c] = decay * s[c] + w * kk[c];
            o += j < n ? s[c] * float(q[base + j]) : 0.0f;
        }
        o = simd_sum(o);
        if (lane == 0) {
            dst[base + i] = T(o);
        }
    }
    for (uint c = 0; c < RLX_GDN_COLS; ++c) {
        const uint j = lane + 32 * c;
        if (j < n) {
            st[j] = T(s[c]);
        }
    }
}

#define RLX_GDN(name, T)                                                          \
template [[host_name(name)]] kernel void gated_delta_net<T>(                      \
    constant GdnArgs& a [[buffer(0)]], device const T* q [[buffer(1)]],          \
    device const T* k [[buffer(2)]], device const T* v [[buffer(3)]],            \
    device const T* g [[buffer(4)]], device const T* beta [[buffer(5)]],         \
    device T* state [[buffer(6)]], device T* dst [[buffer(7)]],                  \
    uint3 tg [[threadgroup_position_in_grid]],                                   \
    uint sid [[simdgroup_index_in_threadgroup]],                                 \
    uint lane [[thread_index_in_simdgroup]]);
RLX_GDN("gated_delta_net_f32", float)
RLX_GDN("gated_delta_net_f16", half)

// ---------------------------------------------------------------------------
// gated_delta_net_chunked_{f32,f16}: the chunked (WY / UT-transform) form of
// the same recurrence, for prefill (the lowering picks it from seq >= 16, the
// host's CHUNKED_FROM; chunks of RLX_GDN_CHUNK = 64 tokens, the last partial).
// Within a chunk of L tokens starting at state S_0, with G_t the cumulative
// sum of g over the chunk and gamma_t = exp(G_t):
//     A[t, r] = beta_t e^{G_t - G_r} (k_t . k_r)   (r < t)
//     P[t, r] = e^{G_t - G_r} (q_t . k_r)          (r <= t)
//     (I + A) D = beta V - beta gamma K S_0^T      (forward substitution)
//     O       = diag(gamma) Q S_0^T + P D
//     S_L     = gamma_L S_0 + sum_r e^{G_L - G_r} D_r k_r^T
// A and P depend on q, k, g, beta only, so the threadgroup builds them once
// per chunk in threadgroup memory (one 64 x 64 array: A strictly below the
// diagonal, P transposed on and above it); every row i of the state then
// solves its own column D[:, i] of the system.
//
// Threadgroup layout: one threadgroup per (batch, head): grid [1, heads,
// batch], threads [32 * nsg, 1, 1] with nsg <= RLX_GDNC_SG simdgroups.
// Simdgroup sid owns rows i = sid + nsg * m (m < RLX_GDNC_RPS, so
// n <= nsg * RLX_GDNC_RPS and n <= 128); lane l holds columns
// j = l + 32 c of those rows in registers, as f32 for the whole sequence.
// Per row: the row is staged in threadgroup memory so that lane l can form
// the dot products of tokens t = l and t = l + 32 with it; the forward
// substitution then runs over r, broadcasting D[r, i] from its lane with
// simd_shuffle, and each step also adds D[r, i]'s share to the outputs and
// to the new state row. Same bindings as gated_delta_net.
#define RLX_GDN_CHUNK 64
#define RLX_GDNC_SG 8
#define RLX_GDNC_RPS 16

template <typename T>
kernel void gated_delta_net_chunked(constant GdnArgs& a     [[buffer(0)]],
                                    device const T*   q     [[buffer(1)]],
                                    device const T*   k     [[buffer(2)]],
                                    device const T*   v     [[buffer(3)]],
                                    device const T*   g     [[buffer(4)]],
                                    device const T*   beta  [[buffer(5)]],
                                    device T*         state [[buffer(6)]],
                                    device T*         dst   [[buffer(7)]],
                                    uint3 tg   [[threadgroup_position_in_grid]],
                                    uint  tid  [[thread_index_in_threadgroup]],
                                    uint  tpg  [[threads_per_threadgroup]],
                                    uint  sid  [[simdgroup_index_in_threadgroup]],
                                    uint  nsg  [[simdgroups_per_threadgroup]],
                                    uint  lane [[thread_index_in_simdgroup]])
{
    threadgroup float m_ap[RLX_GDN_CHUNK * RLX_GDN_CHUNK];  // A below, P^T on/above
    threadgroup float m_row[RLX_GDNC_SG * 32 * RLX_GDN_COLS];
    threadgroup float m_cum[RLX_GDN_CHUNK];   // G_t
    threadgroup float m_bet[RLX_GDN_CHUNK];   // beta_t
    threadgroup float m_gam[RLX_GDN_CHUNK];   // gamma_t
    threadgroup float m_dec[RLX_GDN_CHUNK];   // e^{G_L - G_t}
    const uint n = a.n;
    const uint h = tg.y;
    const uint b = tg.z;
    // uniform over the threadgroup: every lane leaves before any barrier
    if (n > 32 * RLX_GDN_COLS || nsg > RLX_GDNC_SG || nsg * RLX_GDNC_RPS < n) {
        return;
    }
    const ulong hn = (ulong)a.heads * n;
    const ulong sbase = ((ulong)b * a.heads + h) * n * n;
    float s[RLX_GDNC_RPS][RLX_GDN_COLS];
    for (uint m = 0; m < RLX_GDNC_RPS; ++m) {
        const uint i = sid + nsg * m;
        for (uint c = 0; c < RLX_GDN_COLS; ++c) {
            const uint j = lane + 32 * c;
            s[m][c] = (i < n && j < n) ? float(state[sbase + (ulong)i * n + j]) : 0.0f;
        }
    }
    threadgroup float* rowbuf = m_row + sid * 32 * RLX_GDN_COLS;
    for (uint t0 = 0; t0 < a.seq; t0 += RLX_GDN_CHUNK) {
        const uint l = min((uint)RLX_GDN_CHUNK, a.seq - t0);
        const ulong row0 = (ulong)b * a.seq + t0;  // first token row of the chunk
        // the previous chunk is done with the shared arrays
        threadgroup_barrier(mem_flags::mem_threadgroup);
        if (tid == 0) {
            float acc = 0.0f;
            for (uint t = 0; t < l; ++t) {
                const ulong gi = (row0 + t) * a.heads + h;
                acc += float(g[gi]);
                m_cum[t] = acc;
                m_bet[t] = float(beta[gi]);
                m_gam[t] = exp(acc);
            }
            for (uint t = 0; t < l; ++t) {
                m_dec[t] = exp(acc - m_cum[t]);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint p = tid; p < l * l; p += tpg) {
            const uint t = p / l;
            const uint r = p % l;
            if (r > t) {
                continue;
            }
            const ulong bt = (row0 + t) * hn + (ulong)h * n;
            const ulong br = (row0 + r) * hn + (ulong)h * n;
            float kk = 0.0f;
            float qk = 0.0f;
            for (uint j = 0; j < n; ++j) {
                const float kr = float(k[br + j]);
                kk += float(k[bt + j]) * kr;
                qk += float(q[bt + j]) * kr;
            }
            const float e = exp(m_cum[t] - m_cum[r]);
            if (r < t) {
                m_ap[t * RLX_GDN_CHUNK + r] = m_bet[t] * e * kk;
            }
            m_ap[r * RLX_GDN_CHUNK + t] = e * qk;
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        const float gl = m_gam[l - 1];
        for (uint m = 0; m < RLX_GDNC_RPS; ++m) {
            const uint i = sid + nsg * m;
            if (i >= n) {
                break;  // uniform over the simdgroup
            }
            for (uint c = 0; c < RLX_GDN_COLS; ++c) {
                const uint j = lane + 32 * c;
                if (j < n) {
                    rowbuf[j] = s[m][c];
                }
            }
            simdgroup_barrier(mem_flags::mem_threadgroup);
            // lane owns tokens t = lane + 32 e: right-hand side and S_0 part of o
            float rhs[2];
            float o[2];
            for (uint e = 0; e < 2; ++e) {
                const uint t = lane + 32 * e;
                rhs[e] = 0.0f;
                o[e] = 0.0f;
                if (t < l) {
                    const ulong bt = (row0 + t) * hn + (ulong)h * n;
                    float sk = 0.0f;
                    float sq = 0.0f;
                    for (uint j = 0; j < n; ++j) {
                        sk += float(k[bt + j]) * rowbuf[j];
                        sq += float(q[bt + j]) * rowbuf[j];
                    }
                    rhs[e] = m_bet[t] * (float(v[bt + i]) - m_gam[t] * sk);
                    o[e] = m_gam[t] * sq;
                }
            }
            simdgroup_barrier(mem_flags::mem_threadgroup);
            float ns[RLX_GDN_COLS];
            for (uint c = 0; c < RLX_GDN_COLS; ++c) {
                ns[c] = 0.0f;
            }
            for (uint r = 0; r < l; ++r) {
                // D[r, i] is final once the rows above it are subtracted
                const float d = simd_shuffle(r < 32 ? rhs[0] : rhs[1], r & 31);
                for (uint e = 0; e < 2; ++e) {
                    const uint t = lane + 32 * e;
                    if (t < l && t > r) {
                        rhs[e] -= m_ap[t * RLX_GDN_CHUNK + r] * d;
                    }
                    if (t < l && t >= r) {
                        o[e] += m_ap[r * RLX_GDN_CHUNK + t] * d;
                    }
                }
                const float f = m_dec[r] * d;
                const ulong br = (row0 + r) * hn + (ulong)h * n;
                for (uint c = 0; c < RLX_GDN_COLS; ++c) {
                    const uint j = lane + 32 * c;
                    if (j < n) {
                        ns[c] += f * float(k[br + j]);
                    }
                }
            }
            for (uint c = 0; c < RLX_GDN_COLS; ++c) {
                s[m][c] = gl * s[m][c] + ns[c];
            }
            for (uint e = 0; e < 2; ++e) {
                const uint t = lane + 32 * e;
                if (t < l) {
                    dst[(row0 + t) * hn + (ulong)h * n + i] = T(o[e]);
                }
            }
        }
    }
    for (uint m = 0; m < RLX_GDNC_RPS; ++m) {
        const uint i = sid + nsg * m;
        for (uint c = 0; c < RLX_GDN_COLS; ++c) {
            const uint j = lane + 32 * c;
            if (i < n && j < n) {
                state[sbase + (ulong)i * n + j] = T(s[m][c]);
            }
        }
    }
}

#define RLX_GDNC(name, T)                                                         \
template [[host_name(name)]] kernel void gated_delta_net_chunked<T>(              \
    constant GdnArgs& a [[buffer(0)]], device const T* q [[buffer(1)]],          \
    device const T* k [[buffer(2)]], device const T* v [[buffer(3)]],            \
    device const T* g [[buffer(4)]], device const T* beta [[buffer(5)]],         \
    device T* state [[buffer(6)]], device T* dst [[buffer(7)]],                  \
    uint3 tg [[threadgroup_position_in_grid]],                                   \
    uint tid [[thread_index_in_threadgroup]],                                    \
    uint tpg [[threads_per_threadgroup]],                                        \
    uint sid [[simdgroup_index_in_threadgroup]],                                 \
    uint nsg [[simdgroups_per_threadgroup]],                                     \
    uint lane [[thread_index_in_simdgroup]]);
RLX_GDNC("gated_delta_net_chunked_f32", float)
RLX_GDNC("gated_delta_net_chunked_f16", half)
