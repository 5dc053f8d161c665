//! Training gradients → `backward.metal` (max-pool's runs in
//! `vision.metal`, see `lower/vision.rs`; and the integer- and soft-label
//! cross-entropy forwards, whose kernels share the row loop of the
//! gradient). Every thunk is one 1-D dispatch of one thread per output
//! element or row (see the kernel file's header); thunks whose output
//! overlaps an operand stay on the host (the kernels gather from their
//! operands while writing).

use super::{aliased, elementwise, kernel, suffix, Lowered};
use crate::metal::args::{
    AttnBwdArgs, CumsumBwdArgs, GatherBwdArgs, KernelArgs, LogMelArgs, ModBwdArgs, RmsBwdArgs,
    RopeBwdArgs, SceArgs, Window2dArgs,
};
use crate::metal::kernels::Family;
use crate::thunk::Thunk;

/// One `backward.metal` dispatch of `threads` threads.
fn dispatch(
    i: usize,
    name: &str,
    args: &impl KernelArgs,
    offs: &[usize],
    threads: Option<u32>,
) -> Option<Lowered> {
    let threads = threads?;
    Some(Lowered::Dispatch(elementwise(
        i,
        kernel(Family::Backward, name.to_string()),
        args,
        offs,
        threads,
    )))
}

/// Product of `dims` as a thread count (None when it overflows u32).
fn prod(dims: &[u32]) -> Option<u32> {
    dims.iter().try_fold(1u32, |a, &d| a.checked_mul(d))
}

pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    let claimed = matches!(
        t,
        Thunk::AttentionBackward(_)
            | Thunk::RmsNormBackwardInput(_)
            | Thunk::RmsNormBackwardGamma(_)
            | Thunk::RmsNormBackwardBeta(_)
            | Thunk::RopeBackward(_)
            | Thunk::CumsumBackward(_)
            | Thunk::GatherBackward(_)
            | Thunk::Conv2dBackwardInput(_)
            | Thunk::Conv2dBackwardWeight(_)
            | Thunk::AdaLayerNormBackward(_)
            | Thunk::GatedResidualBackward(_)
            | Thunk::LogMelBackward(_)
            | Thunk::SoftmaxCrossEntropyBackward(_)
            | Thunk::SoftmaxCrossEntropyWithLogits(_)
            | Thunk::SoftmaxCrossEntropyDense(_)
    );
    if !claimed {
        return None;
    }
    if t.io().writes.iter().all(|w| w.len == 0) {
        return Some(Lowered::Skip);
    }
    if aliased(t) {
        return None;
    }
    match t {
        Thunk::AttentionBackward(a) => {
            let args = AttnBwdArgs {
                batch: a.batch,
                seq: a.seq,
                kv_seq: a.kv_seq,
                heads: a.heads,
                head_dim: a.head_dim,
                mask_kind: a.mask_kind,
                window: a.window,
                wrt: a.wrt,
                bhsd: a.bhsd,
                scale: 1.0 / (a.head_dim.max(1) as f32).sqrt(),
            };
            let len = if a.wrt == 0 { a.seq } else { a.kv_seq };
            // kinds without a mask buffer bind q in its place (never read)
            let mask = if matches!(a.mask_kind, 2 | 3) {
                a.mask
            } else {
                a.q
            };
            let offs = [a.q, a.k, a.v, a.dy, mask, a.out];
            dispatch(
                i,
                "attention_bwd_f32",
                &args,
                &offs,
                prod(&[a.batch, a.heads, len]),
            )
        }
        Thunk::RmsNormBackwardInput(r) => rms(i, [r.x, r.gamma, r.dy, r.dx], r.rows, r.h, r.eps, 0),
        Thunk::RmsNormBackwardGamma(r) => {
            rms(i, [r.x, r.gamma, r.dy, r.dgamma], r.rows, r.h, r.eps, 1)
        }
        Thunk::RmsNormBackwardBeta(r) => {
            rms(i, [r.x, r.gamma, r.dy, r.dbeta], r.rows, r.h, r.eps, 2)
        }
        Thunk::RopeBackward(r) => {
            let args = RopeBwdArgs {
                batch: r.batch,
                seq: r.seq,
                hidden: r.hidden,
                head_dim: r.head_dim,
                n_rot: r.n_rot,
                cos_len: r.cos_len,
            };
            // the kernel divides by these: the host kernel reports bad geometry
            let half = r.n_rot / 2;
            if r.head_dim == 0
                || half == 0
                || r.n_rot > r.head_dim
                || !r.hidden.is_multiple_of(r.head_dim)
            {
                return None;
            }
            let offs = [r.dy, r.cos, r.sin, r.dx];
            dispatch(
                i,
                "rope_bwd_f32",
                &args,
                &offs,
                prod(&[r.batch, r.seq, r.hidden]),
            )
        }
        Thunk::CumsumBackward(c) => {
            let args = CumsumBwdArgs {
                rows: c.rows,
                cols: c.cols,
                exclusive: c.exclusive as u32,
            };
            prod(&[c.rows, c.cols])?;
            dispatch(i, "cumsum_bwd_f32", &args, &[c.dy, c.dx], Some(c.rows))
        }
        Thunk::GatherBackward(g) => {
            let args = GatherBwdArgs {
                outer: g.outer,
                axis_dim: g.axis_dim,
                num_idx: g.num_idx,
                trailing: g.trailing,
            };
            prod(&[g.outer, g.num_idx, g.trailing])?;
            let offs = [g.dy, g.indices, g.dst];
            dispatch(
                i,
                "gather_bwd_f32",
                &args,
                &offs,
                prod(&[g.outer, g.axis_dim, g.trailing]),
            )
        }
        Thunk::Conv2dBackwardInput(c) => {
            let args = Window2dArgs::from(c.dims());
            if !conv_ok(&args) {
                return None;
            }
            let offs = [c.dy, c.w, c.dx];
            dispatch(
                i,
                "conv2d_bwd_input_f32",
                &args,
                &offs,
                prod(&[c.n, c.c_in, c.h, c.w_in]),
            )
        }
        Thunk::Conv2dBackwardWeight(c) => {
            let args = Window2dArgs::from(c.dims());
            if !conv_ok(&args) {
                return None;
            }
            let offs = [c.x, c.dy, c.dw];
            let cig = c.c_in / c.groups;
            dispatch(
                i,
                "conv2d_bwd_weight_f32",
                &args,
                &offs,
                prod(&[c.c_out, cig, c.kh, c.kw]),
            )
        }
        Thunk::AdaLayerNormBackward(a) => {
            let args = ModBwdArgs {
                h: a.h,
                seq_per_mod: a.seq_per_mod,
                mod_rows: a.mod_rows,
                eps: a.eps,
                layer_norm: a.layer_norm as u32,
            };
            let rows = prod(&[a.mod_rows, a.seq_per_mod])?;
            let threads = prod(&[a.mod_rows, a.h])?.checked_add(rows);
            prod(&[rows, a.h])?;
            let name = format!("ada_ln_bwd_{}", suffix(a.dt));
            dispatch(i, &name, &args, &[a.x, a.scale, a.dy, a.out], threads)
        }
        Thunk::GatedResidualBackward(a) => {
            let args = ModBwdArgs {
                h: a.h,
                seq_per_mod: a.seq_per_mod,
                mod_rows: a.mod_rows,
                eps: 0.0,
                layer_norm: 0,
            };
            let nx = prod(&[a.mod_rows, a.seq_per_mod, a.h])?;
            let threads = nx
                .checked_mul(2)
                .and_then(|v| v.checked_add(prod(&[a.mod_rows, a.h])?));
            let name = format!("gated_residual_bwd_{}", suffix(a.dt));
            dispatch(i, &name, &args, &[a.y, a.gate, a.dy, a.out], threads)
        }
        Thunk::LogMelBackward(m) => {
            if m.n_bins > m.n_fft {
                return None;
            }
            let args = LogMelArgs {
                outer: m.outer,
                n_fft: m.n_fft,
                n_bins: m.n_bins,
                n_mels: m.n_mels,
            };
            let offs = [m.spec, m.filters, m.dy, m.dst];
            dispatch(
                i,
                "log_mel_bwd_f32",
                &args,
                &offs,
                prod(&[m.outer, 2, m.n_fft]),
            )
        }
        Thunk::SoftmaxCrossEntropyBackward(s) => {
            prod(&[s.n, s.c])?;
            let args = SceArgs { n: s.n, c: s.c };
            let offs = [s.logits, s.labels, s.d_loss, s.dlogits];
            dispatch(i, "softmax_ce_bwd_f32", &args, &offs, Some(s.n))
        }
        Thunk::SoftmaxCrossEntropyWithLogits(s) => {
            prod(&[s.n, s.c])?;
            let args = SceArgs { n: s.n, c: s.c };
            let offs = [s.logits, s.labels, s.dst];
            dispatch(i, "softmax_ce_labels_f32", &args, &offs, Some(s.n))
        }
        Thunk::SoftmaxCrossEntropyDense(s) => {
            prod(&[s.n, s.c])?;
            let args = SceArgs { n: s.n, c: s.c };
            let offs = [s.logits, s.targets, s.dst];
            dispatch(i, "softmax_ce_dense_f32", &args, &offs, Some(s.n))
        }
        _ => None,
    }
}

/// Geometry the conv kernels can divide by (else the host kernel reports it).
fn conv_ok(a: &Window2dArgs) -> bool {
    a.sh > 0
        && a.sw > 0
        && a.groups > 0
        && a.c_in.is_multiple_of(a.groups)
        && a.c_out.is_multiple_of(a.groups)
        && prod(&[a.n, a.c_in, a.h, a.w]).is_some()
        && prod(&[a.n, a.c_out, a.h_out, a.w_out]).is_some()
        && prod(&[a.c_out, a.c_in, a.kh, a.kw]).is_some()
}

fn rms(i: usize, offs: [usize; 4], rows: u32, h: u32, eps: f32, wrt: u32) -> Option<Lowered> {
    prod(&[rows, h])?;
    let args = RmsBwdArgs { rows, h, eps, wrt };
    let threads = if wrt == 0 { rows } else { h };
    dispatch(i, "rms_norm_bwd_f32", &args, &offs, Some(threads))
}
