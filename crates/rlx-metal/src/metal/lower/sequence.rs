//! Recurrences → `gdn.metal`, `ssm.metal`, `recurrent.metal`.
//!
//! What stays on the host (`None`):
//! * gated DeltaNet, selective scan and Mamba-2 with a state wider than
//!   128 (the kernels keep a state row in 4 registers per lane);
//! * LSTM / GRU / RNN with `hidden > 1024` (threadgroup memory) or with
//!   several layers *and* two directions (the kernel runs stacked layers in
//!   place in `dst`, which only a single direction allows: the backward
//!   pass would read rows the forward pass already overwrote);
//! * any of them whose output overlaps an input (other simdgroups /
//!   threads still read step `t`'s inputs while one writes its output);
//!   a recurrent state updated in place is the one overlap they handle.
//!
//! Gated DeltaNet runs in the host's two forms: from `seq ≥`
//! [`CHUNKED_FROM`] tokens (prefill) the chunked WY form
//! (`gated_delta_net_chunked_*`, chunks of 64 tokens), below it (decode,
//! short runs) the token-by-token `gated_delta_net_*`; Mamba-2 likewise
//! (`mamba2_chunked_f32`, the chunked SSD form, vs `mamba2_f32`).
//!
//! Everything else runs natively: one layer in one or two directions,
//! stacked unidirectional layers (one dispatch: the layers loop inside the
//! threadgroup), the carry rows (`L` rows of final h, then the LSTM's `L`
//! rows of final c), the SSM scans with or without a recurrent state.

use super::{aliased, kernel, row_threads, suffix, Lowered};
use crate::host::kernels::sequence::CHUNKED_FROM;
use crate::metal::args::{GdnArgs, KernelArgs, Mamba2Args, RnnArgs, SsmArgs};
use crate::metal::kernels::Family;
use crate::metal::plan::{BufferBinding, Dispatch};
use crate::thunk::sequence::recurrent_sizes;
use crate::thunk::{HalfFlag, Thunk};

/// State rows per threadgroup of `gdn.metal` / `ssm.metal`
/// (`RLX_GDN_ROWS`, `RLX_SSM_ROWS`).
const SCAN_ROWS: u32 = 4;

/// Most simdgroups per threadgroup of `gated_delta_net_chunked`
/// (`RLX_GDNC_SG`; each owns up to 16 state rows).
const GDN_CHUNKED_SG: u32 = 8;

/// Most simdgroups per threadgroup of `mamba2_chunked_f32` (`RLX_SSDC_SG`).
const SSD_CHUNKED_SG: u32 = 8;

/// State rows per simdgroup of `mamba2_chunked_f32` (`RLX_SSDC_RPS`).
const SSD_CHUNKED_RPS: u32 = 8;

/// Widest state row the scan kernels hold (`32 · RLX_*_COLS`).
pub const MAX_SCAN_STATE: u32 = 128;

/// Largest hidden size of `recurrent.metal` (`RLX_RNN_MAXH`).
pub const MAX_RNN_HIDDEN: u32 = 1024;

/// Most threads per threadgroup of `recurrent.metal`.
const RNN_THREADS: u32 = 256;

/// A dispatch of `function` in `family` with threadgroups of
/// `SCAN_ROWS` simdgroups (the scans) or `threads` threads.
fn dispatch(
    i: usize,
    family: Family,
    function: String,
    args: &impl KernelArgs,
    offs: &[usize],
    grid: [u32; 3],
    threads: u32,
) -> Lowered {
    Lowered::Dispatch(Dispatch {
        thunk: i,
        kernel: kernel(family, function),
        args: args.as_bytes().to_vec(),
        bindings: offs.iter().map(|&o| BufferBinding::of(o)).collect(),
        grid,
        threadgroup: [threads, 1, 1],
        threadgroup_memory: Vec::new(),
    })
}

/// True when a read overlaps a write, other than the in-place update of
/// the state at `state` (same range read and written).
fn aliased_except(t: &Thunk, state: Option<usize>) -> bool {
    let io = t.io();
    io.reads.iter().any(|r| {
        io.writes.iter().any(|w| {
            let update = Some(r.offset) == state && r.offset == w.offset && r.len == w.len;
            r.overlaps(w) && !update
        })
    })
}

/// The kernels of the recurrences (see the module docs for what stays on
/// the host).
pub(super) fn lower(i: usize, t: &Thunk) -> Option<Lowered> {
    match t {
        Thunk::GatedDeltaNet(_) | Thunk::SelectiveScan(_) | Thunk::Mamba2(_) => scan(i, t),
        Thunk::Lstm(_) | Thunk::Gru(_) | Thunk::Rnn(_) => recurrent(i, t),
        _ => None,
    }
}

/// Gated DeltaNet, selective scan, Mamba-2.
fn scan(i: usize, t: &Thunk) -> Option<Lowered> {
    if t.io().writes.is_empty() {
        return Some(Lowered::Skip);
    }
    let threads = 32 * SCAN_ROWS;
    match t {
        Thunk::GatedDeltaNet(g) => {
            if g.state_size > MAX_SCAN_STATE || aliased_except(t, Some(g.state)) {
                return None;
            }
            let args = GdnArgs {
                batch: g.batch,
                seq: g.seq,
                heads: g.heads,
                n: g.state_size,
            };
            let dt = if g.f16 { HalfFlag::F16 } else { HalfFlag::F32 };
            let offs = [g.q, g.k, g.v, g.g, g.beta, g.state, g.dst];
            // prefill: the chunked form from the host's threshold, one
            // threadgroup per (batch, head); decode / short runs: recurrent
            if g.seq as usize >= CHUNKED_FROM {
                let grid = [1, g.heads, g.batch];
                let threads = 32 * g.state_size.min(GDN_CHUNKED_SG);
                let f = format!("gated_delta_net_chunked_{}", suffix(dt));
                return Some(dispatch(i, Family::Gdn, f, &args, &offs, grid, threads));
            }
            let grid = [g.state_size.div_ceil(SCAN_ROWS), g.heads, g.batch];
            let f = format!("gated_delta_net_{}", suffix(dt));
            Some(dispatch(i, Family::Gdn, f, &args, &offs, grid, threads))
        }
        Thunk::SelectiveScan(s) => {
            if s.state_size > MAX_SCAN_STATE || aliased_except(t, s.state) {
                return None;
            }
            let args = SsmArgs {
                batch: s.batch,
                seq: s.seq,
                hidden: s.hidden,
                n: s.state_size,
                has_state: s.state.is_some() as u32,
            };
            // without a state the kernel never touches binding 6
            let st = s.state.unwrap_or(s.dst);
            let offs = [s.x, s.delta, s.a, s.b, s.c, st, s.dst];
            let grid = [s.hidden.div_ceil(SCAN_ROWS), s.batch, 1];
            let f = "selective_scan_f32".to_string();
            Some(dispatch(i, Family::Ssm, f, &args, &offs, grid, threads))
        }
        Thunk::Mamba2(m) => {
            if m.state_size > MAX_SCAN_STATE || aliased_except(t, m.state) {
                return None;
            }
            let args = Mamba2Args {
                batch: m.batch,
                seq: m.seq,
                heads: m.heads,
                head_dim: m.head_dim,
                n: m.state_size,
                has_state: m.state.is_some() as u32,
            };
            let st = m.state.unwrap_or(m.dst);
            let offs = [m.x, m.dt, m.a, m.b, m.c, st, m.dst];
            // prefill: the chunked SSD form from the host's threshold,
            // min(p, 8) simdgroups of 8 state rows per threadgroup
            if m.seq as usize >= CHUNKED_FROM {
                let sg = m.head_dim.clamp(1, SSD_CHUNKED_SG);
                let grid = [m.head_dim.div_ceil(sg * SSD_CHUNKED_RPS), m.heads, m.batch];
                let f = "mamba2_chunked_f32".to_string();
                return Some(dispatch(i, Family::Ssm, f, &args, &offs, grid, 32 * sg));
            }
            let grid = [m.head_dim.div_ceil(SCAN_ROWS), m.heads, m.batch];
            let f = "mamba2_f32".to_string();
            Some(dispatch(i, Family::Ssm, f, &args, &offs, grid, threads))
        }
        _ => None,
    }
}

/// The fields every recurrent cell shares, with its gate count, final-state
/// rows per layer and function name.
struct Cell {
    batch: u32,
    seq: u32,
    input_size: u32,
    hidden: u32,
    layers: u32,
    bidirectional: bool,
    carry: bool,
    relu: bool,
    gates: usize,
    rows_per_layer: usize,
    function: &'static str,
}

/// A [`Cell`] from a thunk with the shared recurrent fields.
macro_rules! cell {
    ($t:expr, $gates:expr, $rows:expr, $relu:expr, $f:expr) => {
        Cell {
            batch: $t.batch,
            seq: $t.seq,
            input_size: $t.input_size,
            hidden: $t.hidden,
            layers: $t.num_layers,
            bidirectional: $t.bidirectional,
            carry: $t.carry,
            relu: $relu,
            gates: $gates,
            rows_per_layer: $rows,
            function: $f,
        }
    };
}

/// LSTM, GRU, RNN: one threadgroup per (batch item, direction). Bindings
/// x, w_ih, w_hh, b_ih, b_hh, h0, c0, dst (an unused operand bound to a
/// used one).
fn recurrent(i: usize, t: &Thunk) -> Option<Lowered> {
    let (c, offs) = match t {
        Thunk::Lstm(l) => (
            cell!(l, 4, 2, false, "lstm_f32"),
            [l.x, l.w_ih, l.w_hh, l.bias, l.bias, l.h0, l.c0, l.dst],
        ),
        Thunk::Gru(g) => (
            cell!(g, 3, 1, false, "gru_f32"),
            [g.x, g.w_ih, g.w_hh, g.b_ih, g.b_hh, g.h0, g.h0, g.dst],
        ),
        Thunk::Rnn(r) => (
            cell!(r, 1, 1, r.relu, "rnn_f32"),
            [r.x, r.w_ih, r.w_hh, r.bias, r.bias, r.h0, r.h0, r.dst],
        ),
        _ => return None,
    };
    if t.io().writes.is_empty() || c.layers == 0 {
        return Some(Lowered::Skip);
    }
    if c.hidden > MAX_RNN_HIDDEN || (c.layers > 1 && c.bidirectional) || aliased(t) {
        return None;
    }
    let z = recurrent_sizes(
        c.gates,
        c.batch,
        c.seq,
        c.input_size,
        c.hidden,
        c.layers,
        c.bidirectional,
        c.carry,
        c.rows_per_layer,
    );
    let dirs: u32 = if c.bidirectional { 2 } else { 1 };
    // one padded width for every slot (rlx_ir::op::Recurrent's layout)
    let in_w = u32::try_from(z.in_w).ok()?;
    let args = RnnArgs {
        batch: c.batch,
        seq: c.seq,
        input_size: c.input_size,
        hidden: c.hidden,
        layers: c.layers,
        dirs,
        ih_cols0: in_w,
        ih_cols: in_w,
        out_rows: u32::try_from(z.rows).ok()?,
        carry: c.carry as u32,
        relu: c.relu as u32,
        _pad: 0,
    };
    // ≤ 256 threads: a pipeline's thread limit can fall below 1024 with
    // this kernel's register use; threads loop over the units anyway
    let tg = row_threads(c.hidden).min(RNN_THREADS);
    let grid = [c.batch, dirs, 1];
    let f = c.function.to_string();
    Some(dispatch(i, Family::Recurrent, f, &args, &offs, grid, tg))
}
