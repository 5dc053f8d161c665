//! LSTM / GRU / Elman RNN with PyTorch semantics (gate orders i, f, g, o
//! and r, z, n; batch-first) on the packed layout documented on
//! `rlx_ir::op::Recurrent`: padded `w_ih [L·D, G·H, in_w]`, `w_hh [L·D, G·H,
//! H]`, biases `[L·D, G·H]`, `h0` / `c0 [L·D, b, H]`, output `[b, s +
//! carry rows, D·H]`.
//!
//! Per layer and direction the input projection of every time step is one
//! GEMM (`x W_ihᵀ + b`, the `gemm` crate); the recurrence then does one
//! small GEMM (`h W_hhᵀ`) and the gate update per step, over buffers
//! allocated once per call. The two directions of a layer run in parallel.

use super::sequence::{dot, gemm_f32};
use super::{check_len, invalid, numel, Result};
use rayon::prelude::*;

/// The cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cell {
    /// LSTM (4 gates; `c0` and the combined bias).
    Lstm,
    /// GRU (3 gates; `b_ih` and `b_hh`).
    Gru,
    /// Elman RNN (1 gate), tanh or ReLU.
    Rnn {
        /// ReLU instead of tanh.
        relu: bool,
    },
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
            Cell::Rnn { .. } => 1,
        }
    }
}

/// Dims of a recurrent net.
#[derive(Clone, Copy, Debug)]
pub struct RnnDims {
    /// Batch.
    pub batch: usize,
    /// Sequence length.
    pub seq: usize,
    /// Input features.
    pub input: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Stacked layers.
    pub layers: usize,
    /// Both directions.
    pub bidirectional: bool,
    /// Append the final-state rows.
    pub carry: bool,
}

/// Operands of a recurrent net (`b_hh` only for the GRU, `c0` only for the
/// LSTM; `b_ih` is the combined bias of LSTM / RNN).
pub struct RnnOperands<'a> {
    /// Input `[b, s, in]`.
    pub x: &'a [f32],
    /// Input weights, padded.
    pub w_ih: &'a [f32],
    /// Recurrent weights.
    pub w_hh: &'a [f32],
    /// Input (or combined) bias.
    pub b_ih: &'a [f32],
    /// GRU recurrent bias.
    pub b_hh: Option<&'a [f32]>,
    /// Initial hidden states.
    pub h0: &'a [f32],
    /// LSTM initial cell states.
    pub c0: Option<&'a [f32]>,
}

fn sig(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// One (layer, direction) pass: reads `inp [b, s, in_l]`, writes its `H`
/// columns of `out [b, s, D·H]` (through `put`), returns nothing; final h
/// and c land in `fin_h`, `fin_c` (`[b, H]`).
struct Pass<'a> {
    cell: Cell,
    d: RnnDims,
    in_l: usize,
    in_w: usize,
    w_ih: &'a [f32],
    w_hh: &'a [f32],
    b_ih: &'a [f32],
    b_hh: Option<&'a [f32]>,
    h0: &'a [f32],
    c0: Option<&'a [f32]>,
    reverse: bool,
}

impl Pass<'_> {
    /// Run over `inp`, writing the direction's outputs into `dir_out [b, s,
    /// H]` and the final states into `fin_h` / `fin_c`.
    fn run(&self, inp: &[f32], dir_out: &mut [f32], fin_h: &mut [f32], fin_c: &mut [f32]) {
        let RnnDims {
            batch, seq, hidden, ..
        } = self.d;
        let h = hidden;
        let gh = self.cell.gates() * h;
        let rows = batch * seq;
        // input projection for every step: xw = inp · W_ihᵀ + b_ih
        let mut xw = vec![0f32; rows * gh];
        for r in xw.chunks_exact_mut(gh) {
            r.copy_from_slice(&self.b_ih[..gh]);
        }
        gemm_f32(
            rows,
            gh,
            self.in_l,
            (inp, self.in_l, 1),
            (self.w_ih, 1, self.in_w),
            (&mut xw, gh),
            (1.0, 1.0),
        );
        let mut hs = self.h0[..batch * h].to_vec();
        let mut cs = match self.c0 {
            Some(c) => c[..batch * h].to_vec(),
            None => Vec::new(),
        };
        // hw [G·H, b]: one W_hh row against every batch entry's h
        let mut hw = vec![0f32; gh * batch];
        let par = gh * h >= super::PAR_MIN;
        for step in 0..seq {
            let t = if self.reverse { seq - 1 - step } else { step };
            let row = |(j, out): (usize, &mut [f32])| {
                let w = &self.w_hh[j * h..][..h];
                let bias = self.b_hh.map_or(0.0, |b| b[j]);
                for (bi, o) in out.iter_mut().enumerate() {
                    *o = bias + dot(w, &hs[bi * h..][..h]);
                }
            };
            if par {
                hw.par_chunks_mut(batch)
                    .enumerate()
                    .with_min_len(64)
                    .for_each(row);
            } else {
                hw.chunks_mut(batch).enumerate().for_each(row);
            }
            for bi in 0..batch {
                let xr = &xw[(bi * seq + t) * gh..][..gh];
                let hr = |q: usize| hw[q * batch + bi];
                let hv = &mut hs[bi * h..][..h];
                match self.cell {
                    Cell::Lstm => {
                        let cv = &mut cs[bi * h..][..h];
                        for j in 0..h {
                            let z = |q: usize| xr[q * h + j] + hr(q * h + j);
                            let c = sig(z(1)) * cv[j] + sig(z(0)) * z(2).tanh();
                            cv[j] = c;
                            hv[j] = sig(z(3)) * c.tanh();
                        }
                    }
                    Cell::Gru => {
                        for j in 0..h {
                            let r = sig(xr[j] + hr(j));
                            let z = sig(xr[h + j] + hr(h + j));
                            let nn = (xr[2 * h + j] + r * hr(2 * h + j)).tanh();
                            hv[j] = (1.0 - z) * nn + z * hv[j];
                        }
                    }
                    Cell::Rnn { relu } => {
                        for j in 0..h {
                            let p = xr[j] + hr(j);
                            hv[j] = if relu { p.max(0.0) } else { p.tanh() };
                        }
                    }
                }
                dir_out[(bi * seq + t) * h..][..h].copy_from_slice(hv);
            }
        }
        fin_h[..batch * h].copy_from_slice(&hs);
        if !cs.is_empty() {
            fin_c[..batch * h].copy_from_slice(&cs);
        }
    }
}

/// Run the net; `dst [b, s + carry rows, D·H]`.
pub fn recurrent(cell: Cell, o: RnnOperands<'_>, dst: &mut [f32], d: RnnDims) -> Result<()> {
    let k: &'static str = match cell {
        Cell::Lstm => "lstm",
        Cell::Gru => "gru",
        Cell::Rnn { .. } => "rnn",
    };
    let RnnDims {
        batch,
        seq,
        input,
        hidden: h,
        layers,
        bidirectional,
        carry,
    } = d;
    let dirs = if bidirectional { 2 } else { 1 };
    if layers == 0 || h == 0 {
        return Err(invalid(k, "hidden and num_layers must be >= 1"));
    }
    let gh = numel(k, &[cell.gates(), h])?;
    let slots = layers * dirs;
    let in_w = if layers == 1 {
        input
    } else {
        input.max(dirs * h)
    };
    let feat = dirs * h;
    let per_layer = if cell == Cell::Lstm { 2 } else { 1 };
    let rows = seq + if carry { per_layer * layers } else { 0 };
    check_len(k, "x", o.x.len(), numel(k, &[batch, seq, input])?)?;
    check_len(k, "w_ih", o.w_ih.len(), numel(k, &[slots, gh, in_w])?)?;
    check_len(k, "w_hh", o.w_hh.len(), numel(k, &[slots, gh, h])?)?;
    check_len(k, "b_ih", o.b_ih.len(), slots * gh)?;
    if let Some(b) = o.b_hh {
        check_len(k, "b_hh", b.len(), slots * gh)?;
    }
    let st = numel(k, &[slots, batch, h])?;
    check_len(k, "h0", o.h0.len(), st)?;
    if let Some(c) = o.c0 {
        check_len(k, "c0", c.len(), st)?;
    } else if cell == Cell::Lstm {
        return Err(invalid(k, "the LSTM needs c0"));
    }
    check_len(k, "dst", dst.len(), numel(k, &[batch, rows, feat])?)?;
    if batch == 0 {
        return Ok(());
    }
    let bs = batch * seq;
    let mut cur = vec![0f32; bs * feat];
    let mut prev = vec![0f32; bs * feat];
    let mut dir_out = vec![0f32; dirs * bs * h];
    let mut fin_h = vec![0f32; layers * dirs * batch * h];
    let mut fin_c = vec![0f32; if cell == Cell::Lstm { fin_h.len() } else { 0 }];
    for l in 0..layers {
        let (inp, in_l): (&[f32], usize) = if l == 0 {
            (o.x, input)
        } else {
            std::mem::swap(&mut prev, &mut cur);
            (&prev, feat)
        };
        let pass = |dr: usize| Pass {
            cell,
            d,
            in_l,
            in_w,
            w_ih: &o.w_ih[(l * dirs + dr) * gh * in_w..][..gh * in_w],
            w_hh: &o.w_hh[(l * dirs + dr) * gh * h..][..gh * h],
            b_ih: &o.b_ih[(l * dirs + dr) * gh..][..gh],
            b_hh: o.b_hh.map(|b| &b[(l * dirs + dr) * gh..][..gh]),
            h0: &o.h0[(l * dirs + dr) * batch * h..][..batch * h],
            c0: o.c0.map(|c| &c[(l * dirs + dr) * batch * h..][..batch * h]),
            reverse: dr == 1,
        };
        let fh = &mut fin_h[l * dirs * batch * h..][..dirs * batch * h];
        let fc: &mut [f32] = if fin_c.is_empty() {
            &mut []
        } else {
            &mut fin_c[l * dirs * batch * h..][..dirs * batch * h]
        };
        if dirs == 2 {
            let (o0, o1) = dir_out.split_at_mut(bs * h);
            let (h0s, h1s) = fh.split_at_mut(batch * h);
            let (c0s, c1s) = fc.split_at_mut(fc.len() / 2);
            let (p0, p1) = (pass(0), pass(1));
            rayon::join(|| p0.run(inp, o0, h0s, c0s), || p1.run(inp, o1, h1s, c1s));
        } else {
            pass(0).run(inp, &mut dir_out, fh, fc);
        }
        // interleave the directions: cur[b, t, dr·H + j]
        for dr in 0..dirs {
            for r in 0..bs {
                cur[r * feat + dr * h..][..h].copy_from_slice(&dir_out[(dr * bs + r) * h..][..h]);
            }
        }
    }
    // output rows, then the carry rows
    for bi in 0..batch {
        let base = bi * rows * feat;
        dst[base..base + seq * feat].copy_from_slice(&cur[bi * seq * feat..][..seq * feat]);
        if !carry {
            continue;
        }
        let fins: [&[f32]; 2] = [&fin_h, &fin_c];
        for (which, fin) in fins.iter().enumerate().take(per_layer) {
            for l in 0..layers {
                let row = base + (seq + which * layers + l) * feat;
                for dr in 0..dirs {
                    let src = &fin[((l * dirs + dr) * batch + bi) * h..][..h];
                    dst[row + dr * h..][..h].copy_from_slice(src);
                }
            }
        }
    }
    Ok(())
}
