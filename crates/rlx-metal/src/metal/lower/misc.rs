//! Random fills → `rng.metal`, vector-quantiser assignment → `vq.metal`,
//! SAM 2 axial RoPE → `rope.metal` (`axial_rope2d_f32`), the
//! `spd_backward` gradients (f32; `re_eig` / `log_eig` n ≤ 16,
//! `karcher_mean` / `batch_norm` n ≤ 8, `bi_map`) → `spd.metal`, each
//! dispatch followed by a status check of the operands it validates. Shapes the host
//! kernels reject (bad metric, head_dim not a multiple of 4, a sequence
//! longer than the repeated grid) and aliased operands stay on the host,
//! whose kernels report the error.

use super::shape::u32_of;
use super::{aliased, elementwise, kernel, Lowered};
use crate::host::kernels::spd;
use crate::metal::args::{AxialRopeArgs, RngArgs, SpdArgs, SpdBiMapArgs, VqArgs};
use crate::metal::check::StatusCheck;
use crate::metal::kernels::Family;
use crate::metal::plan::{BufferBinding, Dispatch};
use crate::thunk::host::{rng_key, CustomOperand, SpdHost};
use crate::thunk::Thunk;
use rlx_ir::op::SpdOp;
use rlx_ir::{DType, Op};

/// Largest matrix `spd_eig_bwd_f32` takes (`SPD_MAX_N`).
const SPD_MAX_N: usize = 16;

/// Largest `m` (w's columns) `spd_bimap_bwd_f32` takes (`SPD_BIMAP_MAX_M`).
const SPD_BIMAP_MAX_M: usize = 2048;

/// Largest matrix of the Karcher-mean gradients (`SPD_MEAN_MAX_N`: the
/// implicit-function Jacobian, n(n+1)/2 squared, is thread-private).
const SPD_MEAN_MAX_N: usize = 8;

/// Threads per threadgroup of `spd_bimap_bwd_f32` (`SPD_BIMAP_THREADS`).
const SPD_BIMAP_THREADS: u32 = 64;

/// Threads per threadgroup of `vq_assign_f32` (`VQ_THREADS`).
const VQ_THREADS: u32 = 64;

fn rng_args(len: u32, key: u64, offset: u64, a: f32, b: f32) -> RngArgs {
    RngArgs {
        len,
        key_lo: key as u32,
        key_hi: (key >> 32) as u32,
        offset_lo: offset as u32,
        offset_hi: (offset >> 32) as u32,
        a,
        b,
        _pad: 0,
    }
}

/// The dispatch of one misc thunk, `None` for the host.
pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    if matches!(
        t,
        Thunk::RngNormal(_) | Thunk::RngUniform(_) | Thunk::VqAssign(_) | Thunk::AxialRope2dHost(_)
    ) && t.io().writes.iter().all(|w| w.len == 0)
    {
        return Some(Lowered::Skip);
    }
    Some(match t {
        Thunk::RngUniform(r) => {
            let key = rng_key(r.key, r.op_seed);
            let args = rng_args(r.len, key, r.offset, r.low, r.high - r.low);
            let k = kernel(Family::Rng, "rng_uniform_f32".into());
            Lowered::Dispatch(elementwise(i, k, &args, &[r.dst], r.len.div_ceil(4)))
        }
        Thunk::RngNormal(r) => {
            let key = rng_key(r.key, r.op_seed);
            let args = rng_args(r.len, key, r.offset, r.mean, r.scale);
            let k = kernel(Family::Rng, "rng_normal_f32".into());
            Lowered::Dispatch(elementwise(i, k, &args, &[r.dst], r.len.div_ceil(2)))
        }
        Thunk::VqAssign(v) if v.metric <= 2 && (v.k > 0 || v.n == 0) && !aliased(t) => {
            let args = VqArgs {
                n: v.n,
                d: v.d,
                k: v.k,
                metric: v.metric,
            };
            Lowered::Dispatch(Dispatch {
                thunk: i,
                kernel: kernel(Family::Vq, "vq_assign_f32".into()),
                args: args_bytes(&args),
                bindings: [v.x, v.cb, v.out]
                    .iter()
                    .map(|&o| BufferBinding::of(o))
                    .collect(),
                grid: [v.n, 1, 1],
                threadgroup: [VQ_THREADS, 1, 1],
                threadgroup_memory: Vec::new(),
            })
        }
        Thunk::AxialRope2dHost(r) => {
            let hd = r.head_dim;
            let grid = r.end_x.checked_mul(r.end_y)?;
            let seq_ok = r.seq as u64 <= grid as u64 * r.repeat_factor.max(1) as u64;
            let hidden_ok = r.num_heads as u64 * hd as u64 == r.hidden as u64;
            if hd == 0 || !hd.is_multiple_of(4) || grid == 0 || !seq_ok || !hidden_ok || aliased(t)
            {
                return None;
            }
            let pairs = u32_of(r.batch as u64 * r.seq as u64 * r.hidden as u64 / 2)?;
            let args = AxialRopeArgs {
                pairs,
                seq: r.seq,
                hidden: r.hidden,
                head_dim: hd,
                end_x: r.end_x,
                grid,
                theta: r.theta,
                _pad: 0,
            };
            let k = kernel(Family::Rope, "axial_rope2d_f32".into());
            Lowered::Dispatch(elementwise(i, k, &args, &[r.src, r.dst], pairs))
        }
        Thunk::SpdHost(s) => return spd_backward(i, t, s),
        _ => return None,
    })
}

/// Static dims of an operand.
fn static_dims(o: &CustomOperand) -> Option<Vec<usize>> {
    o.2.dims.iter().map(|d| d.as_static()).collect()
}

/// `spd_backward` on f32 operands as a validating `spd.metal` dispatch
/// followed by its status [`Check`](crate::metal::plan::Command::Check):
/// `re_eig` / `log_eig` on `[.., n, n]` with `n ≤ SPD_MAX_N` (one thread
/// per matrix), `bi_map` on `x [.., n, n]`, `w [n, m]` with `m ≤
/// SPD_BIMAP_MAX_M` (one threadgroup per output row), `karcher_mean` /
/// `batch_norm` with `n ≤ SPD_MEAN_MAX_N` and a non-empty batch (one
/// thread for the whole batch). Anything else (dtypes, larger matrices,
/// shapes the host kernel rejects, aliased operands) stays on the host.
fn spd_backward(i: usize, t: &Thunk, s: &SpdHost) -> Option<Lowered> {
    let Op::SpdBackward { kind, eps } = &s.op else {
        return None;
    };
    let all_f32 = s
        .inputs
        .iter()
        .chain([&s.output])
        .all(|o| o.2.dtype == DType::F32);
    if !all_f32 || aliased(t) {
        return None;
    }
    let x = s.inputs.first()?;
    let xd = static_dims(x)?;
    let r = xd.len();
    if r < 2 || xd[r - 1] != xd[r - 2] || x.1 != s.output.1 {
        return None;
    }
    let n = xd[r - 1];
    let mean = matches!(kind, SpdOp::KarcherMean | SpdOp::BatchNorm);
    if x.1 == 0 {
        // (the host reports an empty batch of the Karcher-mean kinds)
        return (!mean).then_some(Lowered::Skip);
    }
    let batch = x.1 / u32_of(n.checked_mul(n)? as u64)?;
    let op = format!("{} backward", spd::op_name(*kind));
    let (dispatch, operands) = match (kind, s.inputs.as_slice()) {
        (SpdOp::ReEig | SpdOp::LogEig, [x, dy]) if n <= SPD_MAX_N && dy.1 == x.1 => {
            let args = SpdArgs {
                batch,
                n: n as u32,
                kind: u32::from(*kind == SpdOp::LogEig),
                eps: *eps,
            };
            let k = kernel(Family::Spd, "spd_eig_bwd_f32".into());
            let d = elementwise(i, k, &args, &[x.0, dy.0, s.output.0], batch);
            (d, vec!["x", "dy"])
        }
        (SpdOp::BiMap, [x, w, dy]) => {
            let m = match static_dims(w)?.as_slice() {
                &[wn, m] if wn == n && m <= SPD_BIMAP_MAX_M => m,
                _ => return None,
            };
            let mm = u64::from(batch) * (m * m) as u64;
            if u64::from(w.1) != (n * m) as u64 || u64::from(dy.1) != mm {
                return None;
            }
            let args = SpdBiMapArgs {
                batch,
                n: n as u32,
                m: m as u32,
                _pad: 0,
            };
            let d = Dispatch {
                thunk: i,
                kernel: kernel(Family::Spd, "spd_bimap_bwd_f32".into()),
                args: args_bytes(&args),
                bindings: [x.0, w.0, dy.0, s.output.0]
                    .iter()
                    .map(|&o| BufferBinding::of(o))
                    .collect(),
                grid: [u32_of(u64::from(batch) * n as u64)?, 1, 1],
                threadgroup: [SPD_BIMAP_THREADS, 1, 1],
                threadgroup_memory: Vec::new(),
            };
            (d, vec!["x", "w", "dy"])
        }
        (SpdOp::KarcherMean, [x, dy]) if n <= SPD_MEAN_MAX_N && dy.1 as usize == n * n => {
            let args = SpdArgs {
                batch,
                n: n as u32,
                kind: 2,
                eps: *eps,
            };
            let d = one_thread(i, "spd_karcher_bwd_f32", &args, &[x.0, dy.0, s.output.0]);
            (d, vec!["x", "dy"])
        }
        (SpdOp::BatchNorm, [x, bias, dy])
            if n <= SPD_MEAN_MAX_N && static_dims(bias)? == [n, n] && dy.1 == x.1 =>
        {
            let args = SpdArgs {
                batch,
                n: n as u32,
                kind: 3,
                eps: *eps,
            };
            let offs = [x.0, bias.0, dy.0, s.output.0];
            let d = one_thread(i, "spd_bn_bwd_f32", &args, &offs);
            (d, vec!["x", "bias", "dy"])
        }
        _ => return None,
    };
    let check = StatusCheck {
        thunk: i,
        op,
        operands,
        status: BufferBinding::of(s.output.0),
        stride: u32_of((n * n) as u64)?,
        count: batch,
    };
    Some(Lowered::Checked(dispatch, check))
}

/// A one-thread dispatch of `spd.metal`'s `function`.
fn one_thread(i: usize, function: &str, args: &SpdArgs, offs: &[usize]) -> Dispatch {
    Dispatch {
        thunk: i,
        kernel: kernel(Family::Spd, function.into()),
        args: args_bytes(args),
        bindings: offs.iter().map(|&o| BufferBinding::of(o)).collect(),
        grid: [1, 1, 1],
        threadgroup: [1, 1, 1],
        threadgroup_memory: Vec::new(),
    }
}

fn args_bytes(a: &impl crate::metal::args::KernelArgs) -> Vec<u8> {
    a.as_bytes().to_vec()
}
