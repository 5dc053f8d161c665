//! Native glue for the sequence thunks: Gated DeltaNet (f32 / f16),
//! selective scan, Mamba-2, LSTM / GRU / RNN (kernels in
//! `host::kernels::sequence*`). Lowering gives every operand its own range
//! (the output is a fresh value, the recurrent state a `State` leaf), so no
//! operand aliases the output.

use super::NResult;
use crate::host::buffer::{Mem, Plain};
use crate::host::kernels::invalid;
use crate::host::kernels::sequence::{self as ssm, ScanDims, ScanForm};
use crate::host::kernels::sequence_gdn::{self as gdn, GdnDims};
use crate::host::kernels::sequence_rnn::{self as rnn, Cell, RnnDims, RnnOperands};
use crate::host::kernels::Elem;
use crate::thunk::sequence::recurrent_sizes;
use crate::thunk::sequence::GatedDeltaNet;
use crate::thunk::Thunk;
use half::f16;

pub(super) fn handles(t: &Thunk) -> bool {
    matches!(
        t,
        Thunk::GatedDeltaNet(_)
            | Thunk::SelectiveScan(_)
            | Thunk::Mamba2(_)
            | Thunk::Lstm(_)
            | Thunk::Gru(_)
            | Thunk::Rnn(_)
    )
}

pub(super) fn run(t: &Thunk, mem: &Mem) -> NResult {
    match t {
        Thunk::GatedDeltaNet(x) if x.f16 => run_gdn::<f16>(mem, x),
        Thunk::GatedDeltaNet(x) => run_gdn::<f32>(mem, x),
        Thunk::SelectiveScan(x) => {
            let d = ScanDims {
                batch: x.batch as usize,
                seq: x.seq as usize,
                width: x.hidden as usize,
                n: x.state_size as usize,
            };
            let xn = prod(&[x.batch, x.seq, x.hidden]);
            let bn = prod(&[x.batch, x.seq, x.state_size]);
            let state = match x.state {
                Some(o) => Some(mem.get_mut::<f32>(
                    "state",
                    o,
                    prod(&[x.batch, x.hidden, x.state_size]),
                )?),
                None => None,
            };
            ssm::selective_scan(
                mem.get("x", x.x, xn)?,
                mem.get("delta", x.delta, xn)?,
                mem.get("a", x.a, prod(&[x.hidden, x.state_size]))?,
                mem.get("b", x.b, bn)?,
                mem.get("c", x.c, bn)?,
                state,
                mem.get_mut("dst", x.dst, xn)?,
                d,
            )?;
            Ok(())
        }
        Thunk::Mamba2(x) => {
            let p = x.head_dim as usize;
            let d = ScanDims {
                batch: x.batch as usize,
                seq: x.seq as usize,
                width: x.heads as usize,
                n: x.state_size as usize,
            };
            let xn = prod(&[x.batch, x.seq, x.heads, x.head_dim]);
            let bn = prod(&[x.batch, x.seq, x.state_size]);
            let state = match x.state {
                Some(o) => Some(mem.get_mut::<f32>(
                    "state",
                    o,
                    prod(&[x.batch, x.heads, x.head_dim, x.state_size]),
                )?),
                None => None,
            };
            ssm::mamba2(
                mem.get("x", x.x, xn)?,
                mem.get("dt", x.dt, prod(&[x.batch, x.seq, x.heads]))?,
                mem.get("a", x.a, d.width)?,
                mem.get("b", x.b, bn)?,
                mem.get("c", x.c, bn)?,
                state,
                mem.get_mut("dst", x.dst, xn)?,
                d,
                p,
                ScanForm::Auto,
            )?;
            Ok(())
        }
        Thunk::Lstm(x) => run_rnn(
            mem,
            Cell::Lstm,
            rnn_dims!(x),
            [x.x, x.w_ih, x.w_hh, x.h0, x.dst],
            (x.bias, None),
            Some(x.c0),
        ),
        Thunk::Gru(x) => run_rnn(
            mem,
            Cell::Gru,
            rnn_dims!(x),
            [x.x, x.w_ih, x.w_hh, x.h0, x.dst],
            (x.b_ih, Some(x.b_hh)),
            None,
        ),
        Thunk::Rnn(x) => run_rnn(
            mem,
            Cell::Rnn { relu: x.relu },
            rnn_dims!(x),
            [x.x, x.w_ih, x.w_hh, x.h0, x.dst],
            (x.bias, None),
            None,
        ),
        _ => Err(invalid("native", format!("no sequence kernel for {}", t.name())).into()),
    }
}

/// Gated DeltaNet with elements `T` (the chunked form from
/// `CHUNKED_FROM` tokens, else the recurrent one).
fn run_gdn<T: Elem + Plain>(mem: &Mem, x: &GatedDeltaNet) -> NResult {
    let d = GdnDims {
        batch: x.batch as usize,
        seq: x.seq as usize,
        heads: x.heads as usize,
        n: x.state_size as usize,
    };
    let qn = prod(&[x.batch, x.seq, x.heads, x.state_size]);
    let gn = prod(&[x.batch, x.seq, x.heads]);
    let sn = prod(&[x.batch, x.heads, x.state_size, x.state_size]);
    gdn::gated_delta_net::<T>(
        mem.get("q", x.q, qn)?,
        mem.get("k", x.k, qn)?,
        mem.get("v", x.v, qn)?,
        mem.get("g", x.g, gn)?,
        mem.get("beta", x.beta, gn)?,
        mem.get_mut("state", x.state, sn)?,
        mem.get_mut("dst", x.dst, qn)?,
        d,
        ScanForm::Auto,
    )?;
    Ok(())
}

/// Run a recurrent net: `offs` = x, w_ih, w_hh, h0, dst; `bias` = b_ih (or
/// the combined bias) and the GRU's b_hh; `c0` for the LSTM.
fn run_rnn(
    mem: &Mem,
    cell: Cell,
    d: RnnDims,
    [x, w_ih, w_hh, h0, dst]: [usize; 5],
    (b_ih, b_hh): (usize, Option<usize>),
    c0: Option<usize>,
) -> NResult {
    let u = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    let gates = match cell {
        Cell::Lstm => 4,
        Cell::Gru => 3,
        Cell::Rnn { .. } => 1,
    };
    let z = recurrent_sizes(
        gates,
        u(d.batch),
        u(d.seq),
        u(d.input),
        u(d.hidden),
        u(d.layers),
        d.bidirectional,
        d.carry,
        if cell == Cell::Lstm { 2 } else { 1 },
    );
    let ops = RnnOperands {
        x: mem.get(
            "x",
            x,
            d.batch.saturating_mul(d.seq).saturating_mul(d.input),
        )?,
        w_ih: mem.get("w_ih", w_ih, z.w_ih)?,
        w_hh: mem.get("w_hh", w_hh, z.w_hh)?,
        b_ih: mem.get("bias", b_ih, z.bias)?,
        b_hh: b_hh.map(|o| mem.get("b_hh", o, z.bias)).transpose()?,
        h0: mem.get("h0", h0, z.state)?,
        c0: c0.map(|o| mem.get("c0", o, z.state)).transpose()?,
    };
    rnn::recurrent(cell, ops, mem.get_mut("dst", dst, z.out)?, d)?;
    Ok(())
}

/// The [`RnnDims`] of an Lstm / Gru / Rnn thunk (the three share the
/// field names).
macro_rules! rnn_dims {
    ($x:expr) => {
        RnnDims {
            batch: $x.batch as usize,
            seq: $x.seq as usize,
            input: $x.input_size as usize,
            hidden: $x.hidden as usize,
            layers: $x.num_layers as usize,
            bidirectional: $x.bidirectional,
            carry: $x.carry,
        }
    };
}
use rnn_dims;

/// Element count of `dims`, saturating (an impossible size then fails the
/// arena bounds check instead of wrapping).
fn prod(dims: &[u32]) -> usize {
    dims.iter()
        .fold(1usize, |acc, &d| acc.saturating_mul(d as usize))
}
