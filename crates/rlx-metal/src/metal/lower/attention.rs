//! SDPA and the fused RoPE + SDPA core → `attention.metal`; RoPE →
//! `rope.metal`.
//!
//! `Attention` (mask kinds 0–4, BSHD / BHSD, GQA, f32 / f16, f16 K / V
//! under f32 q — the half KV cache, `_kvf16` kernels —, run-time `kv_len`) and `FusedAttn` (f32, mask kinds 0–2) become one dispatch:
//! `attention_decode_*` (one threadgroup per query row) when `seq == 1`,
//! else `attention_prefill_*` (one threadgroup per block of query rows,
//! key blocks staged in threadgroup memory). Both take strided rows, so
//! `FusedAttn` reads q / k / v straight out of the packed qkv rows. Head
//! dims above 256, aliased operands, index spaces past `u32` and
//! threadgroup memory past [`TG_MEM_LIMIT`] stay on the host.

use super::{aliased, elementwise, kernel, suffix, Lowered};
use crate::metal::args::{AttnArgs, KernelArgs, RopeArgs};
use crate::metal::kernels::Family;
use crate::metal::plan::{BufferBinding, Dispatch};
use crate::thunk::attention::{Attention, FusedAttn, Rope};
use crate::thunk::offsets::offset_add;
use crate::thunk::{HalfFlag, Thunk};

/// Largest head dim the attention kernels hold in registers.
pub const MAX_HEAD_DIM: u32 = 256;
/// Query rows per simdgroup of the prefill kernel (`RLX_ATT_RQ`).
const ROWS_PER_SIMDGROUP: u32 = 2;
/// Threadgroup memory the prefill kernel may use (Apple GPUs have 32 KiB;
/// some is left for the compiler).
pub const TG_MEM_LIMIT: usize = 28 * 1024;

/// The shape of an attention dispatch, shared by both thunks.
struct Problem {
    args: AttnArgs,
    dt: HalfFlag,
    /// Element type of k / v (`dt`, or f16 under an f32 `dt`: the
    /// `_kvf16` kernels).
    kv_dt: HalfFlag,
    /// q, k, v, mask, kv_len, cos, sin, out (tagged offsets; unused ones
    /// repeat q).
    offs: [usize; 8],
}

/// `x·y·…` as `u32`, `None` past `u32::MAX`.
fn prod(xs: &[u32]) -> Option<u32> {
    xs.iter().try_fold(1u32, |a, &x| a.checked_mul(x))
}

/// Simdgroups of the decode kernel: one per 64 visible keys, 1..=8.
fn decode_simdgroups(kv_seq: u32) -> u32 {
    kv_seq.div_ceil(64).clamp(1, 8)
}

/// Simdgroups of the prefill kernel: enough for the query rows, at most 4.
fn prefill_simdgroups(seq: u32) -> u32 {
    seq.div_ceil(ROWS_PER_SIMDGROUP).clamp(1, 4)
}

/// Prefill threadgroup memory bytes for `nsg` simdgroups and `bk` keys,
/// rounded up to 16 (Metal's granularity for threadgroup memory lengths).
fn prefill_tg_bytes(d: u32, nsg: u32, bk: u32) -> usize {
    let bq = (ROWS_PER_SIMDGROUP * nsg) as usize;
    let floats = bq * d as usize + bk as usize * (d | 1) as usize + bq * 32;
    (floats * 4).next_multiple_of(16)
}

fn dispatch(i: usize, p: Problem) -> Option<Lowered> {
    let a = p.args;
    if a.head_dim == 0 || a.head_dim > MAX_HEAD_DIM || a.kv_heads == 0 || a.kv_seq == 0 {
        return None;
    }
    if !a.heads.is_multiple_of(a.kv_heads) {
        return None;
    }
    let bindings = p.offs.iter().map(|&o| BufferBinding::of(o)).collect();
    let mut args = a;
    let (name, groups, nsg, tg_mem) = if a.seq == 1 {
        let nsg = decode_simdgroups(a.kv_seq);
        ("decode", prod(&[a.batch, a.heads])?, nsg, Vec::new())
    } else {
        let nsg = prefill_simdgroups(a.seq);
        let blocks = a.seq.div_ceil(ROWS_PER_SIMDGROUP * nsg);
        let bk = [32, 16]
            .into_iter()
            .find(|&bk| prefill_tg_bytes(a.head_dim, nsg, bk) <= TG_MEM_LIMIT)?;
        args.bk = bk;
        let bytes = prefill_tg_bytes(a.head_dim, nsg, bk);
        (
            "prefill",
            prod(&[a.batch, a.heads, blocks])?,
            nsg,
            vec![bytes],
        )
    };
    let kv = match (p.dt, p.kv_dt) {
        (a, b) if a == b => "",
        (HalfFlag::F32, HalfFlag::F16) => "_kvf16",
        _ => return None,
    };
    let k = kernel(
        Family::Attention,
        format!("attention_{name}_{}{kv}", suffix(p.dt)),
    );
    Some(Lowered::Dispatch(Dispatch {
        thunk: i,
        kernel: k,
        args: args.as_bytes().to_vec(),
        bindings,
        grid: [groups, 1, 1],
        threadgroup: [nsg * 32, 1, 1],
        threadgroup_memory: tg_mem,
    }))
}

/// The dispatch of an `Attention` thunk (`None`: host).
fn attention(i: usize, t: &Attention) -> Option<Lowered> {
    if t.mask_kind > 4 {
        return None;
    }
    let (b, s, kv, h, kvh, d) = (t.batch, t.seq, t.kv_seq, t.heads, t.kv_heads, t.head_dim);
    prod(&[b, s, h, d])?;
    prod(&[b, kv, kvh, d])?;
    prod(&[b, h, s, kv])?;
    let (q_sb, q_ss, q_sh, kv_sb, kv_ss, kv_sh) = if t.bhsd == 1 {
        (s * h * d, d, s * d, kv * kvh * d, d, kv * d)
    } else {
        (s * h * d, h * d, d, kv * kvh * d, kvh * d, d)
    };
    let scale = if t.score_scale == 0.0 {
        1.0 / (d as f32).sqrt()
    } else {
        t.score_scale
    };
    let args = AttnArgs {
        batch: b,
        seq: s,
        kv_seq: kv,
        heads: h,
        kv_heads: kvh,
        head_dim: d,
        mask_kind: t.mask_kind,
        window: t.window,
        scale,
        softcap: t.attn_logit_softcap,
        has_kv_len: match (t.kv_len, t.kv_len_per_batch) {
            (None, _) => 0,
            (Some(_), false) => 1,
            (Some(_), true) => 2,
        },
        rope: 0,
        q_sb,
        q_ss,
        q_sh,
        kv_sb,
        kv_ss,
        kv_sh,
        o_sb: q_sb,
        o_ss: q_ss,
        o_sh: q_sh,
        bk: 0,
    };
    let mask = if matches!(t.mask_kind, 2 | 3) {
        t.mask
    } else {
        t.q
    };
    let offs = [
        t.q,
        t.k,
        t.v,
        mask,
        t.kv_len.unwrap_or(t.q),
        t.q,
        t.q,
        t.out,
    ];
    dispatch(
        i,
        Problem {
            args,
            dt: t.dt,
            kv_dt: t.kv_elem(),
            offs,
        },
    )
}

/// The dispatch of a `FusedAttn` thunk: strided views of the packed qkv.
fn fused(i: usize, f: &FusedAttn) -> Option<Lowered> {
    if f.mask_kind > 2 {
        return None;
    }
    let (b, s, h, d) = (f.batch, f.seq, f.heads, f.head_dim);
    let inner = prod(&[h, d])?;
    let row = prod(&[3, inner])?;
    prod(&[b, s, row])?;
    prod(&[b, s, s])?;
    let scale = f32::from_bits(f.scale_bits);
    let args = AttnArgs {
        batch: b,
        seq: s,
        kv_seq: s,
        heads: h,
        kv_heads: h,
        head_dim: d,
        mask_kind: f.mask_kind,
        window: 0,
        scale: if scale == 0.0 {
            1.0 / (d as f32).sqrt()
        } else {
            scale
        },
        softcap: 0.0,
        has_kv_len: 0,
        rope: (f.has_rope != 0) as u32,
        q_sb: s * row,
        q_ss: row,
        q_sh: d,
        kv_sb: s * row,
        kv_ss: row,
        kv_sh: d,
        o_sb: s * inner,
        o_ss: inner,
        o_sh: d,
        bk: 0,
    };
    let bytes = inner as usize * 4;
    let (q, k, v) = (
        f.qkv,
        offset_add(f.qkv, bytes),
        offset_add(f.qkv, 2 * bytes),
    );
    let mask = if f.mask_kind == 2 { f.mask } else { q };
    let (cos, sin) = if f.has_rope != 0 {
        (f.cos, f.sin)
    } else {
        (q, q)
    };
    let offs = [q, k, v, mask, q, cos, sin, f.out];
    dispatch(
        i,
        Problem {
            args,
            dt: HalfFlag::F32,
            kv_dt: HalfFlag::F32,
            offs,
        },
    )
}

/// The dispatch of a `Rope` thunk (`None`: host).
fn rope(i: usize, r: &Rope) -> Option<Lowered> {
    let (d, n_rot) = (r.head_dim, r.n_rot);
    let shape_ok = d > 0 && r.hidden.is_multiple_of(d) && n_rot.is_multiple_of(2) && n_rot <= d;
    if !shape_ok || r.src_row_stride == 0 {
        return None;
    }
    let len = prod(&[r.batch, r.seq, r.hidden])?;
    let rows = prod(&[r.batch, r.seq])?;
    prod(&[rows, r.src_row_stride])?;
    let args = RopeArgs {
        len,
        seq: r.seq,
        hidden: r.hidden,
        head_dim: d,
        n_rot,
        src_stride: r.src_row_stride,
        per_token: r.cos_per_token as u32,
        interleaved: r.interleaved as u32,
    };
    let k = kernel(Family::Rope, format!("rope_{}", suffix(r.dt)));
    Some(Lowered::Dispatch(elementwise(
        i,
        k,
        &args,
        &[r.src, r.cos, r.sin, r.dst],
        len,
    )))
}

/// Attention, FusedAttn and Rope thunks.
pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    match t {
        Thunk::Attention(_) | Thunk::FusedAttn(_) | Thunk::Rope(_) if t.io().writes.is_empty() => {
            Some(Lowered::Skip)
        }
        Thunk::Attention(_) | Thunk::FusedAttn(_) | Thunk::Rope(_) if aliased(t) => None,
        Thunk::Attention(a) => attention(i, a),
        Thunk::FusedAttn(f) => fused(i, f),
        Thunk::Rope(r) => rope(i, r),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attn(seq: u32, head_dim: u32, dt: HalfFlag) -> Attention {
        Attention {
            q: 0,
            k: 1 << 20,
            v: 2 << 20,
            mask: 0,
            out: 3 << 20,
            batch: 2,
            seq,
            kv_seq: 33,
            heads: 4,
            kv_heads: 2,
            head_dim,
            mask_kind: 1,
            window: 0,
            dt,
            bhsd: 0,
            score_scale: 0.0,
            attn_logit_softcap: 0.0,
            kv_len: None,
            kv_len_per_batch: false,
            kv_dt: None,
        }
    }

    fn kernel_of(t: &Thunk) -> Option<(String, Dispatch)> {
        match lower(0, t)? {
            Lowered::Dispatch(d) => Some((d.kernel.function.clone(), d)),
            _ => None,
        }
    }

    #[test]
    fn decode_prefill_and_host_cases() {
        let (k, d) = kernel_of(&Thunk::Attention(attn(1, 64, HalfFlag::F32))).unwrap();
        assert_eq!(k, "attention_decode_f32");
        assert_eq!(d.grid, [8, 1, 1]);
        assert!(d.threadgroup_memory.is_empty());
        let (k, d) = kernel_of(&Thunk::Attention(attn(17, 256, HalfFlag::F16))).unwrap();
        assert_eq!(k, "attention_prefill_f16");
        // 17 rows in blocks of 8: 3 per (batch, head)
        assert_eq!(d.grid, [2 * 4 * 3, 1, 1]);
        assert!(d.threadgroup_memory[0] <= TG_MEM_LIMIT);
        assert_eq!(d.threadgroup_memory[0] % 16, 0);
        // head dims past 256, unknown mask kinds and aliasing stay on the host
        assert!(kernel_of(&Thunk::Attention(attn(17, 320, HalfFlag::F32))).is_none());
        let odd = Attention {
            mask_kind: 5,
            ..attn(1, 64, HalfFlag::F32)
        };
        assert!(kernel_of(&Thunk::Attention(odd)).is_none());
        let in_place = Attention {
            out: 0,
            ..attn(1, 64, HalfFlag::F32)
        };
        assert!(kernel_of(&Thunk::Attention(in_place)).is_none());
        // a half KV cache under f32 queries: the _kvf16 kernels
        for (seq, name) in [
            (1, "attention_decode_f32_kvf16"),
            (9, "attention_prefill_f32_kvf16"),
        ] {
            let half_kv = Attention {
                kv_dt: Some(HalfFlag::F16),
                ..attn(seq, 64, HalfFlag::F32)
            };
            assert_eq!(kernel_of(&Thunk::Attention(half_kv)).unwrap().0, name);
        }
    }

    #[test]
    fn rope_needs_an_explicit_stride() {
        let r = Rope {
            src: 0,
            cos: 1 << 16,
            sin: 2 << 16,
            dst: 3 << 16,
            batch: 1,
            seq: 3,
            hidden: 8,
            head_dim: 4,
            n_rot: 4,
            dt: HalfFlag::F32,
            src_row_stride: 8,
            cos_per_token: false,
            interleaved: false,
        };
        let (k, _) = kernel_of(&Thunk::Rope(r.clone())).unwrap();
        assert_eq!(k, "rope_f32");
        let zero = Rope {
            src_row_stride: 0,
            ..r
        };
        assert!(kernel_of(&Thunk::Rope(zero)).is_none());
    }
}
