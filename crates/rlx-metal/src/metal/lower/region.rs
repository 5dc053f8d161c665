//! Elementwise regions, fused binary / ternary activations, fma, compare,
//! where and SwiGLU → `region.metal`.

use super::{elementwise, kernel, suffix, Lowered, ELEMENTWISE_THREADS};
use crate::metal::args::{
    act_code, binary_code, cmp_code, CompareArgs, FusedActArgs, KernelArgs, RegionArgs, SwigluArgs,
    WhereArgs, REGION_SLOTS,
};
use crate::metal::kernels::Family;
use crate::metal::plan::{BufferBinding, Dispatch};
use crate::thunk::region::{chain_input_count, REGION_MAX_INPUTS, REGION_MAX_STEPS, STEP_OPERAND};
use crate::thunk::{Buf, Thunk};
use rlx_ir::op::BinaryOp;
use rlx_ir::op::ALL_ACTIVATIONS;

/// Cast-step rounding codes (`sub` of kind 1): none, f16, bf16, truncate.
const CAST_CODES: u32 = 4;
/// Binary-op codes of a kind-2 step.
const BINARY_CODES: u32 = 7;

/// True when the first `num_steps` steps are ones the kernel (and the
/// host executor) understand: known kinds and codes, operands naming one
/// of `n_in` inputs or an earlier step.
fn chain_ok(chain: &[u32; 128], num_steps: u32, n_in: usize) -> bool {
    let ns = num_steps as usize;
    if ns == 0 || ns > REGION_MAX_STEPS || n_in > REGION_MAX_INPUTS {
        return false;
    }
    let operand_ok = |w: u32, s: usize| {
        if w & STEP_OPERAND != 0 {
            ((w & !STEP_OPERAND) as usize) < s
        } else {
            (w as usize) < n_in
        }
    };
    chain.chunks_exact(4).take(ns).enumerate().all(|(s, w)| {
        let (kind, sub) = (w[0], w[1]);
        let codes = match kind {
            0 => ALL_ACTIVATIONS.len() as u32,
            1 => CAST_CODES,
            2 => BINARY_CODES,
            _ => return false,
        };
        sub < codes && operand_ok(w[2], s) && (kind != 2 || operand_ok(w[3], s))
    })
}

/// A `region_f32` dispatch: the arena at offset 0, `dst`, grid y = slices.
fn region(i: usize, args: &RegionArgs, dst: usize) -> Lowered {
    let arena = BufferBinding {
        buffer: Buf::Arena,
        offset: 0,
    };
    Lowered::Dispatch(Dispatch {
        thunk: i,
        kernel: kernel(Family::Region, "region_f32".into()),
        args: args.as_bytes().to_vec(),
        bindings: vec![arena, BufferBinding::of(dst)],
        grid: [
            args.slice_len.div_ceil(ELEMENTWISE_THREADS),
            args.num_batch,
            1,
        ],
        threadgroup: [ELEMENTWISE_THREADS, 1, 1],
        threadgroup_memory: Vec::new(),
    })
}

fn act_args(
    len: u32,
    op0: BinaryOp,
    op1: BinaryOp,
    act: Option<rlx_ir::op::Activation>,
) -> FusedActArgs {
    FusedActArgs {
        len,
        op0: binary_code(op0),
        op1: binary_code(op1),
        has_act: act.is_some() as u32,
        act: act.map_or(0, act_code),
    }
}

/// The thunks of `region.metal`; regions with a prologue (upsample) or a
/// chain the kernel does not know stay on the host.
pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    let mine = matches!(
        t,
        Thunk::ElementwiseRegion(_)
            | Thunk::BatchElementwiseRegion(_)
            | Thunk::FusedBinaryActivation(_)
            | Thunk::FusedTernaryActivation(_)
            | Thunk::Fma(_)
            | Thunk::Compare(_)
            | Thunk::Where(_)
            | Thunk::FusedSwiGLU(_)
    );
    if !mine {
        return None;
    }
    if t.io().writes.is_empty() {
        return Some(Lowered::Skip);
    }
    Some(match t {
        Thunk::ElementwiseRegion(r) => {
            let n_in = r.num_inputs as usize;
            if r.prologue != 0 || !chain_ok(&r.chain, r.num_steps, n_in) {
                return None;
            }
            let mut args = RegionArgs {
                slice_len: r.len,
                num_batch: 1,
                num_steps: r.num_steps,
                n_in: r.num_inputs,
                slice_elems: r.len,
                scalar_mask: r.scalar_input_mask,
                modulus: r.input_modulus,
                chain: r.chain,
                ..Default::default()
            };
            args.input_offs[..n_in].copy_from_slice(&r.input_offs[..n_in]);
            region(i, &args, r.dst)
        }
        Thunk::BatchElementwiseRegion(r) => {
            let n_in = chain_input_count(&r.chain, r.num_steps);
            let slices = r.slices();
            if !chain_ok(&r.chain, r.num_steps, n_in) || slices * n_in > REGION_SLOTS {
                return None;
            }
            let mut args = RegionArgs {
                slice_len: r.slice_len,
                num_batch: slices as u32,
                num_steps: r.num_steps,
                n_in: n_in as u32,
                slice_elems: r.slice_elems,
                scalar_mask: r.scalar_input_mask,
                modulus: r.input_modulus,
                chain: r.chain,
                ..Default::default()
            };
            args.input_offs[..slices * n_in].copy_from_slice(&r.batch_input_offs[..slices * n_in]);
            region(i, &args, r.base_dst)
        }
        Thunk::FusedBinaryActivation(b) => {
            let args = act_args(b.len, b.op, BinaryOp::Add, Some(b.act));
            let k = kernel(Family::Region, format!("binary_act_{}", suffix(b.dt)));
            Lowered::Dispatch(elementwise(i, k, &args, &[b.lhs, b.rhs, b.dst], b.len))
        }
        Thunk::FusedTernaryActivation(b) => {
            let args = act_args(b.len, b.op0, b.op1, Some(b.act));
            let k = kernel(Family::Region, format!("ternary_act_{}", suffix(b.dt)));
            let offs = [b.lhs, b.rhs0, b.rhs1, b.dst];
            Lowered::Dispatch(elementwise(i, k, &args, &offs, b.len))
        }
        Thunk::Fma(f) => {
            let args = act_args(f.len, BinaryOp::Mul, BinaryOp::Add, None);
            let k = kernel(Family::Region, "ternary_act_f32".into());
            Lowered::Dispatch(elementwise(i, k, &args, &[f.a, f.b, f.c, f.dst], f.len))
        }
        Thunk::Compare(c) => {
            let args = CompareArgs {
                len: c.len,
                op: cmp_code(c.op),
                lhs_scalar: c.lhs_scalar as u32,
                rhs_scalar: c.rhs_scalar as u32,
            };
            let k = kernel(Family::Region, "compare_f32".into());
            Lowered::Dispatch(elementwise(i, k, &args, &[c.lhs, c.rhs, c.dst], c.len))
        }
        Thunk::Where(w) => {
            let args = WhereArgs {
                len: w.len,
                cond_scalar: w.cond_scalar as u32,
                true_scalar: w.true_scalar as u32,
                false_scalar: w.false_scalar as u32,
            };
            let k = kernel(Family::Region, "where_f32".into());
            let offs = [w.cond, w.on_true, w.on_false, w.dst];
            Lowered::Dispatch(elementwise(i, k, &args, &offs, w.len))
        }
        Thunk::FusedSwiGLU(s) if s.src_dt == s.dst_dt && s.n_half > 0 => {
            let args = SwigluArgs {
                total: s.total,
                n_half: s.n_half,
                gate_first: s.gate_first as u32,
            };
            let k = kernel(Family::Region, format!("swiglu_{}", suffix(s.src_dt)));
            Lowered::Dispatch(elementwise(i, k, &args, &[s.src, s.dst], s.total))
        }
        _ => return None,
    })
}
