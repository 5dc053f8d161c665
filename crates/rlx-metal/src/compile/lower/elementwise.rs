//! Lowering of elementwise ops: activations, binary ops (full, bias-add,
//! general broadcast), compare, where, cast, fma, fused regions, SwiGLU.
//!
//! Thunks the seed defines as f32-only (compare, where, fma, regions) get
//! their operands converted to f32 scratch when needed and their result
//! converted back, so every float and integer dtype the IR allows either
//! lowers correctly or fails with a named error.

use super::{numel, Ctx};
use crate::compile::error::CompileError;
use crate::thunk::binary::{BiasAdd, BinaryBroadcast, BinaryFull, Compare, Fma, Where};
use crate::thunk::elementwise::{
    ActivationInPlace, ActivationOut, Cast, CastHost, CastTruncF32, FusedSwiGLU, GeluApproxHost,
    GeluApproxOut,
};
use crate::thunk::region::{act_code, binop_code, ElementwiseRegion};
use crate::thunk::{is_arena, HalfFlag};
use rlx_ir::op::{Activation, BinaryOp, RegionOperand, RegionStep};
use rlx_ir::{DType, Op};

pub(super) fn lower(ctx: &mut Ctx<'_>, op: &Op) -> Result<(), CompileError> {
    match op {
        Op::Activation { kind } => activation(ctx, *kind),
        Op::Binary { kind } => binary(ctx, *kind),
        Op::Compare { kind } => {
            let out_dims = ctx.out_dims();
            let (lhs, ls) = f32_operand(ctx, 0, &out_dims, true)?;
            let (rhs, rs) = f32_operand(ctx, 1, &out_dims, true)?;
            let len = ctx.u32(numel(&out_dims), "elements")?;
            let tmp = ctx.scratch(numel(&out_dims) * 4);
            ctx.push(Compare {
                lhs,
                rhs,
                dst: tmp,
                len,
                op: *kind,
                lhs_scalar: ls,
                rhs_scalar: rs,
            });
            store_from_f32(ctx, tmp, len);
            Ok(())
        }
        Op::Where => {
            let out_dims = ctx.out_dims();
            let (cond, cs) = f32_operand(ctx, 0, &out_dims, true)?;
            let (t, ts) = f32_operand(ctx, 1, &out_dims, true)?;
            let (f, fs) = f32_operand(ctx, 2, &out_dims, true)?;
            let len = ctx.u32(numel(&out_dims), "elements")?;
            let dst = f32_dst(ctx, numel(&out_dims));
            ctx.push(Where {
                cond,
                on_true: t,
                on_false: f,
                dst,
                len,
                cond_scalar: cs,
                true_scalar: ts,
                false_scalar: fs,
            });
            finish_f32_dst(ctx, dst, len);
            Ok(())
        }
        Op::Cast { trunc: true, .. } => trunc_cast(ctx),
        Op::Cast { to, .. } => {
            let len = ctx.u32(numel(&ctx.out_dims()), "elements")?;
            let (src, dst) = (ctx.input(0), ctx.out());
            push_cast(ctx, src, ctx.in_shape(0).dtype, dst, *to, len);
            Ok(())
        }
        Op::Fma => {
            let out_dims = ctx.out_dims();
            let (a, _) = f32_operand(ctx, 0, &out_dims, false)?;
            let (b, _) = f32_operand(ctx, 1, &out_dims, false)?;
            let (c, _) = f32_operand(ctx, 2, &out_dims, false)?;
            let len = ctx.u32(numel(&out_dims), "elements")?;
            let dst = f32_dst(ctx, numel(&out_dims));
            ctx.push(Fma { a, b, c, dst, len });
            finish_f32_dst(ctx, dst, len);
            Ok(())
        }
        Op::ElementwiseRegion { steps } => region(ctx, steps),
        Op::FusedSwiGLU { gate_first } => {
            let d = ctx.out_dims();
            let n_half = ctx.u32(*d.last().unwrap_or(&0), "n_half")?;
            let total = ctx.u32(numel(&d), "elements")?;
            let src_dt = ctx.half_flag(ctx.in_shape(0).dtype, "input")?;
            let dst_dt = ctx.half_flag(ctx.out_shape().dtype, "output")?;
            ctx.push(FusedSwiGLU {
                src: ctx.input(0),
                dst: ctx.out(),
                n_half,
                total,
                src_dt,
                dst_dt,
                gate_first: *gate_first,
            });
            Ok(())
        }
        _ => Err(ctx.unsupported("not an elementwise op")),
    }
}

/// An activation. Planned in place (its operand died here, see
/// [`super::in_place`]: the result sits on the operand) it is
/// `ActivationInPlace`; the f32 tanh GELU gets the seed's dedicated thunks
/// (`GeluApproxOut`, same formula as the generic unary kernel, or
/// `GeluApproxHost` past the large-arena threshold, see
/// [`super::large_arena`]).
fn activation(ctx: &mut Ctx<'_>, act: Activation) -> Result<(), CompileError> {
    let dt = ctx.half_flag(ctx.out_shape().dtype, "operand")?;
    let len = ctx.u32(numel(&ctx.out_dims()), "elements")?;
    if ctx.input(0) == ctx.out() && !ctx.measuring {
        ctx.push(ActivationInPlace {
            data: ctx.out(),
            len,
            act,
            dt,
        });
        return Ok(());
    }
    if act == Activation::GeluApprox
        && dt == HalfFlag::F32
        && super::large_arena::gelu_on_host(ctx.arena_bytes)
    {
        ctx.push(GeluApproxHost {
            src: ctx.input(0),
            dst: ctx.out(),
            len,
        });
        return Ok(());
    }
    if act == Activation::GeluApprox && dt == HalfFlag::F32 {
        ctx.push(GeluApproxOut {
            src: ctx.input(0),
            dst: ctx.out(),
            len,
        });
        return Ok(());
    }
    ctx.push(ActivationOut {
        src: ctx.input(0),
        dst: ctx.out(),
        len,
        act,
        dt,
    });
    Ok(())
}

/// A trunc cast: `CastTruncF32` over f32, with the operand widened to f32
/// scratch first (exact from f16 / bf16) and the result converted to the
/// output's float dtype after (exact: an integral value of at most the
/// operand's magnitude). An f64 operand would be rounded to f32 before the
/// truncation, which can change the result: refused.
fn trunc_cast(ctx: &mut Ctx<'_>) -> Result<(), CompileError> {
    let from = ctx.in_shape(0).dtype;
    if !matches!(from, DType::F32 | DType::F16 | DType::BF16) {
        return Err(ctx.unsupported(format!(
            "a trunc cast computes in f32; an operand of dtype {from} is not supported"
        )));
    }
    let n = numel(&ctx.out_dims());
    let len = ctx.u32(n, "elements")?;
    let src = if from == DType::F32 {
        ctx.input(0)
    } else {
        let tmp = ctx.scratch(n * 4);
        push_cast(ctx, ctx.input(0), from, tmp, DType::F32, len);
        tmp
    };
    let dst = f32_dst(ctx, n);
    ctx.push(CastTruncF32 { src, dst, len });
    finish_f32_dst(ctx, dst, len);
    Ok(())
}

/// Numpy broadcast element strides of `in_dims` inside `out_dims` (0 where
/// the input is broadcast).
/// Dims are aligned from the right; extra leading input dims (which must be
/// 1: callers check with [`broadcastable`]) are dropped.
pub(crate) fn broadcast_strides(in_dims: &[usize], out_dims: &[usize]) -> Vec<u32> {
    let in_dims = &in_dims[in_dims.len().saturating_sub(out_dims.len())..];
    let pad = out_dims.len() - in_dims.len();
    let mut strides = vec![0u32; out_dims.len()];
    let mut acc = 1usize;
    for d in (0..out_dims.len()).rev() {
        let size = if d < pad { 1 } else { in_dims[d - pad] };
        if size != 1 {
            strides[d] = acc as u32;
            acc *= size;
        }
    }
    strides
}

/// True when `in_dims` broadcasts to `out_dims` under numpy rules (extra
/// leading input dims must be 1).
pub(crate) fn broadcastable(in_dims: &[usize], out_dims: &[usize]) -> bool {
    let extra = in_dims.len().saturating_sub(out_dims.len());
    in_dims[..extra].iter().all(|&d| d == 1)
        && in_dims[extra..]
            .iter()
            .rev()
            .zip(out_dims.iter().rev())
            .all(|(&i, &o)| i == o || i == 1)
}

/// True when `rhs` equals the trailing dims of `lhs` exactly (the only
/// case the cheap bias-add thunk handles).
fn trailing_broadcast(lhs: &[usize], rhs: &[usize]) -> bool {
    rhs.len() <= lhs.len() && lhs[lhs.len() - rhs.len()..] == *rhs
}

/// Emit a conversion of `len` elements.
pub(crate) fn push_cast(
    ctx: &mut Ctx<'_>,
    src: usize,
    from: DType,
    dst: usize,
    to: DType,
    len: u32,
) {
    let half = |d: DType| matches!(d, DType::F32 | DType::F16);
    if half(from) && half(to) {
        ctx.push(Cast {
            src,
            dst,
            len,
            src_dt: from.into(),
            dst_dt: to.into(),
        });
    } else {
        ctx.push(CastHost {
            src,
            dst,
            len,
            src_dt: from,
            dst_dt: to,
        });
    }
}

/// Operand `i` as a dense operand of dtype `to` with the output's dims (or a
/// single element when `allow_scalar`), converting and broadcasting into
/// scratch as needed. Returns the offset and whether it is a scalar.
fn operand_as(
    ctx: &mut Ctx<'_>,
    i: usize,
    out_dims: &[usize],
    to: DType,
    allow_scalar: bool,
) -> Result<(usize, bool), CompileError> {
    let dims = ctx.in_dims(i);
    let from = ctx.in_shape(i).dtype;
    let n = numel(&dims);
    let scalar = allow_scalar && n == 1 && numel(out_dims) != 1;
    let mut off = ctx.input(i);
    if from != to {
        let tmp = ctx.scratch(n * to.size_bytes());
        let len = ctx.u32(n, "elements")?;
        push_cast(ctx, off, from, tmp, to, len);
        off = tmp;
    }
    if !scalar && dims.iter().rev().ne(out_dims.iter().rev()) {
        off = materialize(ctx, off, &dims, out_dims, to)?;
    }
    Ok((off, scalar))
}

fn f32_operand(
    ctx: &mut Ctx<'_>,
    i: usize,
    out_dims: &[usize],
    allow_scalar: bool,
) -> Result<(usize, bool), CompileError> {
    operand_as(ctx, i, out_dims, DType::F32, allow_scalar)
}

/// Broadcast `in_dims` at `src` to dense `out_dims` in scratch: a
/// `max(x, x)` broadcast binary op, exact for every float value (NaN and
/// signed zero included) in f32 and f16.
pub(crate) fn materialize(
    ctx: &mut Ctx<'_>,
    src: usize,
    in_dims: &[usize],
    out_dims: &[usize],
    dtype: DType,
) -> Result<usize, CompileError> {
    let dt = ctx.half_flag(dtype, "broadcast operand")?;
    if !broadcastable(in_dims, out_dims) {
        return Err(ctx.unsupported(format!(
            "cannot broadcast an operand of dims {in_dims:?} to {out_dims:?}"
        )));
    }
    let n = numel(out_dims);
    let dst = ctx.scratch(n * dtype.size_bytes());
    let strides = broadcast_strides(in_dims, out_dims);
    ctx.push(BinaryBroadcast {
        lhs: src,
        rhs: src,
        dst,
        len: ctx.u32(n, "elements")?,
        op: BinaryOp::Max,
        dt,
        rank: out_dims.len() as u32,
        out_dims: out_dims.iter().map(|&d| d as u32).collect(),
        lhs_strides: strides.clone(),
        rhs_strides: strides,
    });
    Ok(dst)
}

/// Where an f32-only thunk writes: the output itself when it is f32, else scratch.
fn f32_dst(ctx: &mut Ctx<'_>, n: usize) -> usize {
    if ctx.out_shape().dtype == DType::F32 {
        ctx.out()
    } else {
        ctx.scratch(n * 4)
    }
}

fn finish_f32_dst(ctx: &mut Ctx<'_>, dst: usize, len: u32) {
    if ctx.out_shape().dtype != DType::F32 {
        store_from_f32(ctx, dst, len);
    }
}

/// Convert an f32 temporary into the output's dtype.
fn store_from_f32(ctx: &mut Ctx<'_>, tmp: usize, len: u32) {
    let (out, to) = (ctx.out(), ctx.out_shape().dtype);
    push_cast(ctx, tmp, DType::F32, out, to, len);
}

fn binary(ctx: &mut Ctx<'_>, op: BinaryOp) -> Result<(), CompileError> {
    let out_dims = ctx.out_dims();
    let out_dt = ctx.out_shape().dtype;
    let dt = ctx.half_flag(out_dt, "result")?;
    let mut offs = [0usize; 2];
    let mut dims = [ctx.in_dims(0), ctx.in_dims(1)];
    for i in 0..2 {
        offs[i] = ctx.input(i);
        if ctx.in_shape(i).dtype != out_dt {
            let n = numel(&dims[i]);
            let tmp = ctx.scratch(n * out_dt.size_bytes());
            let len = ctx.u32(n, "elements")?;
            push_cast(ctx, offs[i], ctx.in_shape(i).dtype, tmp, out_dt, len);
            offs[i] = tmp;
        }
    }
    let len = ctx.u32(numel(&out_dims), "elements")?;
    let full =
        |d: &Vec<usize>| numel(d) == numel(&out_dims) && d.iter().rev().eq(out_dims.iter().rev());
    if full(&dims[0]) && full(&dims[1]) {
        ctx.push(BinaryFull {
            lhs: offs[0],
            rhs: offs[1],
            dst: ctx.out(),
            len,
            op,
            dt,
        });
        return Ok(());
    }
    if op == BinaryOp::Add && full(&dims[1]) && !full(&dims[0]) {
        // commutative: put the full operand on the left
        offs.swap(0, 1);
        dims.swap(0, 1);
    }
    if op == BinaryOp::Add && full(&dims[0]) && trailing_broadcast(&out_dims, &dims[1]) {
        let n = numel(&dims[1]);
        ctx.push(BiasAdd {
            src: offs[0],
            bias: offs[1],
            dst: ctx.out(),
            m: ctx.u32(numel(&out_dims) / n.max(1), "rows")?,
            n: ctx.u32(n, "cols")?,
            dt,
        });
        return Ok(());
    }
    ctx.push(BinaryBroadcast {
        lhs: offs[0],
        rhs: offs[1],
        dst: ctx.out(),
        len,
        op,
        dt,
        rank: out_dims.len() as u32,
        out_dims: out_dims.iter().map(|&d| d as u32).collect(),
        lhs_strides: broadcast_strides(&dims[0], &out_dims),
        rhs_strides: broadcast_strides(&dims[1], &out_dims),
    });
    Ok(())
}

fn operand_word(o: RegionOperand) -> u32 {
    match o {
        RegionOperand::Input(i) => i,
        RegionOperand::Step(s) => s | 0x8000_0000,
    }
}

fn region(ctx: &mut Ctx<'_>, steps: &[RegionStep]) -> Result<(), CompileError> {
    if ctx.out_shape().dtype != DType::F32 {
        return Err(ctx.unsupported("elementwise regions compute in f32; the result must be f32"));
    }
    let out_dims = ctx.out_dims();
    let total = numel(&out_dims);
    let mut input_offs = [0u32; 16];
    let mut modulus = [0u32; 16];
    let mut scalar_mask = 0u32;
    for i in 0..ctx.arity() {
        let dims = ctx.in_dims(i);
        let n = numel(&dims);
        let mut off = ctx.input(i);
        let trailing = {
            let stripped: Vec<usize> = dims.iter().copied().skip_while(|&d| d == 1).collect();
            out_dims.len() >= stripped.len()
                && out_dims[out_dims.len() - stripped.len()..] == stripped[..]
        };
        let needs_copy =
            ctx.in_shape(i).dtype != DType::F32 || !is_arena(off) || !off.is_multiple_of(4);
        if n == 1 && total != 1 {
            scalar_mask |= 1 << i;
        } else if n != total && trailing {
            modulus[i] = ctx.u32(n, "broadcast period")?;
        } else if n != total {
            let (o, _) = f32_operand(ctx, i, &out_dims, false)?;
            off = o;
        }
        if needs_copy && (n == total || scalar_mask & (1 << i) != 0 || modulus[i] != 0) {
            let tmp = ctx.scratch(n * 4);
            let len = ctx.u32(n, "elements")?;
            push_cast(ctx, off, ctx.in_shape(i).dtype, tmp, DType::F32, len);
            off = tmp;
        }
        input_offs[i] = ctx.u32(off / 4, "region input element offset")?;
    }
    let mut chain = [0u32; 128];
    for (s, step) in steps.iter().enumerate() {
        let w = &mut chain[s * 4..s * 4 + 4];
        match *step {
            RegionStep::Unary { act, a } => {
                w.copy_from_slice(&[0, act_code(act), operand_word(a), 0]);
            }
            RegionStep::Binary { kind, a, b } => {
                w.copy_from_slice(&[2, binop_code(kind), operand_word(a), operand_word(b)]);
            }
            RegionStep::Cast { to, a } => {
                let sub = match to {
                    DType::F32 | DType::F64 => 0,
                    DType::F16 => 1,
                    DType::BF16 => 2,
                    _ => 3,
                };
                w.copy_from_slice(&[1, sub, operand_word(a), 0]);
            }
        }
    }
    ctx.push(ElementwiseRegion {
        len: ctx.u32(total, "elements")?,
        num_inputs: ctx.arity() as u32,
        num_steps: steps.len() as u32,
        dst: ctx.out(),
        input_offs,
        chain,
        scalar_input_mask: scalar_mask,
        input_modulus: modulus,
        prologue: 0,
        out_n: 0,
        out_c: 0,
        out_h: 0,
        out_w: 0,
        prologue_input: 0,
    });
    Ok(())
}
