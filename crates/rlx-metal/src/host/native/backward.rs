//! Native glue for the gradient thunks (kernels in
//! `host::kernels::backward`, `host::kernels::backward_attn` and
//! `host::kernels::backward_conv`).
//!
//! Lowering gives every gradient a fresh value, so no operand of these
//! thunks overlaps its output; a schedule where one does is rejected
//! (rather than read through an aliased slice).

use super::NResult;
use crate::host::buffer::Mem;
use crate::host::kernels::backward::{self as bw, ModDims, RmsWrt, RopeBwdDims};
use crate::host::kernels::backward_attn::{self as ba, AttnGradDims, AttnGradMask, AttnWrt};
use crate::host::kernels::backward_conv::{self as bc, Window2d};
use crate::host::kernels::invalid;
use crate::thunk::conv::ConvDims;
use crate::thunk::{HalfFlag, Thunk};

pub(super) fn handles(t: &Thunk) -> bool {
    matches!(
        t,
        Thunk::AttentionBackward(_)
            | Thunk::RmsNormBackwardInput(_)
            | Thunk::RmsNormBackwardGamma(_)
            | Thunk::RmsNormBackwardBeta(_)
            | Thunk::RopeBackward(_)
            | Thunk::CumsumBackward(_)
            | Thunk::GatherBackward(_)
            | Thunk::MaxPool2dBackward(_)
            | Thunk::Conv2dBackwardInput(_)
            | Thunk::Conv2dBackwardWeight(_)
            | Thunk::AdaLayerNormBackward(_)
            | Thunk::GatedResidualBackward(_)
            | Thunk::LogMelBackward(_)
            | Thunk::SoftmaxCrossEntropyBackward(_)
    )
}

/// `n` as usize (u32 fields).
fn z(n: u32) -> usize {
    n as usize
}

/// The host kernels' [`Window2d`] of a conv gradient's geometry.
fn window(d: ConvDims) -> Window2d {
    Window2d {
        n: z(d.n),
        c: z(d.c_in),
        h: z(d.h),
        w: z(d.w),
        c_out: z(d.c_out),
        h_out: z(d.h_out),
        w_out: z(d.w_out),
        k: [z(d.kh), z(d.kw)],
        s: [z(d.sh), z(d.sw)],
        p: [z(d.ph), z(d.pw)],
        d: [z(d.dh), z(d.dw)],
        groups: z(d.groups),
    }
}

pub(super) fn run(t: &Thunk, mem: &Mem) -> NResult {
    let io = t.io();
    if io
        .reads
        .iter()
        .any(|r| io.writes.iter().any(|w| r.overlaps(w)))
    {
        return Err(invalid(t.name(), "an operand overlaps the gradient output").into());
    }
    match t {
        Thunk::AttentionBackward(a) => {
            let d = AttnGradDims {
                batch: z(a.batch),
                seq: z(a.seq),
                kv_seq: z(a.kv_seq),
                heads: z(a.heads),
                kv_heads: z(a.heads),
                head_dim: z(a.head_dim),
                scale: 1.0 / (a.head_dim as f32).sqrt(),
                bhsd: a.bhsd != 0,
            };
            let nq = cnt(&[d.batch, d.seq, d.heads, d.head_dim])?;
            let nk = cnt(&[d.batch, d.kv_seq, d.heads, d.head_dim])?;
            let mask = match a.mask_kind {
                0 => AttnGradMask::None,
                1 => AttnGradMask::Causal,
                2 => AttnGradMask::Binary(mem.get(
                    "mask",
                    a.mask,
                    cnt(&[d.batch, d.seq, d.kv_seq])?,
                )?),
                3 => AttnGradMask::Bias(mem.get(
                    "mask",
                    a.mask,
                    cnt(&[d.batch, d.heads, d.seq, d.kv_seq])?,
                )?),
                4 => AttnGradMask::Window(z(a.window)),
                k => return Err(invalid(t.name(), format!("unknown mask kind {k}")).into()),
            };
            let (wrt, nout) = match a.wrt {
                0 => (AttnWrt::Q, nq),
                1 => (AttnWrt::K, nk),
                2 => (AttnWrt::V, nk),
                w => {
                    return Err(
                        invalid(t.name(), format!("wrt {w} is not 0 (q), 1 (k) or 2 (v)")).into(),
                    )
                }
            };
            ba::attention_grad(
                mem.get("q", a.q, nq)?,
                mem.get("k", a.k, nk)?,
                mem.get("v", a.v, nk)?,
                mem.get("dy", a.dy, nq)?,
                mask,
                wrt,
                mem.get_mut("out", a.out, nout)?,
                d,
            )?;
        }
        Thunk::RmsNormBackwardInput(r) => rms(
            mem,
            [r.x, r.gamma, r.dy, r.dx],
            r.rows,
            r.h,
            r.eps,
            RmsWrt::Input,
        )?,
        Thunk::RmsNormBackwardGamma(r) => rms(
            mem,
            [r.x, r.gamma, r.dy, r.dgamma],
            r.rows,
            r.h,
            r.eps,
            RmsWrt::Gamma,
        )?,
        Thunk::RmsNormBackwardBeta(r) => rms(
            mem,
            [r.x, r.gamma, r.dy, r.dbeta],
            r.rows,
            r.h,
            r.eps,
            RmsWrt::Beta,
        )?,
        Thunk::RopeBackward(r) => {
            let d = RopeBwdDims {
                batch: z(r.batch),
                seq: z(r.seq),
                hidden: z(r.hidden),
                head_dim: z(r.head_dim),
                n_rot: z(r.n_rot),
                cos_len: z(r.cos_len),
            };
            let n = cnt(&[d.batch, d.seq, d.hidden])?;
            bw::rope_backward(
                mem.get("dy", r.dy, n)?,
                mem.get("cos", r.cos, d.cos_len)?,
                mem.get("sin", r.sin, d.cos_len)?,
                mem.get_mut("dx", r.dx, n)?,
                d,
            )?;
        }
        Thunk::CumsumBackward(c) => {
            let n = cnt(&[z(c.rows), z(c.cols)])?;
            bw::cumsum_backward(
                mem.get("dy", c.dy, n)?,
                mem.get_mut("dx", c.dx, n)?,
                z(c.rows),
                z(c.cols),
                c.exclusive,
            )?;
        }
        Thunk::GatherBackward(g) => {
            let dims = [z(g.outer), z(g.axis_dim), z(g.num_idx), z(g.trailing)];
            bw::gather_backward(
                mem.get("dy", g.dy, cnt(&[dims[0], dims[2], dims[3]])?)?,
                mem.get("indices", g.indices, dims[2])?,
                mem.get_mut("dst", g.dst, cnt(&[dims[0], dims[1], dims[3]])?)?,
                dims,
            )?;
        }
        Thunk::MaxPool2dBackward(p) => {
            let g = Window2d {
                n: z(p.n),
                c: z(p.c),
                h: z(p.h),
                w: z(p.w),
                c_out: z(p.c),
                h_out: z(p.h_out),
                w_out: z(p.w_out),
                k: [z(p.kh), z(p.kw)],
                s: [z(p.sh), z(p.sw)],
                p: [z(p.ph), z(p.pw)],
                d: [1, 1],
                groups: 1,
            };
            let nx = cnt(&[g.n, g.c, g.h, g.w])?;
            bc::maxpool2d_backward(
                mem.get("x", p.x, nx)?,
                mem.get("dy", p.dy, cnt(&[g.n, g.c, g.h_out, g.w_out])?)?,
                mem.get_mut("dx", p.dx, nx)?,
                g,
            )?;
        }
        Thunk::Conv2dBackwardInput(c) => {
            let g = window(c.dims());
            let cig = g.c / g.groups.max(1);
            bc::conv2d_backward_input(
                mem.get("dy", c.dy, cnt(&[g.n, g.c_out, g.h_out, g.w_out])?)?,
                mem.get("w", c.w, cnt(&[g.c_out, cig, g.k[0], g.k[1]])?)?,
                mem.get_mut("dx", c.dx, cnt(&[g.n, g.c, g.h, g.w])?)?,
                g,
            )?;
        }
        Thunk::Conv2dBackwardWeight(c) => {
            let g = window(c.dims());
            let cig = g.c / g.groups.max(1);
            bc::conv2d_backward_weight(
                mem.get("x", c.x, cnt(&[g.n, g.c, g.h, g.w])?)?,
                mem.get("dy", c.dy, cnt(&[g.n, g.c_out, g.h_out, g.w_out])?)?,
                mem.get_mut("dw", c.dw, cnt(&[g.c_out, cig, g.k[0], g.k[1]])?)?,
                g,
            )?;
        }
        Thunk::AdaLayerNormBackward(a) => {
            let d = ModDims {
                h: z(a.h),
                seq_per_mod: z(a.seq_per_mod),
                mod_rows: z(a.mod_rows),
            };
            let (nx, nm) = (
                cnt(&[d.mod_rows, d.seq_per_mod, d.h])?,
                cnt(&[d.mod_rows, d.h])?,
            );
            by_dt!(a.dt, T => bw::ada_layer_norm_backward::<T>(
                mem.get("x", a.x, nx)?,
                mem.get("scale", a.scale, nm)?,
                mem.get("dy", a.dy, nx)?,
                mem.get_mut("out", a.out, nx + cnt(&[2, nm])?)?,
                d,
                a.eps,
                a.layer_norm,
            ))?;
        }
        Thunk::GatedResidualBackward(a) => {
            let d = ModDims {
                h: z(a.h),
                seq_per_mod: z(a.seq_per_mod),
                mod_rows: z(a.mod_rows),
            };
            let (nx, nm) = (
                cnt(&[d.mod_rows, d.seq_per_mod, d.h])?,
                cnt(&[d.mod_rows, d.h])?,
            );
            by_dt!(a.dt, T => bw::gated_residual_backward::<T>(
                mem.get("y", a.y, nx)?,
                mem.get("gate", a.gate, nm)?,
                mem.get("dy", a.dy, nx)?,
                mem.get_mut("out", a.out, cnt(&[2, nx])? + nm)?,
                d,
            ))?;
        }
        Thunk::LogMelBackward(m) => {
            let dims = [z(m.outer), z(m.n_fft), z(m.n_bins), z(m.n_mels)];
            let n = cnt(&[dims[0], 2, dims[1]])?;
            bw::log_mel_backward(
                mem.get("spec", m.spec, n)?,
                mem.get("filters", m.filters, cnt(&[dims[3], dims[2]])?)?,
                mem.get("dy", m.dy, cnt(&[dims[0], dims[3]])?)?,
                mem.get_mut("dst", m.dst, n)?,
                dims,
            )?;
        }
        Thunk::SoftmaxCrossEntropyBackward(s) => {
            let (n, c) = (z(s.n), z(s.c));
            bw::softmax_ce_backward(
                mem.get("logits", s.logits, cnt(&[n, c])?)?,
                mem.get("labels", s.labels, n)?,
                mem.get("d_loss", s.d_loss, n)?,
                mem.get_mut("dlogits", s.dlogits, cnt(&[n, c])?)?,
                n,
                c,
            )?;
        }
        _ => return Err(invalid("backward", format!("not a gradient thunk: {t}")).into()),
    }
    Ok(())
}

/// One RMSNorm gradient: `offs = [x, gamma, dy, out]`.
fn rms(mem: &Mem, offs: [usize; 4], rows: u32, h: u32, eps: f32, wrt: RmsWrt) -> NResult {
    let (rows, h) = (z(rows), z(h));
    let n = cnt(&[rows, h])?;
    let nout = if wrt == RmsWrt::Input { n } else { h };
    bw::rms_norm_backward(
        mem.get("x", offs[0], n)?,
        mem.get("gamma", offs[1], h)?,
        mem.get("dy", offs[2], n)?,
        mem.get_mut("out", offs[3], nout)?,
        rows,
        h,
        eps,
        wrt,
    )?;
    Ok(())
}

/// Checked element count.
fn cnt(dims: &[usize]) -> Result<usize, crate::host::kernels::KernelError> {
    crate::host::kernels::numel("backward", dims)
}
