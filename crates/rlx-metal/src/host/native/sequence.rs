//! Native glue for the sequence thunks: Gated DeltaNet (f32 / f16),
//! selective scan, Mamba-2, LSTM / GRU / RNN (kernels in
//! `host::kernels::sequence*`). Lowering gives every operand its own range
//! (the output is a fresh value, the recurrent state a `State` leaf), so no
//! operand aliases the output.

use super::NResult;
use crate::host::buffer::Mem;
use crate::host::kernels::invalid;
use crate::host::kernels::sequence::{self as ssm, ScanDims, ScanForm};
use crate::host::kernels::sequence_gdn::{self as gdn, GdnDims};
use crate::host::kernels::sequence_rnn::{self as rnn, Cell, RnnDims, RnnOperands};
use crate::thunk::sequence::recurrent_sizes;
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
        Thunk::GatedDeltaNet(x) => {
            let d = GdnDims {
                batch: x.batch as usize,
                seq: x.seq as usize,
                heads: x.heads as usize,
                n: x.state_size as usize,
            };
            let qn = prod(&[x.batch, x.seq, x.heads, x.state_size]);
            let gn = prod(&[x.batch, x.seq, x.heads]);
            let sn = prod(&[x.batch, x.heads, x.state_size, x.state_size]);
            if x.f16 {
                gdn::gated_delta_net::<f16>(
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
            } else {
                gdn::gated_delta_net::<f32>(
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
            }
            Ok(())
        }
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
        Thunk::Lstm(x) => {
            let z = recurrent_sizes(
                4,
                x.batch,
                x.seq,
                x.input_size,
                x.hidden,
                x.num_layers,
                x.bidirectional,
                x.carry,
                2,
            );
            let ops = RnnOperands {
                x: mem.get("x", x.x, prod(&[x.batch, x.seq, x.input_size]))?,
                w_ih: mem.get("w_ih", x.w_ih, z.w_ih)?,
                w_hh: mem.get("w_hh", x.w_hh, z.w_hh)?,
                b_ih: mem.get("bias", x.bias, z.bias)?,
                b_hh: None,
                h0: mem.get("h0", x.h0, z.state)?,
                c0: Some(mem.get("c0", x.c0, z.state)?),
            };
            let d = RnnDims {
                bidirectional: x.bidirectional,
                carry: x.carry,
                ..dims(x.batch, x.seq, x.input_size, x.hidden, x.num_layers)
            };
            rnn::recurrent(Cell::Lstm, ops, mem.get_mut("dst", x.dst, z.out)?, d)?;
            Ok(())
        }
        Thunk::Gru(x) => {
            let z = recurrent_sizes(
                3,
                x.batch,
                x.seq,
                x.input_size,
                x.hidden,
                x.num_layers,
                x.bidirectional,
                x.carry,
                1,
            );
            let ops = RnnOperands {
                x: mem.get("x", x.x, prod(&[x.batch, x.seq, x.input_size]))?,
                w_ih: mem.get("w_ih", x.w_ih, z.w_ih)?,
                w_hh: mem.get("w_hh", x.w_hh, z.w_hh)?,
                b_ih: mem.get("b_ih", x.b_ih, z.bias)?,
                b_hh: Some(mem.get("b_hh", x.b_hh, z.bias)?),
                h0: mem.get("h0", x.h0, z.state)?,
                c0: None,
            };
            let d = RnnDims {
                bidirectional: x.bidirectional,
                carry: x.carry,
                ..dims(x.batch, x.seq, x.input_size, x.hidden, x.num_layers)
            };
            rnn::recurrent(Cell::Gru, ops, mem.get_mut("dst", x.dst, z.out)?, d)?;
            Ok(())
        }
        Thunk::Rnn(x) => {
            let z = recurrent_sizes(
                1,
                x.batch,
                x.seq,
                x.input_size,
                x.hidden,
                x.num_layers,
                x.bidirectional,
                x.carry,
                1,
            );
            let ops = RnnOperands {
                x: mem.get("x", x.x, prod(&[x.batch, x.seq, x.input_size]))?,
                w_ih: mem.get("w_ih", x.w_ih, z.w_ih)?,
                w_hh: mem.get("w_hh", x.w_hh, z.w_hh)?,
                b_ih: mem.get("bias", x.bias, z.bias)?,
                b_hh: None,
                h0: mem.get("h0", x.h0, z.state)?,
                c0: None,
            };
            let d = RnnDims {
                bidirectional: x.bidirectional,
                carry: x.carry,
                ..dims(x.batch, x.seq, x.input_size, x.hidden, x.num_layers)
            };
            let cell = Cell::Rnn { relu: x.relu };
            rnn::recurrent(cell, ops, mem.get_mut("dst", x.dst, z.out)?, d)?;
            Ok(())
        }
        _ => Err(invalid("native", format!("no sequence kernel for {}", t.name())).into()),
    }
}

fn dims(batch: u32, seq: u32, input: u32, hidden: u32, layers: u32) -> RnnDims {
    RnnDims {
        batch: batch as usize,
        seq: seq as usize,
        input: input as usize,
        hidden: hidden as usize,
        layers: layers as usize,
        bidirectional: false,
        carry: false,
    }
}

/// Element count of `dims`, saturating (an impossible size then fails the
/// arena bounds check instead of wrapping).
fn prod(dims: &[u32]) -> usize {
    dims.iter()
        .fold(1usize, |acc, &d| acc.saturating_mul(d as usize))
}
