// gdn.metal -- gated DeltaNet recurrence (decode-friendly recurrent form).
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
