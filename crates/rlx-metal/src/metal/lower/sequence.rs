//! Recurrences → `gdn.metal`, `ssm.metal`, `recurrent.metal`.
//!
//! What stays on the host (`None`):
//! * gated DeltaNet, selective scan and Mamba-2 with a state wider than
//!   128 (the kernels keep a state row in 4 registers per lane);
//! * LSTM / GRU / RNN with `hidden > 1024` (threadgroup memory), with
//!   several layers *and* two directions (the kernel runs stacked layers in
//!   place in `dst`, which only a single direction allows), or with several
//!   layers *and* `carry` (the thunk's `dst` holds one set of final-state
//!   rows, the kernel writes one per layer);
//! * any of them whose output overlaps an input (other simdgroups /
//!   threads still read step `t`'s inputs while one writes its output);
//!   a recurrent state updated in place is the one overlap they handle.

use super::{aliased, kernel, row_threads, suffix, Lowered};
use crate::metal::args::{GdnArgs, KernelArgs, Mamba2Args, RnnArgs, SsmArgs};
use crate::metal::kernels::Family;
use crate::metal::plan::{BufferBinding, Dispatch};
use crate::thunk::{HalfFlag, Thunk};

/// State rows per threadgroup of `gdn.metal` / `ssm.metal`
/// (`RLX_GDN_ROWS`, `RLX_SSM_ROWS`).
const SCAN_ROWS: u32 = 4;

/// Widest state row the scan kernels hold (`32 · RLX_*_COLS`).
pub const MAX_SCAN_STATE: u32 = 128;

/// Largest hidden size of `recurrent.metal` (`RLX_RNN_MAXH`).
pub const MAX_RNN_HIDDEN: u32 = 1024;

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
            let grid = [g.state_size.div_ceil(SCAN_ROWS), g.heads, g.batch];
            let f = format!("gated_delta_net_{}", suffix(dt));
            Some(dispatch(i, Family::Gdn, f, &args, &offs, grid, threads))
        }
        Thunk::SelectiveScan(s) => {
            if s.state_size > MAX_SCAN_STATE || aliased(t) {
                return None;
            }
            let args = SsmArgs {
                batch: s.batch,
                seq: s.seq,
                hidden: s.hidden,
                n: s.state_size,
                has_state: 0,
            };
            // without a state the kernel never touches binding 6
            let offs = [s.x, s.delta, s.a, s.b, s.c, s.dst, s.dst];
            let grid = [s.hidden.div_ceil(SCAN_ROWS), s.batch, 1];
            let f = "selective_scan_f32".to_string();
            Some(dispatch(i, Family::Ssm, f, &args, &offs, grid, threads))
        }
        Thunk::Mamba2(m) => {
            if m.state_size > MAX_SCAN_STATE || aliased(t) {
                return None;
            }
            let args = Mamba2Args {
                batch: m.batch,
                seq: m.seq,
                heads: m.heads,
                head_dim: m.head_dim,
                n: m.state_size,
                has_state: 0,
            };
            let offs = [m.x, m.dt, m.a, m.b, m.c, m.dst, m.dst];
            let grid = [m.head_dim.div_ceil(SCAN_ROWS), m.heads, m.batch];
            let f = "mamba2_f32".to_string();
            Some(dispatch(i, Family::Ssm, f, &args, &offs, grid, threads))
        }
        _ => None,
    }
}

/// The fields every recurrent cell shares.
struct Cell {
    batch: u32,
    seq: u32,
    input_size: u32,
    hidden: u32,
    layers: u32,
    bidirectional: bool,
    carry: bool,
    relu: bool,
    /// Final-state rows appended with `carry`.
    extra: u32,
}

/// LSTM, GRU, RNN: one threadgroup per (batch item, direction).
fn recurrent(i: usize, t: &Thunk) -> Option<Lowered> {
    let (c, function, offs) = match t {
        Thunk::Lstm(l) => (
            Cell {
                batch: l.batch,
                seq: l.seq,
                input_size: l.input_size,
                hidden: l.hidden,
                layers: l.num_layers,
                bidirectional: l.bidirectional,
                carry: l.carry,
                relu: false,
                extra: 2,
            },
            "lstm_f32",
            [l.x, l.w_ih, l.w_hh, l.bias, l.bias, l.h0, l.c0, l.dst],
        ),
        Thunk::Gru(g) => (
            Cell {
                batch: g.batch,
                seq: g.seq,
                input_size: g.input_size,
                hidden: g.hidden,
                layers: g.num_layers,
                bidirectional: g.bidirectional,
                carry: g.carry,
                relu: false,
                extra: 1,
            },
            "gru_f32",
            [g.x, g.w_ih, g.w_hh, g.b_ih, g.b_hh, g.h0, g.h0, g.dst],
        ),
        Thunk::Rnn(r) => (
            Cell {
                batch: r.batch,
                seq: r.seq,
                input_size: r.input_size,
                hidden: r.hidden,
                layers: r.num_layers,
                bidirectional: r.bidirectional,
                carry: r.carry,
                relu: r.relu,
                extra: 1,
            },
            "rnn_f32",
            [r.x, r.w_ih, r.w_hh, r.bias, r.bias, r.h0, r.h0, r.dst],
        ),
        _ => return None,
    };
    if t.io().writes.is_empty() || c.layers == 0 {
        return Some(Lowered::Skip);
    }
    if c.hidden > MAX_RNN_HIDDEN || (c.layers > 1 && (c.bidirectional || c.carry)) || aliased(t) {
        return None;
    }
    let dirs: u32 = if c.bidirectional { 2 } else { 1 };
    let out_rows = c.seq.checked_add(if c.carry { c.extra } else { 0 })?;
    let args = RnnArgs {
        batch: c.batch,
        seq: c.seq,
        input_size: c.input_size,
        hidden: c.hidden,
        layers: c.layers,
        dirs,
        ih_cols0: c.input_size,
        ih_cols: dirs * c.hidden,
        out_rows,
        carry: c.carry as u32,
        relu: c.relu as u32,
        _pad: 0,
    };
    let grid = [c.batch, dirs, 1];
    let f = function.to_string();
    let threads = row_threads(c.hidden);
    Some(dispatch(
        i,
        Family::Recurrent,
        f,
        &args,
        &offs,
        grid,
        threads,
    ))
}
