//! Native glue for matmuls, norms, attention and RoPE.

use super::NResult;
use crate::host::buffer::Mem;
use crate::host::buffer::Plain;
use crate::host::kernels::attention::{self as att, AttnDims, AttnOpts, Layout, Mask, RopeDims};
use crate::host::kernels::matmul::{self as mm, Batch, MatB};
use crate::host::kernels::norm::{self as nm, Affine, NormKind, RowMap};
use crate::host::kernels::{Elem, KernelError};
use crate::thunk::attention::Attention as AttnThunk;
use crate::thunk::{HalfFlag, Thunk};
use half::f16;

pub(super) fn handles(t: &Thunk) -> bool {
    use Thunk::*;
    match t {
        Sgemm(s) => s.dt == HalfFlag::F32 || !s.b_f16,
        FusedAttn(f) => f.mask_kind <= 2,
        BatchedSgemm(_)
        | FusedMmBiasAct(_)
        | GroupedMatMul(_)
        | LayerNorm(_)
        | RmsNorm(_)
        | GroupNorm(_)
        | LayerNorm2d(_)
        | FusedResidualLN(_)
        | FusedResidualRmsNorm(_)
        | AdaLayerNorm(_)
        | GatedResidual(_)
        | FusedRmsNormMulSilu(_)
        | Rope(_) => true,
        Attention(a) => a.mask_kind <= 4,
        _ => false,
    }
}

/// Row map of a modulation tensor from the seed's lead pack
/// `[lead_rank, x_lead[8], mod_lead[8]]` (mod dims aligned with x's, size 1
/// broadcasting): which modulation row each of x's `rows` rows reads, and
/// how many rows the modulation tensor has. The general case (a broadcast
/// axis before a non-broadcast one, e.g. `[1, s, h]` against `[b, s, h]`)
/// fills `buf` with an explicit index per row.
fn row_map<'a>(pack: &[u32; 17], rows: usize, buf: &'a mut Vec<usize>) -> (RowMap<'a>, usize) {
    let r = (pack[0] as usize).min(8);
    let x: Vec<usize> = pack[1..1 + r].iter().map(|&d| d as usize).collect();
    let m: Vec<usize> = pack[9..9 + r].iter().map(|&d| d as usize).collect();
    let mod_rows: usize = m.iter().product();
    if m == x {
        return (RowMap::Same, mod_rows);
    }
    if mod_rows <= 1 {
        return (RowMap::One, mod_rows.max(1));
    }
    // leading dims equal, trailing broadcast dims of 1: row r → r / period
    let split = m.iter().rposition(|&d| d != 1).map(|i| i + 1).unwrap_or(0);
    if m[..split] == x[..split] {
        let period: usize = x[split..].iter().product();
        return (RowMap::Period(period.max(1)), mod_rows);
    }
    // general broadcast: mixed-radix walk over x's leading dims
    let mut stride = vec![0usize; r];
    let mut acc = 1;
    for i in (0..r).rev() {
        if m[i] != 1 {
            stride[i] = acc;
        }
        acc *= m[i];
    }
    buf.clear();
    buf.extend((0..rows).map(|row| {
        let (mut rest, mut at) = (row, 0);
        for i in (0..r).rev() {
            let xi = x[i].max(1);
            at += (rest % xi) * stride[i];
            rest /= xi;
        }
        at
    }));
    (RowMap::Index(&buf[..]), mod_rows)
}

#[allow(clippy::too_many_arguments)]
fn norm<T: Elem + crate::host::buffer::Plain>(
    mem: &Mem,
    kind: NormKind,
    src: usize,
    g: usize,
    b: usize,
    dst: usize,
    rows: usize,
    h: usize,
    eps: f32,
) -> NResult {
    let aff = Affine {
        gamma: Some(mem.get::<T>("g", g, h)?),
        beta: Some(mem.get::<T>("b", b, h)?),
    };
    let x = mem.get::<T>("src", src, rows * h)?;
    Ok(nm::norm_rows(
        kind,
        x,
        aff,
        mem.get_mut::<T>("dst", dst, rows * h)?,
        rows,
        h,
        eps,
    )?)
}

pub(super) fn run(t: &Thunk, mem: &Mem) -> NResult {
    use Thunk::*;
    match t {
        Sgemm(s) => {
            let (m, k, n) = (s.m as usize, s.k as usize, s.n as usize);
            if s.dt == HalfFlag::F16 {
                let a = mem.get::<f16>("a", s.a, m * k)?;
                let b = mem.get::<f16>("b", s.b, k * n)?;
                return Ok(mm::hgemm(
                    a,
                    b,
                    mem.get_mut::<f16>("c", s.c, m * n)?,
                    m,
                    k,
                    n,
                )?);
            }
            let a = mem.get::<f32>("a", s.a, m * k)?;
            let b = if s.b_f16 {
                MatB::F16(mem.get("b", s.b, k * n)?)
            } else {
                MatB::F32(mem.get("b", s.b, k * n)?)
            };
            Ok(mm::matmul(
                a,
                b,
                mem.get_mut::<f32>("c", s.c, m * n)?,
                m,
                k,
                n,
            )?)
        }
        BatchedSgemm(s) => {
            let (bt, m, k, n) = (s.batch as usize, s.m as usize, s.k as usize, s.n as usize);
            let (an, bn) = (
                if s.a_bcast { 1 } else { bt },
                if s.b_bcast { 1 } else { bt },
            );
            let geo = Batch {
                batch: bt,
                a_stride: if s.a_bcast { 0 } else { m * k },
                b_stride: if s.b_bcast { 0 } else { k * n },
            };
            if s.dt == HalfFlag::F16 {
                let a = mem.get::<f16>("a", s.a, an * m * k)?;
                let b = mem.get::<f16>("b", s.b, bn * k * n)?;
                let c = mem.get_mut::<f16>("c", s.c, bt * m * n)?;
                return Ok(mm::batched_hgemm(geo, a, b, c, m, k, n)?);
            }
            let a = mem.get::<f32>("a", s.a, an * m * k)?;
            let b = mem.get::<f32>("b", s.b, bn * k * n)?;
            Ok(mm::batched_matmul(
                geo,
                a,
                MatB::F32(b),
                mem.get_mut::<f32>("c", s.c, bt * m * n)?,
                m,
                k,
                n,
            )?)
        }
        FusedMmBiasAct(s) => {
            let (m, k, n) = (s.m as usize, s.k as usize, s.n as usize);
            if s.dt == HalfFlag::F16 {
                let a = mem.get::<f16>("a", s.a, m * k)?;
                let w = mem.get::<f16>("w", s.w, k * n)?;
                let bias = mem.get::<f16>("bias", s.bias, n)?;
                let c = mem.get_mut::<f16>("c", s.c, m * n)?;
                return Ok(mm::matmul_bias_act_f16(
                    a,
                    w,
                    Some(bias),
                    s.act,
                    c,
                    m,
                    k,
                    n,
                )?);
            }
            let a = mem.get::<f32>("a", s.a, m * k)?;
            let w = mem.get::<f32>("w", s.w, k * n)?;
            let bias = mem.get::<f32>("bias", s.bias, n)?;
            Ok(mm::matmul_bias_act(
                a,
                MatB::F32(w),
                Some(bias),
                s.act,
                mem.get_mut("c", s.c, m * n)?,
                m,
                k,
                n,
            )?)
        }
        GroupedMatMul(g) => {
            let (m, k, n, e) = (
                g.m as usize,
                g.k_dim as usize,
                g.n as usize,
                g.num_experts as usize,
            );
            let x = mem.get::<f32>("input", g.input, m * k)?;
            let w = mem.get::<f32>("weight", g.weight, e * k * n)?;
            let idx = mem.get::<i32>("expert_idx", g.expert_idx, m)?;
            Ok(mm::grouped_matmul(
                x,
                MatB::F32(w),
                idx,
                mem.get_mut("dst", g.dst, m * n)?,
                m,
                k,
                n,
                e,
            )?)
        }
        LayerNorm(l) => {
            by_dt!(l.dt, T => norm::<T>(mem, NormKind::Layer, l.src, l.g, l.b, l.dst, l.rows as usize, l.h as usize, l.eps))
        }
        RmsNorm(l) => {
            by_dt!(l.dt, T => norm::<T>(mem, NormKind::Rms, l.src, l.g, l.b, l.dst, l.rows as usize, l.h as usize, l.eps))
        }
        GroupNorm(l) => by_dt!(l.dt, T => {
            let (n, c, hw) = (l.n as usize, l.c as usize, (l.h * l.w) as usize);
            let aff = Affine { gamma: Some(mem.get::<T>("g", l.g, c)?), beta: Some(mem.get::<T>("b", l.b, c)?) };
            let x = mem.get::<T>("src", l.src, n * c * hw)?;
            Ok(nm::group_norm(x, aff, mem.get_mut::<T>("dst", l.dst, n * c * hw)?, n, c, hw, l.num_groups as usize, l.eps)?)
        }),
        LayerNorm2d(l) => by_dt!(l.dt, T => {
            let (n, c, hw) = (l.n as usize, l.c as usize, (l.h * l.w) as usize);
            let aff = Affine { gamma: Some(mem.get::<T>("g", l.g, c)?), beta: Some(mem.get::<T>("b", l.b, c)?) };
            let x = mem.get::<T>("src", l.src, n * c * hw)?;
            Ok(nm::layer_norm2d(x, aff, mem.get_mut::<T>("dst", l.dst, n * c * hw)?, n, c, hw, l.eps)?)
        }),
        FusedResidualLN(l) => {
            by_dt!(l.dt, T => residual::<T>(mem, NormKind::Layer, l.x, l.res, l.has_bias.then_some(l.bias), l.g, l.b, l.out, l.rows as usize, l.h as usize, l.eps))
        }
        FusedResidualRmsNorm(l) => {
            by_dt!(l.dt, T => residual::<T>(mem, NormKind::Rms, l.x, l.res, l.has_bias.then_some(l.bias), l.g, l.b, l.out, l.rows as usize, l.h as usize, l.eps))
        }
        AdaLayerNorm(a) => by_dt!(a.dt, T => {
            let (rows, h) = (a.rows as usize, a.h as usize);
            let mut buf = Vec::new();
            let (map, mrows) = row_map(&a.lead_pack, rows, &mut buf);
            let kind = if a.layer_norm { NormKind::Layer } else { NormKind::Rms };
            let x = mem.get::<T>("x", a.x, rows * h)?;
            let sc = mem.get::<T>("scale", a.scale, mrows * h)?;
            let sh = mem.get::<T>("shift", a.shift, mrows * h)?;
            Ok(nm::ada_layer_norm(kind, x, sc, sh, map, mem.get_mut::<T>("out", a.out, rows * h)?, rows, h, a.eps)?)
        }),
        GatedResidual(a) => by_dt!(a.dt, T => {
            let (rows, h) = (a.rows as usize, a.h as usize);
            let mut buf = Vec::new();
            let (map, mrows) = row_map(&a.lead_pack, rows, &mut buf);
            let x = mem.get::<T>("x", a.x, rows * h)?;
            let y = mem.get::<T>("y", a.y, rows * h)?;
            let gate = mem.get::<T>("gate", a.gate, mrows * h)?;
            Ok(nm::gated_residual(x, gate, map, y, mem.get_mut::<T>("out", a.out, rows * h)?, rows, h)?)
        }),
        FusedRmsNormMulSilu(a) => by_dt!(a.dt, T => {
            let (rows, h) = (a.rows as usize, a.h as usize);
            let x = mem.get::<T>("x", a.x, rows * h)?;
            let z = mem.get::<T>("z", a.z, rows * h)?;
            let g = mem.get::<T>("g", a.g, h)?;
            let b = mem.get::<T>("b", a.b, h)?;
            let out = mem.get_mut::<T>("out", a.out, rows * h)?;
            nm::rms_norm_gated(x, z, Some(g), out, rows, h, a.eps)?;
            // rms_norm(x)·g + b, times silu(z): the kernel has no beta term
            if b.iter().any(|v| v.to_f32() != 0.0) {
                for r in 0..rows {
                    for j in 0..h {
                        let zv = z[r * h + j].to_f32();
                        let o = &mut out[r * h + j];
                        *o = T::from_f32(o.to_f32() + b[j].to_f32() * zv / (1.0 + (-zv).exp()));
                    }
                }
            }
            Ok(())
        }),
        Attention(a) => match (a.dt, a.kv_elem()) {
            (HalfFlag::F32, HalfFlag::F32) => attention::<f32, f32>(a, mem),
            // a half KV cache under f32 queries
            (HalfFlag::F32, HalfFlag::F16) => attention::<f32, f16>(a, mem),
            (HalfFlag::F16, HalfFlag::F16) => attention::<f16, f16>(a, mem),
            (dt, kv) => Err(KernelError::Invalid {
                kernel: "attention",
                msg: format!("{kv} keys / values under {dt} queries (f16 under f32 only)"),
            }
            .into()),
        },
        FusedAttn(f) => fused_attn(f, mem),
        Rope(r) => by_dt!(r.dt, T => {
            let p = RopeDims { batch: r.batch as usize, seq: r.seq as usize, hidden: r.hidden as usize, src_row_stride: r.src_row_stride as usize, head_dim: r.head_dim as usize, n_rot: r.n_rot as usize, neox: !r.interleaved, per_token: r.cos_per_token };
            let rows = p.batch * p.seq;
            let trows = if p.per_token { rows } else { p.seq };
            let half_rot = p.n_rot / 2;
            let src_len = rows.saturating_sub(1) * p.src_row_stride + p.hidden;
            let x = mem.get::<T>("src", r.src, src_len)?;
            let cos = mem.get::<f32>("cos", r.cos, trows * half_rot)?;
            let sin = mem.get::<f32>("sin", r.sin, trows * half_rot)?;
            Ok(att::rope(&p, x, cos, sin, mem.get_mut::<T>("dst", r.dst, rows * p.hidden)?)?)
        }),
        _ => Err(KernelError::Invalid {
            kernel: "native",
            msg: format!("no linalg kernel for {}", t.name()),
        }
        .into()),
    }
}

/// The `Attention` thunk with q / mask / out of type `T` and k / v of `U`.
fn attention<T: Elem + Plain, U: Elem + Plain>(a: &AttnThunk, mem: &Mem) -> NResult {
    let d = AttnDims {
        batch: a.batch as usize,
        seq: a.seq as usize,
        kv_seq: a.kv_seq as usize,
        heads: a.heads as usize,
        kv_heads: a.kv_heads as usize,
        head_dim: a.head_dim as usize,
    };
    let qn = d.batch * d.heads * d.seq * d.head_dim;
    let kn = d.batch * d.kv_heads * d.kv_seq * d.head_dim;
    let mask = match a.mask_kind {
        0 => Mask::None,
        1 => Mask::Causal,
        2 => Mask::Custom(mem.get::<T>("mask", a.mask, d.batch * d.seq * d.kv_seq)?),
        3 => Mask::Bias(mem.get::<T>("mask", a.mask, d.batch * d.heads * d.seq * d.kv_seq)?),
        _ => Mask::SlidingWindow(a.window as usize),
    };
    let layout = if a.bhsd == 1 {
        Layout::Bhsd
    } else {
        Layout::Bshd
    };
    let q = mem.get::<T>("q", a.q, qn)?;
    let (k, v) = (mem.get::<U>("k", a.k, kn)?, mem.get::<U>("v", a.v, kn)?);
    let out = mem.get_mut::<T>("out", a.out, qn)?;
    match a.kv_len {
        Some(off) if a.kv_len_per_batch => {
            // one key length per batch entry: one SDPA per entry
            let lens = mem.get::<i32>("kv_len", off, d.batch)?;
            let (scale, cap) = (a.score_scale, a.attn_logit_softcap);
            Ok(att::sdpa_per_batch(
                &d, layout, mask, scale, cap, lens, q, k, v, out,
            )?)
        }
        _ => {
            let kv_len = match a.kv_len {
                Some(off) => Some(i64::from(mem.get::<i32>("kv_len", off, 1)?[0])),
                None => None,
            };
            let opts = AttnOpts {
                scale: a.score_scale,
                softcap: a.attn_logit_softcap,
                kv_len,
            };
            Ok(att::sdpa(&d, layout, mask, opts, q, k, v, out)?)
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn residual<T: Elem + crate::host::buffer::Plain>(
    mem: &Mem,
    kind: NormKind,
    x: usize,
    res: usize,
    bias: Option<usize>,
    g: usize,
    b: usize,
    out: usize,
    rows: usize,
    h: usize,
    eps: f32,
) -> NResult {
    // `fuse_residual_rms_norm` may put the output exactly on `x` or `res`:
    // such an operand is copied first, so no shared slice aliases `out`
    let n = rows * h;
    let span = n * std::mem::size_of::<T>();
    let (mut x_copy, mut r_copy) = (Vec::new(), Vec::new());
    let xs: &[T] = if super::overlap(x, span, out, span) {
        x_copy.extend_from_slice(mem.get::<T>("x", x, n)?);
        &x_copy
    } else {
        mem.get::<T>("x", x, n)?
    };
    let rs: &[T] = if super::overlap(res, span, out, span) {
        r_copy.extend_from_slice(mem.get::<T>("res", res, n)?);
        &r_copy
    } else {
        mem.get::<T>("res", res, n)?
    };
    let bias = match bias {
        Some(o) => Some(mem.get::<T>("bias", o, h)?),
        None => None,
    };
    let aff = Affine {
        gamma: Some(mem.get::<T>("g", g, h)?),
        beta: Some(mem.get::<T>("b", b, h)?),
    };
    Ok(nm::residual_norm(
        kind,
        xs,
        rs,
        bias,
        aff,
        None,
        mem.get_mut::<T>("out", out, rows * h)?,
        rows,
        h,
        eps,
    )?)
}

/// The fused attention core over packed QKV `[b, s, 3·inner]` (f32): q and k
/// are gathered out of the packed rows (with NeoX RoPE over the whole head
/// when `has_rope`), v copied, then SDPA (BSHD, heads = kv heads) into
/// `out [b, s, inner]`.
fn fused_attn(f: &crate::thunk::attention::FusedAttn, mem: &Mem) -> NResult {
    let (b, s, h, d) = (
        f.batch as usize,
        f.seq as usize,
        f.heads as usize,
        f.head_dim as usize,
    );
    let inner = h * d;
    let rows = b * s;
    let qkv = mem.get::<f32>("qkv", f.qkv, rows * 3 * inner)?;
    let mut q = vec![0f32; rows * inner];
    let mut k = vec![0f32; rows * inner];
    let mut v = vec![0f32; rows * inner];
    let gather = |col: usize, dst: &mut [f32]| {
        for (r, row) in dst.chunks_exact_mut(inner.max(1)).enumerate() {
            let at = r * 3 * inner + col;
            row.copy_from_slice(&qkv[at..at + inner]);
        }
    };
    if f.has_rope != 0 {
        let p = RopeDims {
            batch: b,
            seq: s,
            hidden: inner,
            src_row_stride: 3 * inner,
            head_dim: d,
            n_rot: d,
            neox: true,
            per_token: false,
        };
        let cos = mem.get::<f32>("cos", f.cos, s * (d / 2))?;
        let sin = mem.get::<f32>("sin", f.sin, s * (d / 2))?;
        att::rope(&p, qkv, cos, sin, &mut q)?;
        att::rope(&p, &qkv[inner.min(qkv.len())..], cos, sin, &mut k)?;
    } else {
        gather(0, &mut q);
        gather(inner, &mut k);
    }
    gather(2 * inner, &mut v);
    let dims = AttnDims {
        batch: b,
        seq: s,
        kv_seq: s,
        heads: h,
        kv_heads: h,
        head_dim: d,
    };
    let mask = match f.mask_kind {
        0 => Mask::None,
        1 => Mask::Causal,
        _ => Mask::Custom(mem.get::<f32>("mask", f.mask, b * s * s)?),
    };
    let opts = AttnOpts {
        scale: f32::from_bits(f.scale_bits),
        softcap: 0.0,
        kv_len: None,
    };
    let out = mem.get_mut::<f32>("out", f.out, rows * inner)?;
    Ok(att::sdpa(&dims, Layout::Bshd, mask, opts, &q, &k, &v, out)?)
}
