// attention.metal -- scaled dot-product attention (Attention thunk) and the
// fused RoPE + SDPA core (FusedAttn thunk), online softmax, f32 math.
//
// Addressing: row (b, i, h) of q / out and row (b, j, g) of k / v start at
// b·sb + i·ss + h·sh elements (AttnArgs strides), which covers BSHD, BHSD
// and the packed qkv rows of FusedAttn (q, k, v bound at the packed
// buffer + 0 / inner / 2·inner). GQA: query head h reads kv head
// h / (heads / kv_heads). Run-time key length L = clamp(kv_len[0], 1,
// kv_seq) when has_kv_len = 1, clamp(kv_len[b], 1, kv_seq) for batch entry
// b when has_kv_len = 2 (one length per sequence: batched decode), else
// kv_seq: keys 0..L only, query i sits at
// absolute position L - seq + i. Masks: 0 none, 1 causal (j <= abs),
// 2 custom [b, seq, kv_seq] (0 hides the key), 3 additive bias
// [b, heads, seq, kv_seq], 4 sliding window (abs - window <= j <= abs).
// Score = cap·tanh(q·k·scale / cap) (cap 0: off), then the mask. A row with
// no visible key is 0; a NaN or +inf score makes the row NaN (the host's
// rules). `rope` (FusedAttn, f32): NeoX rotation of whole q / k heads with
// cos / sin [seq, head_dim/2] at position i (queries) and j (keys).
//
// K / V element type KV is T, or half under float q / out (the
// *_f32_kvf16 kernels: a half KV cache, widened to float on load; scores,
// softmax and accumulation are float whatever the types).
//
// attention_decode_{f32,f16,f32_kvf16}: one threadgroup per (batch, query row, head)
//   (meant for seq = 1), any number of simdgroups (<= 8); simdgroup s takes
//   keys lo+s, lo+s+nsg, ...; each lane owns dims lane, lane+32, ... (head
//   dim <= 256), so a key costs one coalesced row read and one simd_sum.
//   Online softmax per simdgroup; the partial (max, sum, acc) combine
//   through threadgroup memory.
// attention_prefill_{f32,f16,f32_kvf16}: one threadgroup per (batch, head, block of
//   2·nsg query rows), each simdgroup 2 rows. Key blocks of `bk` (16 or
//   32) rows are staged in threadgroup memory (row stride head_dim | 1, no
//   bank conflicts); lane jj scores key jj against each row (dot product
//   over threadgroup memory), simd_max / simd_sum give the block max and
//   sum, the probabilities go through a 32-float threadgroup slot per row
//   and each lane accumulates its own dims of the (coalesced) V rows.
//   [[threadgroup(0)]] holds q rows (2·nsg·head_dim floats), the key block
//   (bk·(head_dim|1)) and the probabilities (2·nsg·32).
//
// bindings (both): args AttnArgs; buffer(1) q, (2) k, (3) v, (4) mask
// (kinds 2, 3), (5) kv_len int[1] or int[batch] (has_kv_len), (6) cos, (7) sin (rope),
// (8) out. Unused bindings may point anywhere.
#include <metal_stdlib>
#include "args.h"
using namespace metal;

#define RLX_ATT_MAXD 256
#define RLX_ATT_DPL (RLX_ATT_MAXD / 32)
#define RLX_ATT_RQ 2

// Element c of row `row` (position pos), rotated when a.rope.
template <typename T>
static inline float att_ld(constant AttnArgs& a, device const T* row, uint c, uint pos,
                           device const float* cs, device const float* sn)
{
    const float x = float(row[c]);
    if (a.rope == 0) {
        return x;
    }
    const uint h = a.head_dim / 2;
    if (c < h) {
        const uint t = pos * h + c;
        return x * cs[t] - float(row[c + h]) * sn[t];
    }
    if (c < 2 * h) {
        const uint t = pos * h + (c - h);
        return float(row[c - h]) * sn[t] + x * cs[t];
    }
    return x;
}

// Visible key range [lo, hi) of query i under length L.
static inline uint2 att_range(constant AttnArgs& a, uint L, uint i)
{
    const int abs_pos = int(L) - int(a.seq) + int(i);
    if (a.mask_kind == 1 || a.mask_kind == 4) {
        const int hi = clamp(abs_pos + 1, 0, int(L));
        int lo = 0;
        if (a.mask_kind == 4) {
            lo = clamp(abs_pos - int(min(a.window, 0x7fffffffu)), 0, hi);
        }
        return uint2(uint(lo), uint(hi));
    }
    return uint2(0u, L);
}

// Soft-capped, masked score of key j for query (b, i, h).
template <typename T>
static inline float att_score(constant AttnArgs& a, float dot, device const T* mask,
                              uint b, uint i, uint h, uint j)
{
    float x = dot * a.scale;
    if (a.softcap > 0.0f) {
        x = a.softcap * tanh(x / a.softcap);
    }
    if (a.mask_kind == 2) {
        if (float(mask[((ulong)b * a.seq + i) * a.kv_seq + j]) == 0.0f) {
            x = -INFINITY;
        }
    } else if (a.mask_kind == 3) {
        x += float(mask[(((ulong)b * a.heads + h) * a.seq + i) * a.kv_seq + j]);
    }
    return x;
}

static inline uint att_len(constant AttnArgs& a, device const int* kv_len, uint b)
{
    if (a.has_kv_len == 0) {
        return a.kv_seq;
    }
    return uint(clamp(kv_len[a.has_kv_len == 2 ? b : 0], 1, int(a.kv_seq)));
}

template <typename T, typename KV>
kernel void attention_decode(constant AttnArgs&  a      [[buffer(0)]],
                             device const T*     q      [[buffer(1)]],
                             device const KV*    k      [[buffer(2)]],
                             device const KV*    v      [[buffer(3)]],
                             device const T*     mask   [[buffer(4)]],
                             device const int*   kv_len [[buffer(5)]],
                             device const float* cs     [[buffer(6)]],
                             device const float* sn     [[buffer(7)]],
                             device T*           out    [[buffer(8)]],
                             uint tg   [[threadgroup_position_in_grid]],
                             uint lid  [[thread_position_in_threadgroup]],
                             uint sid  [[simdgroup_index_in_threadgroup]],
                             uint lane [[thread_index_in_simdgroup]],
                             uint nsg  [[simdgroups_per_threadgroup]])
{
    threadgroup float s_acc[8 * RLX_ATT_MAXD];  // per simdgroup partials
    threadgroup float s_m[8];
    threadgroup float s_l[8];
    threadgroup uint s_bad[8];

    const uint d = a.head_dim;
    const uint h = tg % a.heads;
    const uint i = (tg / a.heads) % a.seq;
    const uint b = tg / (a.heads * a.seq);
    const uint g = h / (a.heads / a.kv_heads);
    const uint L = att_len(a, kv_len, b);
    const uint2 r = att_range(a, L, i);

    device const T* qrow = q + b * a.q_sb + i * a.q_ss + h * a.q_sh;
    float qv[RLX_ATT_DPL];
    float acc[RLX_ATT_DPL];
    for (uint t = 0; t < RLX_ATT_DPL; ++t) {
        const uint c = lane + 32 * t;
        qv[t] = c < d ? att_ld(a, qrow, c, i, cs, sn) : 0.0f;
        acc[t] = 0.0f;
    }
    float m = -INFINITY;
    float l = 0.0f;
    uint bad = 0;
    for (uint j = r.x + sid; j < r.y; j += nsg) {
        device const KV* krow = k + b * a.kv_sb + j * a.kv_ss + g * a.kv_sh;
        float part = 0.0f;
        for (uint t = 0; t < RLX_ATT_DPL; ++t) {
            const uint c = lane + 32 * t;
            if (c < d) {
                part += qv[t] * att_ld(a, krow, c, j, cs, sn);
            }
        }
        const float s = att_score(a, simd_sum(part), mask, b, i, h, j);
        if (isnan(s) || s == INFINITY) {
            bad = 1;
            continue;
        }
        if (s == -INFINITY) {
            continue;
        }
        const float mn = max(m, s);
        const float corr = exp(m - mn);
        const float p = exp(s - mn);
        l = l * corr + p;
        m = mn;
        device const KV* vrow = v + b * a.kv_sb + j * a.kv_ss + g * a.kv_sh;
        for (uint t = 0; t < RLX_ATT_DPL; ++t) {
            const uint c = lane + 32 * t;
            acc[t] = acc[t] * corr + (c < d ? p * float(vrow[c]) : 0.0f);
        }
    }
    if (lane == 0) {
        s_m[sid] = m;
        s_l[sid] = l;
        s_bad[sid] = bad;
    }
    for (uint t = 0; t < RLX_ATT_DPL; ++t) {
        const uint c = lane + 32 * t;
        if (c < d) {
            s_acc[sid * RLX_ATT_MAXD + c] = acc[t];
        }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);

    float mx = -INFINITY;
    uint anybad = 0;
    for (uint s = 0; s < nsg; ++s) {
        mx = max(mx, s_m[s]);
        anybad |= s_bad[s];
    }
    float tot = 0.0f;
    for (uint s = 0; s < nsg; ++s) {
        tot += s_m[s] == -INFINITY ? 0.0f : s_l[s] * exp(s_m[s] - mx);
    }
    device T* orow = out + b * a.o_sb + i * a.o_ss + h * a.o_sh;
    const uint tpg = nsg * 32;
    for (uint c = lid; c < d; c += tpg) {
        float o = 0.0f;
        if (anybad != 0) {
            o = NAN;
        } else if (mx != -INFINITY) {
            for (uint s = 0; s < nsg; ++s) {
                if (s_m[s] != -INFINITY) {
                    o += s_acc[s * RLX_ATT_MAXD + c] * exp(s_m[s] - mx);
                }
            }
            o /= tot;
        }
        orow[c] = T(o);
    }
}

template <typename T, typename KV>
kernel void attention_prefill(constant AttnArgs&  a      [[buffer(0)]],
                              device const T*     q      [[buffer(1)]],
                              device const KV*    k      [[buffer(2)]],
                              device const KV*    v      [[buffer(3)]],
                              device const T*     mask   [[buffer(4)]],
                              device const int*   kv_len [[buffer(5)]],
                              device const float* cs     [[buffer(6)]],
                              device const float* sn     [[buffer(7)]],
                              device T*           out    [[buffer(8)]],
                              threadgroup float*  tgm    [[threadgroup(0)]],
                              uint tg   [[threadgroup_position_in_grid]],
                              uint lid  [[thread_position_in_threadgroup]],
                              uint sid  [[simdgroup_index_in_threadgroup]],
                              uint lane [[thread_index_in_simdgroup]],
                              uint nsg  [[simdgroups_per_threadgroup]])
{
    const uint d = a.head_dim;
    const uint ks = d | 1u;
    const uint bq = RLX_ATT_RQ * nsg;
    const uint nqb = (a.seq + bq - 1) / bq;
    const uint qb = tg % nqb;
    const uint h = (tg / nqb) % a.heads;
    const uint b = tg / (nqb * a.heads);
    const uint g = h / (a.heads / a.kv_heads);
    const uint L = att_len(a, kv_len, b);
    const uint tpg = nsg * 32;
    const uint i0 = qb * bq;

    threadgroup float* qt = tgm;                 // [bq][d]
    threadgroup float* kt = qt + bq * d;         // [bk][ks]
    threadgroup float* pt = kt + a.bk * ks;      // [nsg][RQ][32]

    for (uint e = lid; e < bq * d; e += tpg) {
        const uint i = i0 + e / d;
        const uint c = e % d;
        qt[e] = i < a.seq ? att_ld(a, q + b * a.q_sb + i * a.q_ss + h * a.q_sh, c, i, cs, sn)
                          : 0.0f;
    }
    // keys any row of the block sees
    const uint ilast = min(i0 + bq, a.seq) - 1;
    const uint jlo = att_range(a, L, i0).x;
    const uint jhi = att_range(a, L, ilast).y;

    float m[RLX_ATT_RQ];
    float l[RLX_ATT_RQ];
    uint bad[RLX_ATT_RQ];
    uint2 rng[RLX_ATT_RQ];
    float acc[RLX_ATT_RQ][RLX_ATT_DPL];
    for (uint rr = 0; rr < RLX_ATT_RQ; ++rr) {
        const uint i = i0 + sid * RLX_ATT_RQ + rr;
        m[rr] = -INFINITY;
        l[rr] = 0.0f;
        bad[rr] = 0;
        rng[rr] = i < a.seq ? att_range(a, L, i) : uint2(0u, 0u);
        for (uint t = 0; t < RLX_ATT_DPL; ++t) {
            acc[rr][t] = 0.0f;
        }
    }
    threadgroup float* pme = pt + sid * RLX_ATT_RQ * 32;

    for (uint j0 = jlo; j0 < jhi; j0 += a.bk) {
        const uint nk = min(a.bk, jhi - j0);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (uint e = lid; e < nk * d; e += tpg) {
            const uint jj = e / d;
            const uint c = e % d;
            const uint j = j0 + jj;
            kt[jj * ks + c] = att_ld(a, k + b * a.kv_sb + j * a.kv_ss + g * a.kv_sh, c, j, cs, sn);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);

        float corr[RLX_ATT_RQ];
        for (uint rr = 0; rr < RLX_ATT_RQ; ++rr) {
            const uint i = i0 + sid * RLX_ATT_RQ + rr;
            const uint j = j0 + lane;
            float s = -INFINITY;
            if (lane < nk && j >= rng[rr].x && j < rng[rr].y) {
                threadgroup const float* qr = qt + (sid * RLX_ATT_RQ + rr) * d;
                threadgroup const float* kr = kt + lane * ks;
                float dot = 0.0f;
                for (uint c = 0; c < d; ++c) {
                    dot += qr[c] * kr[c];
                }
                s = att_score(a, dot, mask, b, i, h, j);
                if (isnan(s) || s == INFINITY) {
                    bad[rr] = 1;
                    s = -INFINITY;
                }
            }
            const float mn = max(m[rr], simd_max(s));
            corr[rr] = mn == -INFINITY ? 1.0f : exp(m[rr] - mn);
            const float p = s == -INFINITY ? 0.0f : exp(s - mn);
            l[rr] = l[rr] * corr[rr] + simd_sum(p);
            m[rr] = mn;
            pme[rr * 32 + lane] = p;
        }
        simdgroup_barrier(mem_flags::mem_threadgroup);
        for (uint rr = 0; rr < RLX_ATT_RQ; ++rr) {
            for (uint t = 0; t < RLX_ATT_DPL; ++t) {
                acc[rr][t] *= corr[rr];
            }
        }
        for (uint jj = 0; jj < nk; ++jj) {
            const float p0 = pme[jj];
            const float p1 = pme[32 + jj];
            if (p0 == 0.0f && p1 == 0.0f) {
                continue; // masked for both rows: V never read
            }
            device const KV* vrow = v + b * a.kv_sb + (j0 + jj) * a.kv_ss + g * a.kv_sh;
            for (uint t = 0; t < RLX_ATT_DPL; ++t) {
                const uint c = lane + 32 * t;
                if (c < d) {
                    const float x = float(vrow[c]);
                    acc[0][t] += p0 != 0.0f ? p0 * x : 0.0f;
                    acc[1][t] += p1 != 0.0f ? p1 * x : 0.0f;
                }
            }
        }
        simdgroup_barrier(mem_flags::mem_threadgroup);
    }

    for (uint rr = 0; rr < RLX_ATT_RQ; ++rr) {
        const uint i = i0 + sid * RLX_ATT_RQ + rr;
        const uint anybad = simd_max(bad[rr]);
        if (i >= a.seq) {
            continue;
        }
        device T* orow = out + b * a.o_sb + i * a.o_ss + h * a.o_sh;
        const float inv = 1.0f / l[rr];
        for (uint t = 0; t < RLX_ATT_DPL; ++t) {
            const uint c = lane + 32 * t;
            if (c < d) {
                float o = 0.0f;
                if (anybad != 0) {
                    o = NAN;
                } else if (m[rr] != -INFINITY) {
                    o = acc[rr][t] * inv;
                }
                orow[c] = T(o);
            }
        }
    }
}

#define RLX_ATTENTION(kname, name, T, KV)                                               \
template [[host_name(name)]] kernel void kname<T, KV>(                                  \
    constant AttnArgs& a [[buffer(0)]], device const T* q [[buffer(1)]],               \
    device const KV* k [[buffer(2)]], device const KV* v [[buffer(3)]],                \
    device const T* mask [[buffer(4)]], device const int* kv_len [[buffer(5)]],        \
    device const float* cs [[buffer(6)]], device const float* sn [[buffer(7)]],        \
    device T* out [[buffer(8)]], uint tg [[threadgroup_position_in_grid]],             \
    uint lid [[thread_position_in_threadgroup]],                                        \
    uint sid [[simdgroup_index_in_threadgroup]],                                        \
    uint lane [[thread_index_in_simdgroup]], uint nsg [[simdgroups_per_threadgroup]]);
RLX_ATTENTION(attention_decode, "attention_decode_f32", float, float)
RLX_ATTENTION(attention_decode, "attention_decode_f16", half, half)
RLX_ATTENTION(attention_decode, "attention_decode_f32_kvf16", float, half)

#define RLX_ATTENTION_PREFILL(name, T, KV)                                              \
template [[host_name(name)]] kernel void attention_prefill<T, KV>(                      \
    constant AttnArgs& a [[buffer(0)]], device const T* q [[buffer(1)]],               \
    device const KV* k [[buffer(2)]], device const KV* v [[buffer(3)]],                \
    device const T* mask [[buffer(4)]], device const int* kv_len [[buffer(5)]],        \
    device const float* cs [[buffer(6)]], device const float* sn [[buffer(7)]],        \
    device T* out [[buffer(8)]], threadgroup float* tgm [[threadgroup(0)]],            \
    uint tg [[threadgroup_position_in_grid]],                                           \
    uint lid [[thread_position_in_threadgroup]],                                        \
    uint sid [[simdgroup_index_in_threadgroup]],                                        \
    uint lane [[thread_index_in_simdgroup]], uint nsg [[simdgroups_per_threadgroup]]);
RLX_ATTENTION_PREFILL("attention_prefill_f32", float, float)
RLX_ATTENTION_PREFILL("attention_prefill_f16", half, half)
RLX_ATTENTION_PREFILL("attention_prefill_f32_kvf16", float, half)
