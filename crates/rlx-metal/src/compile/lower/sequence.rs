//! Lowering of the sequence family: each op becomes its one thunk over the
//! planned offsets (operands that are views or constants are read where
//! they live).
//!
//! * `gated_delta_net` → [`GatedDeltaNet`] (f32 or f16);
//! * `selective_scan` → [`SelectiveScan`], `mamba2` → [`Mamba2`] (f32; the
//!   optional 6th operand, a `State` leaf, becomes the thunk's `state`);
//! * `lstm` / `gru` / `rnn` → [`Lstm`] / [`Gru`] / [`Rnn`] (f32; layout on
//!   `rlx_ir::op::Recurrent`);
//! * `scan` → [`ScanHost`] carrying the body graph.
//!
//! Other dtypes are refused with an `Unsupported` error naming the op and
//! the dtype (no silent conversion).

use super::Ctx;
use crate::compile::error::CompileError;
use crate::thunk::host::{ScanHost, ScanHostDesc};
use crate::thunk::sequence::{CellDims, GatedDeltaNet, Gru, Lstm, Mamba2, Rnn, SelectiveScan};
use rlx_ir::op::{Recurrent, ScanLoop};
use rlx_ir::{DType, Op};

/// Fail unless the op's (shared) dtype is f32, or f16 when `f16_ok`;
/// returns true for f16.
fn float_kind(ctx: &Ctx<'_>, f16_ok: bool) -> Result<bool, CompileError> {
    match ctx.in_shape(0).dtype {
        DType::F32 => Ok(false),
        DType::F16 if f16_ok => Ok(true),
        other => {
            let runs = if f16_ok { "f32 and f16" } else { "f32" };
            Err(ctx.unsupported(format!(
                "operands have dtype {other}; this op runs in {runs} only (cast the operands)"
            )))
        }
    }
}

/// The three static dims of a `[b, s, last]` operand as `u32`.
fn bsl(ctx: &Ctx<'_>, i: usize) -> Result<[u32; 3], CompileError> {
    let d = ctx.in_dims(i);
    Ok([
        ctx.u32(d[0], "batch")?,
        ctx.u32(d[1], "sequence length")?,
        ctx.u32(d[2], "features")?,
    ])
}

pub(super) fn lower(ctx: &mut Ctx<'_>, op: &Op) -> Result<(), CompileError> {
    match op {
        Op::GatedDeltaNet { heads, state_size } => {
            let f16 = float_kind(ctx, true)?;
            let [batch, seq, _] = bsl(ctx, 0)?;
            ctx.push(GatedDeltaNet {
                q: ctx.input(0),
                k: ctx.input(1),
                v: ctx.input(2),
                g: ctx.input(3),
                beta: ctx.input(4),
                state: ctx.input(5),
                dst: ctx.out(),
                batch,
                seq,
                heads: ctx.u32(*heads, "heads")?,
                state_size: ctx.u32(*state_size, "state_size")?,
                f16,
            });
        }
        Op::SelectiveScan => {
            float_kind(ctx, false)?;
            let [batch, seq, hidden] = bsl(ctx, 0)?;
            let n = ctx.in_dims(2)[1];
            ctx.push(SelectiveScan {
                x: ctx.input(0),
                delta: ctx.input(1),
                a: ctx.input(2),
                b: ctx.input(3),
                c: ctx.input(4),
                state: (ctx.arity() == 6).then(|| ctx.input(5)),
                dst: ctx.out(),
                batch,
                seq,
                hidden,
                state_size: ctx.u32(n, "state_size")?,
            });
        }
        Op::Mamba2 {
            heads,
            head_dim,
            state_size,
        } => {
            float_kind(ctx, false)?;
            let [batch, seq, _] = bsl(ctx, 0)?;
            ctx.push(Mamba2 {
                x: ctx.input(0),
                dt: ctx.input(1),
                a: ctx.input(2),
                b: ctx.input(3),
                c: ctx.input(4),
                state: (ctx.arity() == 6).then(|| ctx.input(5)),
                dst: ctx.out(),
                batch,
                seq,
                heads: ctx.u32(*heads, "heads")?,
                head_dim: ctx.u32(*head_dim, "head_dim")?,
                state_size: ctx.u32(*state_size, "state_size")?,
            });
        }
        Op::Lstm { net } => {
            let d = cell_dims(ctx, net)?;
            ctx.push(Lstm::from_dims(operands(ctx), d));
        }
        Op::Gru { net } => {
            let d = cell_dims(ctx, net)?;
            ctx.push(Gru::from_dims(operands(ctx), d));
        }
        Op::Rnn { net, relu } => {
            let d = cell_dims(ctx, net)?;
            ctx.push(Rnn {
                relu: *relu,
                ..Rnn::from_dims(operands(ctx), d)
            });
        }
        Op::Scan {
            scan:
                ScanLoop {
                    body,
                    num_carry,
                    length,
                },
            reverse,
        } => {
            let operand = |ctx: &Ctx<'_>, i: usize| -> Result<_, CompileError> {
                let s = ctx.in_shape(i).clone();
                let bytes = bytes_of(ctx, &s)?;
                Ok((ctx.input(i), bytes, s))
            };
            let operands = (0..ctx.arity())
                .map(|i| operand(ctx, i))
                .collect::<Result<Vec<_>, _>>()?;
            let out_shape = ctx.out_shape().clone();
            let out_bytes = bytes_of(ctx, &out_shape)?;
            ctx.push(ScanHost {
                desc: ScanHostDesc {
                    body: (**body).clone(),
                    num_carry: *num_carry,
                    length: *length,
                    reverse: *reverse,
                    operands,
                    output: (ctx.out(), out_bytes, out_shape),
                },
            });
        }
        other => {
            return Err(ctx.unsupported(format!(
                "{} is not a sequence op this lowering knows",
                other.name()
            )))
        }
    }
    Ok(())
}

/// The node's first `N - 1` inputs then its output: a recurrent cell's
/// operands in field order.
fn operands<const N: usize>(ctx: &Ctx<'_>) -> [usize; N] {
    std::array::from_fn(|i| if i + 1 < N { ctx.input(i) } else { ctx.out() })
}

/// The [`CellDims`] of a recurrent op (f32 only) from its input
/// `[batch, seq, input_size]` and `net`.
fn cell_dims(ctx: &Ctx<'_>, net: &Recurrent) -> Result<CellDims, CompileError> {
    float_kind(ctx, false)?;
    let [batch, seq, input_size] = bsl(ctx, 0)?;
    Ok(CellDims {
        batch,
        seq,
        input_size,
        hidden: ctx.u32(net.hidden, "hidden")?,
        num_layers: ctx.u32(net.num_layers, "num_layers")?,
        bidirectional: net.bidirectional,
        carry: net.carry,
    })
}

/// Bytes of a static shape, or a `TooLarge` error.
fn bytes_of(ctx: &Ctx<'_>, s: &rlx_ir::Shape) -> Result<usize, CompileError> {
    s.size_bytes().ok_or_else(|| CompileError::TooLarge {
        op: ctx.node().op.name().to_string(),
        msg: format!("{s} overflows the address space"),
        node: ctx.node,
    })
}
