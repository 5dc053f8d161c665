//! gdn.metal: the gated DeltaNet recurrence, f32 and f16, against an f64
//! reference that follows the defining formula literally
//! (`S ← exp(g)·(S − β (S k) kᵀ) + β v kᵀ`, `o = S q`), on odd sizes:
//! batch 2, seq 1 / 7 / 33 / 70, 3 heads, n 5 / 16 / 64 / 128 (partial
//! simdgroups and partial threadgroups of rows). q and k are L2-normalised
//! per head as the models do (so the recurrence is a contraction), g < 0,
//! β in (0, 1), a random initial state.
//!
//! Tolerances (`atol + rtol·|ref|`, on the outputs and the final state):
//! f32 `1e-6 + 1e-5` (f32 row dot products vs f64 over ≤ 70 steps; seen:
//! 1e-7 abs); f16 `5e-4 + 1e-3` (inputs rounded to f16 first, the kernel
//! rounds each output and the final state once to f16: half an ulp is
//! 2^-11 relative; seen: 2.3e-4 abs on values ≤ 1).

use super::common::{assert_close, lib, uniform, Dt, DTS};
use msl_sim::Grid;
use rlx_metal::metal::args::{GdnArgs, KernelArgs};
use rlx_metal::metal::kernels::Family;

/// Rows of S per threadgroup (`RLX_GDN_ROWS` in gdn.metal).
const ROWS: u32 = 4;

fn tolerance(dt: Dt) -> (f64, f64) {
    match dt {
        Dt::F32 => (1e-6, 1e-5),
        Dt::F16 => (5e-4, 1e-3),
    }
}

/// Each length-`n` chunk scaled to unit L2 norm.
fn l2_rows(v: &mut [f32], n: usize) {
    for row in v.chunks_mut(n) {
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
        row.iter_mut().for_each(|x| *x /= norm);
    }
}

/// Operands of one case, already rounded to the element type.
struct Case {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    beta: Vec<f32>,
    state: Vec<f32>,
}

fn case(seed: u64, dt: Dt, b: usize, s: usize, h: usize, n: usize) -> Case {
    let len = b * s * h * n;
    let mut q = uniform(seed, len, -1.0, 1.0);
    let mut k = uniform(seed + 1, len, -1.0, 1.0);
    l2_rows(&mut q, n);
    l2_rows(&mut k, n);
    Case {
        q: dt.round(&q),
        k: dt.round(&k),
        v: dt.round(&uniform(seed + 2, len, -1.0, 1.0)),
        g: dt.round(&uniform(seed + 3, b * s * h, -1.0, -0.01)),
        beta: dt.round(&uniform(seed + 4, b * s * h, 0.05, 0.95)),
        state: dt.round(&uniform(seed + 5, b * h * n * n, -0.5, 0.5)),
    }
}

/// f64 reference: (outputs, final state).
fn reference(c: &Case, b: usize, s: usize, h: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut out = vec![0.0f64; b * s * h * n];
    let mut fin = vec![0.0f64; b * h * n * n];
    for bi in 0..b {
        for hi in 0..h {
            let so = (bi * h + hi) * n * n;
            let mut st: Vec<f64> = c.state[so..so + n * n].iter().map(|&x| x as f64).collect();
            for t in 0..s {
                let row = bi * s + t;
                let base = (row * h + hi) * n;
                let at = |v: &[f32], j: usize| v[base + j] as f64;
                let alpha = (c.g[row * h + hi] as f64).exp();
                let beta = c.beta[row * h + hi] as f64;
                let sk: Vec<f64> = (0..n)
                    .map(|i| (0..n).map(|j| st[i * n + j] * at(&c.k, j)).sum())
                    .collect();
                for i in 0..n {
                    for j in 0..n {
                        let kj = at(&c.k, j);
                        let old = st[i * n + j];
                        st[i * n + j] = alpha * (old - beta * sk[i] * kj) + beta * at(&c.v, i) * kj;
                    }
                }
                for i in 0..n {
                    out[base + i] = (0..n).map(|j| st[i * n + j] * at(&c.q, j)).sum();
                }
            }
            fin[so..so + n * n].copy_from_slice(&st);
        }
    }
    (out, fin)
}

#[test]
fn gated_delta_net_matches_reference() {
    let lib = lib(Family::Gdn);
    let h = 3usize;
    // (batch, seq, n)
    let cases = [
        (2usize, 1usize, 5usize),
        (2, 7, 16),
        (2, 33, 5),
        (2, 70, 16),
        (1, 33, 64),
        (2, 7, 64),
        (1, 5, 128),
    ];
    for dt in DTS {
        for (ci, &(b, s, n)) in cases.iter().enumerate() {
            let c = case(10 * ci as u64 + 1, dt, b, s, h, n);
            let args = GdnArgs {
                batch: b as u32,
                seq: s as u32,
                heads: h as u32,
                n: n as u32,
            };
            let mut state = dt.encode(&c.state);
            let mut dst = dt.encode(&vec![0.0; b * s * h * n]);
            let grid = Grid {
                groups: [(n as u32).div_ceil(ROWS), h as u32, b as u32],
                threads: [32 * ROWS, 1, 1],
            };
            lib.dispatch(
                &format!("gated_delta_net_{}", dt.suffix()),
                args.as_bytes(),
                &mut [
                    &mut dt.encode(&c.q),
                    &mut dt.encode(&c.k),
                    &mut dt.encode(&c.v),
                    &mut dt.encode(&c.g),
                    &mut dt.encode(&c.beta),
                    &mut state,
                    &mut dst,
                ],
                grid,
                &[],
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let (want_o, want_s) = reference(&c, b, s, h, n);
            let (atol, rtol) = tolerance(dt);
            let what = format!("gdn {dt:?} b={b} s={s} n={n}");
            assert_close(
                &format!("{what} out"),
                &dt.decode(&dst),
                &want_o,
                atol,
                rtol,
            );
            assert_close(
                &format!("{what} state"),
                &dt.decode(&state),
                &want_s,
                atol,
                rtol,
            );
        }
    }
}
