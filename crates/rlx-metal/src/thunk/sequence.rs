//! Recurrences and scans: gated DeltaNet, Mamba selective scan, Mamba-2
//! SSD, LSTM, GRU and Elman RNN.
//!
//! # Recurrent weight layout
//!
//! LSTM / GRU / RNN operands use the layout documented once on
//! `rlx_ir::op::Recurrent` (padded `w_ih [L·dirs, G·hidden, in_w]`, `w_hh
//! [L·dirs, G·hidden, hidden]`, biases `[L·dirs, G·hidden]`, `h0` / `c0
//! [L·dirs, batch, hidden]`, output `[batch, seq + extra, dirs·hidden]` with
//! `extra = carry rows · L` when `carry`); [`recurrent_sizes`] computes it.
//!
//! # Recurrent state of the SSM scans
//!
//! `SelectiveScan::state` (`[batch, hidden, state_size]`) and
//! `Mamba2::state` (`[batch, heads, head_dim, state_size]`), when set, hold
//! the initial state and receive the final state in place (like
//! `GatedDeltaNet::state`); unset, the scan starts from zero and writes no
//! state.
//!
//! All f32 except GatedDeltaNet with `f16`.

use super::io::{bytes, elem_bytes, nbytes, ThunkIo, F32};
use super::offsets::Off;
use super::ThunkOp;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Element counts of a recurrent cell's operands (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecurrentSizes {
    /// Columns of each `w_ih` slot: `in` for one layer, else
    /// `max(in, dirs·hidden)`.
    pub in_w: usize,
    /// `w_ih` elements.
    pub w_ih: usize,
    /// `w_hh` elements.
    pub w_hh: usize,
    /// Elements of one bias vector set.
    pub bias: usize,
    /// `h0` (and `c0`) elements.
    pub state: usize,
    /// Output rows per batch entry (`seq` plus the carry rows).
    pub rows: usize,
    /// Output elements.
    pub out: usize,
}

/// Sizes for a recurrence with `gates` gates; with `carry`,
/// `rows_per_layer · num_layers` final-state rows are appended to the output.
#[allow(clippy::too_many_arguments)]
pub fn recurrent_sizes(
    gates: usize,
    batch: u32,
    seq: u32,
    input_size: u32,
    hidden: u32,
    num_layers: u32,
    bidirectional: bool,
    carry: bool,
    rows_per_layer: usize,
) -> RecurrentSizes {
    let dirs: usize = if bidirectional { 2 } else { 1 };
    let (h, l, b) = (hidden as usize, num_layers as usize, batch as usize);
    let gh = gates.saturating_mul(h);
    let slots = l.saturating_mul(dirs);
    let in_w = if l <= 1 {
        input_size as usize
    } else {
        (input_size as usize).max(dirs.saturating_mul(h))
    };
    let extra = if carry {
        rows_per_layer.saturating_mul(l)
    } else {
        0
    };
    let rows = (seq as usize).saturating_add(extra);
    RecurrentSizes {
        in_w,
        w_ih: slots.saturating_mul(gh).saturating_mul(in_w),
        w_hh: slots.saturating_mul(gh).saturating_mul(h),
        bias: slots.saturating_mul(gh),
        state: slots.saturating_mul(b).saturating_mul(h),
        rows,
        out: b
            .saturating_mul(rows)
            .saturating_mul(dirs.saturating_mul(h)),
    }
}

/// Gated DeltaNet scan. q / k / v / dst `[batch, seq, heads · state_size]`,
/// g / beta `[batch, seq, heads]`, `state [batch, heads, state_size,
/// state_size]` updated in place; all f16 with `f16`, else f32.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GatedDeltaNet {
    /// Queries.
    pub q: usize,
    /// Keys.
    pub k: usize,
    /// Values.
    pub v: usize,
    /// Decay gates.
    pub g: usize,
    /// Write strengths.
    pub beta: usize,
    /// Recurrent state (read and written).
    pub state: usize,
    /// Output.
    pub dst: usize,
    /// Batch.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// Heads.
    pub heads: u32,
    /// Key / value dim per head.
    pub state_size: u32,
    /// Tensors are f16.
    pub f16: bool,
}

impl ThunkOp for GatedDeltaNet {
    const NAME: &'static str = "gated_delta_net";
    fn io(&self) -> ThunkIo {
        let es = elem_bytes(self.f16);
        let (b, s, h, n) = (self.batch, self.seq, self.heads, self.state_size);
        let qkv = bytes(&[b, s, h, n], es);
        let gate = bytes(&[b, s, h], es);
        ThunkIo::new()
            .read(self.q, qkv)
            .read(self.k, qkv)
            .read(self.v, qkv)
            .read(self.g, gate)
            .read(self.beta, gate)
            .update(self.state, bytes(&[b, h, n, n], es))
            .write(self.dst, qkv)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dt = if self.f16 { "f16" } else { "f32" };
        write!(
            f,
            "b={} s={} heads={} n={} {dt} state={} dst={}",
            self.batch,
            self.seq,
            self.heads,
            self.state_size,
            Off(self.state),
            Off(self.dst)
        )
    }
}

/// Mamba selective scan: x / delta / dst `[batch, seq, hidden]`, a
/// `[hidden, state_size]`, b / c `[batch, seq, state_size]`, optional
/// `state [batch, hidden, state_size]` read then written in place.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SelectiveScan {
    /// Input.
    pub x: usize,
    /// Step sizes.
    pub delta: usize,
    /// State matrix.
    pub a: usize,
    /// Input projection.
    pub b: usize,
    /// Output projection.
    pub c: usize,
    /// Recurrent state (initial in, final out), or zero-initialised and
    /// discarded when `None`.
    #[serde(default)]
    pub state: Option<usize>,
    /// Output.
    pub dst: usize,
    /// Batch.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// Channels.
    pub hidden: u32,
    /// State size.
    pub state_size: u32,
}

impl ThunkOp for SelectiveScan {
    const NAME: &'static str = "selective_scan";
    fn io(&self) -> ThunkIo {
        let (b, s, h, n) = (self.batch, self.seq, self.hidden, self.state_size);
        let x = bytes(&[b, s, h], F32);
        let bc = bytes(&[b, s, n], F32);
        let io = ThunkIo::new()
            .read(self.x, x)
            .read(self.delta, x)
            .read(self.a, bytes(&[h, n], F32))
            .read(self.b, bc)
            .read(self.c, bc);
        let io = match self.state {
            Some(st) => io.update(st, bytes(&[b, h, n], F32)),
            None => io,
        };
        io.write(self.dst, x)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "b={} s={} hidden={} n={} x={}{} dst={}",
            self.batch,
            self.seq,
            self.hidden,
            self.state_size,
            Off(self.x),
            StateField(self.state),
            Off(self.dst)
        )
    }
}

/// Mamba-2 SSD scan: x / dst `[batch, seq, heads · head_dim]`, dt
/// `[batch, seq, heads]`, a `[heads]`, b / c `[batch, seq, state_size]`,
/// optional `state [batch, heads, head_dim, state_size]` read then written
/// in place.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Mamba2 {
    /// Input.
    pub x: usize,
    /// Step sizes.
    pub dt: usize,
    /// Per-head decay.
    pub a: usize,
    /// Input projection.
    pub b: usize,
    /// Output projection.
    pub c: usize,
    /// Recurrent state (initial in, final out), or zero-initialised and
    /// discarded when `None`.
    #[serde(default)]
    pub state: Option<usize>,
    /// Output.
    pub dst: usize,
    /// Batch.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// Heads.
    pub heads: u32,
    /// Channels per head.
    pub head_dim: u32,
    /// State size.
    pub state_size: u32,
}

impl ThunkOp for Mamba2 {
    const NAME: &'static str = "mamba2";
    fn io(&self) -> ThunkIo {
        let (b, s, h, p, n) = (
            self.batch,
            self.seq,
            self.heads,
            self.head_dim,
            self.state_size,
        );
        let x = bytes(&[b, s, h, p], F32);
        let bc = bytes(&[b, s, n], F32);
        let io = ThunkIo::new()
            .read(self.x, x)
            .read(self.dt, bytes(&[b, s, h], F32))
            .read(self.a, bytes(&[h], F32))
            .read(self.b, bc)
            .read(self.c, bc);
        let io = match self.state {
            Some(st) => io.update(st, bytes(&[b, h, p, n], F32)),
            None => io,
        };
        io.write(self.dst, x)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "b={} s={} heads={} p={} n={} x={}{} dst={}",
            self.batch,
            self.seq,
            self.heads,
            self.head_dim,
            self.state_size,
            Off(self.x),
            StateField(self.state),
            Off(self.dst)
        )
    }
}

/// ` state=<off>` when a scan carries a recurrent state, else nothing.
struct StateField(Option<usize>);

impl fmt::Display for StateField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(o) => write!(f, " state={}", Off(o)),
            None => Ok(()),
        }
    }
}

/// The shape fields LSTM, GRU and RNN share (layout in the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CellDims {
    /// Batch.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// Input features.
    pub input_size: u32,
    /// Hidden size.
    pub hidden: u32,
    /// Stacked layers.
    pub num_layers: u32,
    /// Both directions.
    pub bidirectional: bool,
    /// Append the final-state rows.
    pub carry: bool,
}

impl CellDims {
    /// A cell's io in operand order: input `x`, `w_ih`, `w_hh`, each of
    /// `biases` and `states` (h0, c0), then the output `dst`. `gates` and
    /// `rows_per_layer` are as for [`recurrent_sizes`].
    fn io(
        &self,
        (gates, rows_per_layer): (usize, usize),
        [x, w_ih, w_hh]: [usize; 3],
        biases: &[usize],
        states: &[usize],
        dst: usize,
    ) -> ThunkIo {
        let z = recurrent_sizes(
            gates,
            self.batch,
            self.seq,
            self.input_size,
            self.hidden,
            self.num_layers,
            self.bidirectional,
            self.carry,
            rows_per_layer,
        );
        let mut io = ThunkIo::new()
            .read(x, bytes(&[self.batch, self.seq, self.input_size], F32))
            .read(w_ih, nbytes(z.w_ih, F32))
            .read(w_hh, nbytes(z.w_hh, F32));
        for &b in biases {
            io = io.read(b, nbytes(z.bias, F32));
        }
        for &s in states {
            io = io.read(s, nbytes(z.state, F32));
        }
        io.write(dst, nbytes(z.out, F32))
    }

    /// Shared description of the recurrent cells.
    fn fmt(&self, f: &mut fmt::Formatter<'_>, x: usize, dst: usize) -> fmt::Result {
        let bi = if self.bidirectional { " bidir" } else { "" };
        let carry = if self.carry { " carry" } else { "" };
        write!(
            f,
            "b={} s={} in={} hidden={} layers={}{bi}{carry} x={} dst={}",
            self.batch,
            self.seq,
            self.input_size,
            self.hidden,
            self.num_layers,
            Off(x),
            Off(dst)
        )
    }
}

/// Implements `dims()` and `from_dims()` for a recurrent cell thunk whose
/// operand fields are `[$op, ..]` (`$n` of them); `$f: $v` set the other
/// fields in `from_dims`.
macro_rules! recurrent_cell {
    ($t:ident, [$($op:ident),*; $n:literal] $(, $f:ident: $v:expr)*) => {
        impl $t {
            /// The thunk's [`CellDims`].
            pub fn dims(&self) -> CellDims {
                CellDims {
                    batch: self.batch,
                    seq: self.seq,
                    input_size: self.input_size,
                    hidden: self.hidden,
                    num_layers: self.num_layers,
                    bidirectional: self.bidirectional,
                    carry: self.carry,
                }
            }

            #[doc = concat!(
                "The thunk over its operands `", stringify!([$($op),*]), "` with shape `d`"
                $(, "; `", stringify!($f), ": ", stringify!($v), "`")*,
                "."
            )]
            pub fn from_dims([$($op),*]: [usize; $n], d: CellDims) -> Self {
                $t {
                    $($op,)*
                    batch: d.batch,
                    seq: d.seq,
                    input_size: d.input_size,
                    hidden: d.hidden,
                    num_layers: d.num_layers,
                    bidirectional: d.bidirectional,
                    carry: d.carry,
                    $($f: $v,)*
                }
            }
        }
    };
}

/// LSTM (gates i, f, g, o); layout in the module docs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lstm {
    /// Input `[batch, seq, input_size]`.
    pub x: usize,
    /// Input weights.
    pub w_ih: usize,
    /// Recurrent weights.
    pub w_hh: usize,
    /// Combined bias.
    pub bias: usize,
    /// Initial hidden state.
    pub h0: usize,
    /// Initial cell state.
    pub c0: usize,
    /// Output.
    pub dst: usize,
    /// Batch.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// Input features.
    pub input_size: u32,
    /// Hidden size.
    pub hidden: u32,
    /// Stacked layers.
    pub num_layers: u32,
    /// Both directions.
    pub bidirectional: bool,
    /// Append final h and c rows.
    pub carry: bool,
}

recurrent_cell!(Lstm, [x, w_ih, w_hh, bias, h0, c0, dst; 7]);

impl ThunkOp for Lstm {
    const NAME: &'static str = "lstm";
    fn io(&self) -> ThunkIo {
        self.dims().io(
            (4, 2),
            [self.x, self.w_ih, self.w_hh],
            &[self.bias],
            &[self.h0, self.c0],
            self.dst,
        )
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.dims().fmt(f, self.x, self.dst)
    }
}

/// GRU (gates r, z, n); layout in the module docs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gru {
    /// Input `[batch, seq, input_size]`.
    pub x: usize,
    /// Input weights.
    pub w_ih: usize,
    /// Recurrent weights.
    pub w_hh: usize,
    /// Input bias.
    pub b_ih: usize,
    /// Recurrent bias.
    pub b_hh: usize,
    /// Initial hidden state.
    pub h0: usize,
    /// Output.
    pub dst: usize,
    /// Batch.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// Input features.
    pub input_size: u32,
    /// Hidden size.
    pub hidden: u32,
    /// Stacked layers.
    pub num_layers: u32,
    /// Both directions.
    pub bidirectional: bool,
    /// Append the final h row.
    pub carry: bool,
}

recurrent_cell!(Gru, [x, w_ih, w_hh, b_ih, b_hh, h0, dst; 7]);

impl ThunkOp for Gru {
    const NAME: &'static str = "gru";
    fn io(&self) -> ThunkIo {
        self.dims().io(
            (3, 1),
            [self.x, self.w_ih, self.w_hh],
            &[self.b_ih, self.b_hh],
            &[self.h0],
            self.dst,
        )
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.dims().fmt(f, self.x, self.dst)
    }
}

/// Elman RNN (tanh, or ReLU with `relu`); layout in the module docs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rnn {
    /// Input `[batch, seq, input_size]`.
    pub x: usize,
    /// Input weights.
    pub w_ih: usize,
    /// Recurrent weights.
    pub w_hh: usize,
    /// Combined bias.
    pub bias: usize,
    /// Initial hidden state.
    pub h0: usize,
    /// Output.
    pub dst: usize,
    /// Batch.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// Input features.
    pub input_size: u32,
    /// Hidden size.
    pub hidden: u32,
    /// Stacked layers.
    pub num_layers: u32,
    /// Both directions.
    pub bidirectional: bool,
    /// Append the final h row.
    pub carry: bool,
    /// ReLU nonlinearity (else tanh).
    pub relu: bool,
}

recurrent_cell!(Rnn, [x, w_ih, w_hh, bias, h0, dst; 6], relu: false);

impl ThunkOp for Rnn {
    const NAME: &'static str = "rnn";
    fn io(&self) -> ThunkIo {
        self.dims().io(
            (1, 1),
            [self.x, self.w_ih, self.w_hh],
            &[self.bias],
            &[self.h0],
            self.dst,
        )
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.dims().fmt(f, self.x, self.dst)?;
        if self.relu {
            f.write_str(" relu")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lstm_two_layer_bidir() {
        // in=3, H=2, L=2, dirs=2, gates 4: w_ih [4, 8, max(3, 4)]
        let z = recurrent_sizes(4, 5, 7, 3, 2, 2, true, true, 2);
        assert_eq!(z.in_w, 4);
        assert_eq!(z.w_ih, 4 * 8 * 4);
        assert_eq!(z.w_hh, 2 * 2 * 8 * 2);
        assert_eq!(z.bias, 2 * 2 * 8);
        assert_eq!(z.state, 2 * 2 * 5 * 2);
        // carry: 2 layers × (h, c)
        assert_eq!(z.rows, 7 + 4);
        assert_eq!(z.out, 5 * 11 * 4);
        // one layer: in_w is the input size even when smaller than dirs·H
        let one = recurrent_sizes(3, 1, 2, 3, 4, 1, true, true, 1);
        assert_eq!((one.in_w, one.w_ih, one.rows), (3, 2 * 12 * 3, 3));
        let none = recurrent_sizes(4, 5, 7, 3, 2, 0, false, false, 2);
        assert_eq!((none.w_ih, none.w_hh), (0, 0));
    }
}
