//! Recurrences and scans: gated DeltaNet, Mamba selective scan, Mamba-2
//! SSD, LSTM, GRU and Elman RNN.
//!
//! # Recurrent weight layout (decided here)
//!
//! With `dirs = 2` if bidirectional else 1, `G` gates (LSTM 4, GRU 3,
//! RNN 1) and `L = num_layers`, every layer and direction is packed
//! back to back, PyTorch style:
//!
//! * `w_ih`: layer 0 `[dirs, G·hidden, input_size]`, later layers
//!   `[dirs, G·hidden, dirs·hidden]`;
//! * `w_hh`: `[L, dirs, G·hidden, hidden]`;
//! * each bias: `[L, dirs, G·hidden]` (LSTM / RNN one combined bias; GRU
//!   `b_ih` and `b_hh`);
//! * `h0` / `c0`: `[L, dirs, batch, hidden]`;
//! * output `[batch, seq + extra, dirs·hidden]`, `extra` = the final-state
//!   rows appended with `carry` (LSTM 2: h and c; GRU / RNN 1: h).
//!
//! All f32 except GatedDeltaNet with `f16`.

use super::io::{bytes, nbytes, ThunkIo, F32};
use super::offsets::Off;
use super::ThunkOp;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Element counts of a recurrent cell's operands (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecurrentSizes {
    /// `w_ih` elements.
    pub w_ih: usize,
    /// `w_hh` elements.
    pub w_hh: usize,
    /// Elements of one bias vector set.
    pub bias: usize,
    /// `h0` (and `c0`) elements.
    pub state: usize,
    /// Output elements.
    pub out: usize,
}

/// Sizes for a recurrence with `gates` gates; `extra_rows` final-state rows
/// are appended to the output when `carry` is set.
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
    extra_rows: usize,
) -> RecurrentSizes {
    let dirs: usize = if bidirectional { 2 } else { 1 };
    let (h, l, b) = (hidden as usize, num_layers as usize, batch as usize);
    let gh = gates.saturating_mul(h);
    let layer_in = if l == 0 {
        0
    } else {
        (input_size as usize).saturating_add((l - 1).saturating_mul(dirs.saturating_mul(h)))
    };
    let rows = (seq as usize).saturating_add(if carry { extra_rows } else { 0 });
    RecurrentSizes {
        w_ih: dirs.saturating_mul(gh).saturating_mul(layer_in),
        w_hh: l.saturating_mul(dirs).saturating_mul(gh).saturating_mul(h),
        bias: l.saturating_mul(dirs).saturating_mul(gh),
        state: l.saturating_mul(dirs).saturating_mul(b).saturating_mul(h),
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
        let es = if self.f16 { 2 } else { F32 };
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
/// `[hidden, state_size]`, b / c `[batch, seq, state_size]`.
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
        ThunkIo::new()
            .read(self.x, x)
            .read(self.delta, x)
            .read(self.a, bytes(&[h, n], F32))
            .read(self.b, bc)
            .read(self.c, bc)
            .write(self.dst, x)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "b={} s={} hidden={} n={} x={} dst={}",
            self.batch,
            self.seq,
            self.hidden,
            self.state_size,
            Off(self.x),
            Off(self.dst)
        )
    }
}

/// Mamba-2 SSD scan: x / dst `[batch, seq, heads · head_dim]`, dt
/// `[batch, seq, heads]`, a `[heads]`, b / c `[batch, seq, state_size]`.
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
        ThunkIo::new()
            .read(self.x, x)
            .read(self.dt, bytes(&[b, s, h], F32))
            .read(self.a, bytes(&[h], F32))
            .read(self.b, bc)
            .read(self.c, bc)
            .write(self.dst, x)
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "b={} s={} heads={} p={} n={} x={} dst={}",
            self.batch,
            self.seq,
            self.heads,
            self.head_dim,
            self.state_size,
            Off(self.x),
            Off(self.dst)
        )
    }
}

/// Shared description of the recurrent cells.
#[allow(clippy::too_many_arguments)]
fn fmt_rnn(
    f: &mut fmt::Formatter<'_>,
    b: u32,
    s: u32,
    i: u32,
    h: u32,
    l: u32,
    bi: bool,
    carry: bool,
    x: usize,
    dst: usize,
) -> fmt::Result {
    let bi = if bi { " bidir" } else { "" };
    let carry = if carry { " carry" } else { "" };
    write!(
        f,
        "b={b} s={s} in={i} hidden={h} layers={l}{bi}{carry} x={} dst={}",
        Off(x),
        Off(dst)
    )
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

impl ThunkOp for Lstm {
    const NAME: &'static str = "lstm";
    fn io(&self) -> ThunkIo {
        let z = recurrent_sizes(
            4,
            self.batch,
            self.seq,
            self.input_size,
            self.hidden,
            self.num_layers,
            self.bidirectional,
            self.carry,
            2,
        );
        ThunkIo::new()
            .read(self.x, bytes(&[self.batch, self.seq, self.input_size], F32))
            .read(self.w_ih, nbytes(z.w_ih, F32))
            .read(self.w_hh, nbytes(z.w_hh, F32))
            .read(self.bias, nbytes(z.bias, F32))
            .read(self.h0, nbytes(z.state, F32))
            .read(self.c0, nbytes(z.state, F32))
            .write(self.dst, nbytes(z.out, F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_rnn(
            f,
            self.batch,
            self.seq,
            self.input_size,
            self.hidden,
            self.num_layers,
            self.bidirectional,
            self.carry,
            self.x,
            self.dst,
        )
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

impl ThunkOp for Gru {
    const NAME: &'static str = "gru";
    fn io(&self) -> ThunkIo {
        let z = recurrent_sizes(
            3,
            self.batch,
            self.seq,
            self.input_size,
            self.hidden,
            self.num_layers,
            self.bidirectional,
            self.carry,
            1,
        );
        ThunkIo::new()
            .read(self.x, bytes(&[self.batch, self.seq, self.input_size], F32))
            .read(self.w_ih, nbytes(z.w_ih, F32))
            .read(self.w_hh, nbytes(z.w_hh, F32))
            .read(self.b_ih, nbytes(z.bias, F32))
            .read(self.b_hh, nbytes(z.bias, F32))
            .read(self.h0, nbytes(z.state, F32))
            .write(self.dst, nbytes(z.out, F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_rnn(
            f,
            self.batch,
            self.seq,
            self.input_size,
            self.hidden,
            self.num_layers,
            self.bidirectional,
            self.carry,
            self.x,
            self.dst,
        )
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

impl ThunkOp for Rnn {
    const NAME: &'static str = "rnn";
    fn io(&self) -> ThunkIo {
        let z = recurrent_sizes(
            1,
            self.batch,
            self.seq,
            self.input_size,
            self.hidden,
            self.num_layers,
            self.bidirectional,
            self.carry,
            1,
        );
        ThunkIo::new()
            .read(self.x, bytes(&[self.batch, self.seq, self.input_size], F32))
            .read(self.w_ih, nbytes(z.w_ih, F32))
            .read(self.w_hh, nbytes(z.w_hh, F32))
            .read(self.bias, nbytes(z.bias, F32))
            .read(self.h0, nbytes(z.state, F32))
            .write(self.dst, nbytes(z.out, F32))
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_rnn(
            f,
            self.batch,
            self.seq,
            self.input_size,
            self.hidden,
            self.num_layers,
            self.bidirectional,
            self.carry,
            self.x,
            self.dst,
        )?;
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
        // in=3, H=2, L=2, dirs=2, gates 4: w_ih = 2*8*(3 + 1*4) = 112
        let z = recurrent_sizes(4, 5, 7, 3, 2, 2, true, true, 2);
        assert_eq!(z.w_ih, 112);
        assert_eq!(z.w_hh, 2 * 2 * 8 * 2);
        assert_eq!(z.bias, 2 * 2 * 8);
        assert_eq!(z.state, 2 * 2 * 5 * 2);
        assert_eq!(z.out, 5 * 9 * 4);
        let none = recurrent_sizes(4, 5, 7, 3, 2, 0, false, false, 2);
        assert_eq!((none.w_ih, none.w_hh), (0, 0));
    }
}
