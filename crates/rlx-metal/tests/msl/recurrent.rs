//! recurrent.metal: LSTM, GRU and Elman RNN (tanh and ReLU), f32,
//! against an f64 reference written from the torch.nn formulas (gate
//! orders i, f, g, o and r, z, n; GRU's `b_hn` inside `r ⊙ (·)`), on odd
//! sizes: batch 2, seq 1 / 7 / 33 / 70, input 5 / 7, hidden 13 / 40 (40
//! units on 32 threads: two per thread), one and two directions, stacked
//! layers, with and without the carry rows. Weights packed flat, layer-major
//! then direction (`ih_cols0 = input_size`, `ih_cols = dirs·hidden`).
//!
//! Tolerance `1e-6 + 1e-5·|ref|`: f32 dot products of ≤ 53 terms per gate,
//! through saturating nonlinearities, vs f64 (seen: 1.6e-7 abs).

use super::common::{assert_close, lib, uniform, Dt};
use msl_sim::Grid;
use rlx_metal::metal::args::{KernelArgs, RnnArgs};
use rlx_metal::metal::kernels::Family;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cell {
    Lstm,
    Gru,
    Rnn { relu: bool },
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
            Cell::Rnn { .. } => 1,
        }
    }
    fn kernel(self) -> &'static str {
        match self {
            Cell::Lstm => "lstm_f32",
            Cell::Gru => "gru_f32",
            Cell::Rnn { .. } => "rnn_f32",
        }
    }
}

/// One net: sizes and packed f32 operands.
struct Net {
    cell: Cell,
    b: usize,
    s: usize,
    nin: usize,
    h: usize,
    layers: usize,
    dirs: usize,
    carry: bool,
    x: Vec<f32>,
    w_ih: Vec<f32>,
    w_hh: Vec<f32>,
    b_ih: Vec<f32>,
    b_hh: Vec<f32>,
    h0: Vec<f32>,
    c0: Vec<f32>,
}

impl Net {
    fn extra(&self) -> usize {
        match (self.carry, self.cell) {
            (false, _) => 0,
            (true, Cell::Lstm) => 2 * self.layers,
            (true, _) => self.layers,
        }
    }
    fn in_w(&self, l: usize) -> usize {
        if l == 0 {
            self.nin
        } else {
            self.dirs * self.h
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn net(
    seed: u64,
    cell: Cell,
    b: usize,
    s: usize,
    nin: usize,
    h: usize,
    layers: usize,
    dirs: usize,
    carry: bool,
) -> Net {
    let gh = cell.gates() * h;
    let ld = layers * dirs;
    let n_ih = dirs * gh * nin + (layers - 1) * dirs * gh * dirs * h;
    let scale = 1.0 / (h as f32).sqrt();
    Net {
        cell,
        b,
        s,
        nin,
        h,
        layers,
        dirs,
        carry,
        x: uniform(seed, b * s * nin, -1.0, 1.0),
        w_ih: uniform(seed + 1, n_ih, -scale, scale),
        w_hh: uniform(seed + 2, ld * gh * h, -scale, scale),
        b_ih: uniform(seed + 3, ld * gh, -scale, scale),
        b_hh: uniform(seed + 4, ld * gh, -scale, scale),
        h0: uniform(seed + 5, ld * b * h, -0.5, 0.5),
        c0: uniform(seed + 6, ld * b * h, -0.5, 0.5),
    }
}

fn sig(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

/// f64 reference: dst `[b, s + extra, dirs·h]`.
fn reference(n: &Net) -> Vec<f64> {
    let (b, s, h, dirs) = (n.b, n.s, n.h, n.dirs);
    let (g, ow) = (n.cell.gates(), dirs * h);
    let rows = s + n.extra();
    let mut out = vec![0.0f64; b * rows * ow];
    let mut inp: Vec<f64> = n.x.iter().map(|&v| v as f64).collect();
    let mut ih_off = 0;
    for l in 0..n.layers {
        let iw = n.in_w(l);
        let mut next = vec![0.0f64; b * s * ow];
        for d in 0..dirs {
            let ld = l * dirs + d;
            let wi = &n.w_ih[ih_off..ih_off + g * h * iw];
            ih_off += g * h * iw;
            let wh = &n.w_hh[ld * g * h * h..(ld + 1) * g * h * h];
            let (bi, bh) = (&n.b_ih[ld * g * h..], &n.b_hh[ld * g * h..]);
            for bb in 0..b {
                let s0 = (ld * b + bb) * h;
                let mut hs: Vec<f64> = n.h0[s0..s0 + h].iter().map(|&v| v as f64).collect();
                let mut cs: Vec<f64> = n.c0[s0..s0 + h].iter().map(|&v| v as f64).collect();
                for step in 0..s {
                    let t = if d == 1 { s - 1 - step } else { step };
                    let xt = &inp[(bb * s + t) * iw..(bb * s + t + 1) * iw];
                    let pre = |r: usize| -> (f64, f64) {
                        let gx: f64 = bi[r] as f64
                            + (0..iw).map(|e| wi[r * iw + e] as f64 * xt[e]).sum::<f64>();
                        let gr: f64 = (0..h).map(|e| wh[r * h + e] as f64 * hs[e]).sum();
                        (gx, gr)
                    };
                    let mut hn = vec![0.0; h];
                    for j in 0..h {
                        hn[j] = match n.cell {
                            Cell::Lstm => {
                                let z = |k: usize| {
                                    let (a, c) = pre(k * h + j);
                                    a + c
                                };
                                let c = sig(z(1)) * cs[j] + sig(z(0)) * z(2).tanh();
                                cs[j] = c;
                                sig(z(3)) * c.tanh()
                            }
                            Cell::Gru => {
                                let (xr, hr) = pre(j);
                                let (xz, hz) = pre(h + j);
                                let (xn, hn_) = pre(2 * h + j);
                                let (r, z) =
                                    (sig(xr + hr + bh[j] as f64), sig(xz + hz + bh[h + j] as f64));
                                let nn = (xn + r * (hn_ + bh[2 * h + j] as f64)).tanh();
                                (1.0 - z) * nn + z * hs[j]
                            }
                            Cell::Rnn { relu } => {
                                let (a, c) = pre(j);
                                if relu {
                                    (a + c).max(0.0)
                                } else {
                                    (a + c).tanh()
                                }
                            }
                        };
                    }
                    hs = hn;
                    next[(bb * s + t) * ow + d * h..][..h].copy_from_slice(&hs);
                }
                if n.carry {
                    out[(bb * rows + s + l) * ow + d * h..][..h].copy_from_slice(&hs);
                    if n.cell == Cell::Lstm {
                        let r = s + n.layers + l;
                        out[(bb * rows + r) * ow + d * h..][..h].copy_from_slice(&cs);
                    }
                }
            }
        }
        inp = next;
    }
    for bb in 0..b {
        out[bb * rows * ow..(bb * rows + s) * ow]
            .copy_from_slice(&inp[bb * s * ow..(bb + 1) * s * ow]);
    }
    out
}

fn run(n: &Net, threads: u32) -> Vec<f32> {
    let lib = lib(Family::Recurrent);
    let ow = n.dirs * n.h;
    let rows = n.s + n.extra();
    let args = RnnArgs {
        batch: n.b as u32,
        seq: n.s as u32,
        input_size: n.nin as u32,
        hidden: n.h as u32,
        layers: n.layers as u32,
        dirs: n.dirs as u32,
        ih_cols0: n.nin as u32,
        ih_cols: ow as u32,
        out_rows: rows as u32,
        carry: n.carry as u32,
        relu: matches!(n.cell, Cell::Rnn { relu: true }) as u32,
        _pad: 0,
    };
    let enc = |v: &[f32]| Dt::F32.encode(v);
    let mut dst = vec![0u8; 4 * n.b * rows * ow];
    lib.dispatch(
        n.cell.kernel(),
        args.as_bytes(),
        &mut [
            &mut enc(&n.x),
            &mut enc(&n.w_ih),
            &mut enc(&n.w_hh),
            &mut enc(&n.b_ih),
            &mut enc(&n.b_hh),
            &mut enc(&n.h0),
            &mut enc(&n.c0),
            &mut dst,
        ],
        Grid {
            groups: [n.b as u32, n.dirs as u32, 1],
            threads: [threads, 1, 1],
        },
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    Dt::F32.decode(&dst)
}

#[test]
fn lstm_gru_rnn_match_reference() {
    let cells = [
        Cell::Lstm,
        Cell::Gru,
        Cell::Rnn { relu: false },
        Cell::Rnn { relu: true },
    ];
    // (batch, seq, input, hidden, layers, dirs, carry, threads)
    let cases = [
        (
            2usize, 1usize, 5usize, 13usize, 1usize, 1usize, false, 32u32,
        ),
        (2, 7, 5, 13, 1, 1, true, 32),
        (2, 33, 7, 13, 1, 2, true, 64),
        (2, 70, 5, 13, 1, 1, true, 32),
        (2, 7, 5, 13, 3, 1, true, 32),
        (1, 9, 3, 40, 2, 1, false, 32),
    ];
    for (ci, cell) in cells.into_iter().enumerate() {
        for (k, &(b, s, nin, h, l, dirs, carry, tpg)) in cases.iter().enumerate() {
            let n = net(
                100 * ci as u64 + k as u64,
                cell,
                b,
                s,
                nin,
                h,
                l,
                dirs,
                carry,
            );
            let what =
                format!("{cell:?} b={b} s={s} in={nin} h={h} L={l} dirs={dirs} carry={carry}");
            assert_close(&what, &run(&n, tpg), &reference(&n), 1e-6, 1e-5);
        }
    }
}
