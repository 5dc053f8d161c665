//! rope.metal: `rope_*` against an f64 reference: NeoX and interleaved
//! pairs, full and partial rotary dims (tail copied), tables per position
//! (row mod seq) and per token, source rows wider than `hidden` (a column
//! window of a fused projection), odd row counts, a partial last
//! threadgroup.
//!
//! Tolerances: f32 `1e-6 + 1e-6·|ref|` (two products and a sum in f32);
//! f16 `1e-3 + 2^-10·|ref|` (f32 math, one rounding to f16; copied
//! tail elements must be exact).

use super::common::{assert_close, lib, uniform, Dt, DTS};
use msl_sim::Grid;
use rlx_metal::metal::args::{KernelArgs, RopeArgs};
use rlx_metal::metal::kernels::Family;

#[derive(Clone, Copy, Debug)]
struct Case {
    batch: u32,
    seq: u32,
    heads: u32,
    head_dim: u32,
    n_rot: u32,
    stride: u32,
    per_token: bool,
    interleaved: bool,
}

/// Rows `[b·s, hidden]` out of `x` (rows `stride` apart).
fn reference(c: &Case, x: &[f32], cos: &[f32], sin: &[f32]) -> Vec<f64> {
    let hidden = (c.heads * c.head_dim) as usize;
    let (d, half) = (c.head_dim as usize, (c.n_rot / 2) as usize);
    let rows = (c.batch * c.seq) as usize;
    let mut out = Vec::with_capacity(rows * hidden);
    for t in 0..rows {
        let tr = if c.per_token { t } else { t % c.seq as usize };
        let xr = &x[t * c.stride as usize..];
        for e in 0..hidden {
            let (h0, cc) = (e - e % d, e % d);
            let v = if cc >= 2 * half {
                xr[e] as f64
            } else {
                // (first, second, pair) of the element's rotation pair
                let (a, b, p, first) = if c.interleaved {
                    let p = cc / 2;
                    (h0 + 2 * p, h0 + 2 * p + 1, p, cc % 2 == 0)
                } else {
                    let p = cc % half;
                    (h0 + p, h0 + p + half, p, cc < half)
                };
                let (xa, xb) = (xr[a] as f64, xr[b] as f64);
                let (co, si) = (cos[tr * half + p] as f64, sin[tr * half + p] as f64);
                if first {
                    xa * co - xb * si
                } else {
                    xa * si + xb * co
                }
            };
            out.push(v);
        }
    }
    out
}

#[test]
fn rope_matches_reference() {
    let base = Case {
        batch: 2,
        seq: 3,
        heads: 3,
        head_dim: 10,
        n_rot: 10,
        stride: 30,
        per_token: false,
        interleaved: false,
    };
    let cases = [
        base,
        Case {
            interleaved: true,
            ..base
        },
        Case { n_rot: 6, ..base },
        Case {
            n_rot: 4,
            interleaved: true,
            ..base
        },
        Case {
            per_token: true,
            n_rot: 8,
            ..base
        },
        Case { stride: 90, ..base },
        Case {
            batch: 1,
            seq: 17,
            heads: 2,
            head_dim: 64,
            n_rot: 32,
            stride: 384,
            ..base
        },
        Case {
            batch: 3,
            seq: 1,
            heads: 4,
            head_dim: 40,
            n_rot: 40,
            stride: 160,
            per_token: true,
            interleaved: true,
        },
    ];
    for dt in DTS {
        let (atol, rtol) = match dt {
            Dt::F32 => (1e-6, 1e-6),
            Dt::F16 => (1e-3, 1.0 / 1024.0),
        };
        for (n, c) in cases.iter().enumerate() {
            let hidden = c.heads * c.head_dim;
            let rows = c.batch * c.seq;
            let src_len = ((rows - 1) * c.stride + hidden) as usize;
            let trows = if c.per_token { rows } else { c.seq };
            let tlen = (trows * c.n_rot / 2) as usize;
            let x = dt.round(&uniform(n as u64 + 1, src_len, -2.0, 2.0));
            let ang = uniform(n as u64 + 50, tlen, -3.0, 3.0);
            let cos: Vec<f32> = ang.iter().map(|a| a.cos()).collect();
            let sin: Vec<f32> = ang.iter().map(|a| a.sin()).collect();
            let len = rows * hidden;
            let args = RopeArgs {
                len,
                seq: c.seq,
                hidden,
                head_dim: c.head_dim,
                n_rot: c.n_rot,
                src_stride: c.stride,
                per_token: c.per_token as u32,
                interleaved: c.interleaved as u32,
            };
            let mut src = dt.encode(&x);
            let mut cb = Dt::F32.encode(&cos);
            let mut sb = Dt::F32.encode(&sin);
            let mut dst = dt.encode(&vec![9.0; len as usize]);
            let name = format!("rope_{}", dt.suffix());
            // 64-thread groups: the last one is partial in most cases
            lib(Family::Rope)
                .dispatch(
                    &name,
                    args.as_bytes(),
                    &mut [&mut src, &mut cb, &mut sb, &mut dst],
                    Grid::d1(len.div_ceil(64), 64),
                    &[],
                )
                .unwrap_or_else(|e| panic!("{name} {c:?}: {e}"));
            let want = reference(c, &x, &cos, &sin);
            let got = dt.decode(&dst);
            assert_close(&format!("{name} {c:?}"), &got, &want, atol, rtol);
            // the tail past n_rot is a copy
            let d = c.head_dim as usize;
            for (e, (&g, &w)) in got.iter().zip(&want).enumerate() {
                if e % d >= c.n_rot as usize {
                    assert_eq!(g as f64, w, "{name} {c:?}: copied element {e}");
                }
            }
        }
    }
}
