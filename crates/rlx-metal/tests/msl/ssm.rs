//! ssm.metal: Mamba selective scan and Mamba-2 SSD (f32), with and
//! without an initial / final state, against f64 references of the
//! recurrences (`h ← exp(Δ·A) ⊙ h + Δ·x·B`, `y = h·C`; Mamba-2 with a
//! scalar decay per head) on odd sizes: batch 2, seq 1 / 7 / 33 / 70,
//! hidden 13, 3 heads of head_dim 5, n 5 / 16 / 64 / 128. Δ > 0 and A < 0
//! as in the models (decaying state).
//!
//! Tolerance `2e-6 + 1e-5·|ref|` on outputs and final states: f32 vs f64
//! over ≤ 70 steps, sums of ≤ 128 products (seen: 8e-7 abs).

use super::common::{assert_close, lib, uniform, Dt};
use msl_sim::Grid;
use rlx_metal::metal::args::{KernelArgs, Mamba2Args, SsmArgs};
use rlx_metal::metal::kernels::Family;

/// State rows per threadgroup (`RLX_SSM_ROWS` in ssm.metal).
const ROWS: u32 = 4;
const ATOL: f64 = 2e-6;
const RTOL: f64 = 1e-5;

/// (batch, seq, n) cases shared by both scans.
const CASES: [(usize, usize, usize); 6] = [
    (2, 1, 5),
    (2, 7, 16),
    (2, 33, 5),
    (2, 70, 16),
    (1, 33, 64),
    (2, 7, 128),
];

/// Operands in f32 (B, C `[b, s, n]`; x, Δ as each scan needs).
struct Ops {
    x: Vec<f32>,
    dt: Vec<f32>,
    a: Vec<f32>,
    bm: Vec<f32>,
    cm: Vec<f32>,
    state: Vec<f32>,
}

fn ops(seed: u64, b: usize, s: usize, width: usize, dts: usize, a: usize, n: usize) -> Ops {
    Ops {
        x: uniform(seed, b * s * width, -1.0, 1.0),
        dt: uniform(seed + 1, b * s * dts, 0.01, 0.5),
        a: uniform(seed + 2, a, -2.0, -0.1),
        bm: uniform(seed + 3, b * s * n, -1.0, 1.0),
        cm: uniform(seed + 4, b * s * n, -1.0, 1.0),
        state: uniform(seed + 5, b * width * n, -0.5, 0.5),
    }
}

/// The shared f64 recurrence over `rows` state rows of width n for one
/// batch item: `decay(t, r, j)`, `u(t, r)`; returns y `[s, rows]` and
/// writes the final state into `st`.
fn scan(
    s: usize,
    rows: usize,
    n: usize,
    st: &mut [f64],
    bc: (&[f32], &[f32]),
    decay: impl Fn(usize, usize, usize) -> f64,
    u: impl Fn(usize, usize) -> f64,
) -> Vec<f64> {
    let mut y = vec![0.0; s * rows];
    for t in 0..s {
        for r in 0..rows {
            let mut acc = 0.0;
            for j in 0..n {
                let h = &mut st[r * n + j];
                *h = decay(t, r, j) * *h + u(t, r) * bc.0[t * n + j] as f64;
                acc += *h * bc.1[t * n + j] as f64;
            }
            y[t * rows + r] = acc;
        }
    }
    y
}

/// Dispatch `kernel` on `o`: (y, state after).
fn run(
    lib: &msl_sim::Library,
    kernel: &str,
    args: &[u8],
    o: &Ops,
    grid: Grid,
) -> (Vec<f32>, Vec<f32>) {
    let enc = |v: &[f32]| Dt::F32.encode(v);
    let mut state = enc(&o.state);
    let mut dst = vec![0u8; o.x.len() * 4];
    lib.dispatch(
        kernel,
        args,
        &mut [
            &mut enc(&o.x),
            &mut enc(&o.dt),
            &mut enc(&o.a),
            &mut enc(&o.bm),
            &mut enc(&o.cm),
            &mut state,
            &mut dst,
        ],
        grid,
        &[],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    (Dt::F32.decode(&dst), Dt::F32.decode(&state))
}

#[test]
fn selective_scan_matches_reference() {
    let lib = lib(Family::Ssm);
    let hid = 13usize;
    for (ci, &(b, s, n)) in CASES.iter().enumerate() {
        for has_state in [false, true] {
            let o = ops(20 + ci as u64, b, s, hid, hid, hid * n, n);
            let args = SsmArgs {
                batch: b as u32,
                seq: s as u32,
                hidden: hid as u32,
                n: n as u32,
                has_state: has_state as u32,
            };
            let grid = Grid {
                groups: [(hid as u32).div_ceil(ROWS), b as u32, 1],
                threads: [32 * ROWS, 1, 1],
            };
            let (y, st) = run(&lib, "selective_scan_f32", args.as_bytes(), &o, grid);
            let mut want_y = vec![0.0; b * s * hid];
            let mut want_st: Vec<f64> = o.state.iter().map(|&v| v as f64).collect();
            for bi in 0..b {
                let sl = &mut want_st[bi * hid * n..(bi + 1) * hid * n];
                if !has_state {
                    sl.fill(0.0);
                }
                let at = |v: &[f32], t: usize, c: usize| v[(bi * s + t) * hid + c] as f64;
                let bc = (&o.bm[bi * s * n..], &o.cm[bi * s * n..]);
                let y = scan(
                    s,
                    hid,
                    n,
                    sl,
                    bc,
                    |t, c, j| (at(&o.dt, t, c) * o.a[c * n + j] as f64).exp(),
                    |t, c| at(&o.dt, t, c) * at(&o.x, t, c),
                );
                want_y[bi * s * hid..(bi + 1) * s * hid].copy_from_slice(&y);
            }
            let what = format!("selective_scan b={b} s={s} n={n} state={has_state}");
            assert_close(&format!("{what} y"), &y, &want_y, ATOL, RTOL);
            if has_state {
                assert_close(&format!("{what} state"), &st, &want_st, ATOL, RTOL);
            } else {
                // untouched without a state
                assert_eq!(st, o.state, "{what}");
            }
        }
    }
}

#[test]
fn mamba2_matches_reference() {
    let lib = lib(Family::Ssm);
    let (heads, p) = (3usize, 5usize);
    let width = heads * p;
    for (ci, &(b, s, n)) in CASES.iter().enumerate() {
        for has_state in [false, true] {
            let o = ops(40 + ci as u64, b, s, width, heads, heads, n);
            let args = Mamba2Args {
                batch: b as u32,
                seq: s as u32,
                heads: heads as u32,
                head_dim: p as u32,
                n: n as u32,
                has_state: has_state as u32,
            };
            let grid = Grid {
                groups: [(p as u32).div_ceil(ROWS), heads as u32, b as u32],
                threads: [32 * ROWS, 1, 1],
            };
            let (y, st) = run(&lib, "mamba2_f32", args.as_bytes(), &o, grid);
            let mut want_y = vec![0.0; b * s * width];
            let mut want_st: Vec<f64> = o.state.iter().map(|&v| v as f64).collect();
            for bi in 0..b {
                // rows r = head * p + i: the state's [heads, p, n] order
                let sl = &mut want_st[bi * width * n..(bi + 1) * width * n];
                if !has_state {
                    sl.fill(0.0);
                }
                let dt = |t: usize, r: usize| o.dt[(bi * s + t) * heads + r / p] as f64;
                let bc = (&o.bm[bi * s * n..], &o.cm[bi * s * n..]);
                let y = scan(
                    s,
                    width,
                    n,
                    sl,
                    bc,
                    |t, r, _| (dt(t, r) * o.a[r / p] as f64).exp(),
                    |t, r| dt(t, r) * o.x[(bi * s + t) * width + r] as f64,
                );
                want_y[bi * s * width..(bi + 1) * s * width].copy_from_slice(&y);
            }
            let what = format!("mamba2 b={b} s={s} n={n} state={has_state}");
            assert_close(&format!("{what} y"), &y, &want_y, ATOL, RTOL);
            if has_state {
                assert_close(&format!("{what} state"), &st, &want_st, ATOL, RTOL);
            } else {
                assert_eq!(st, o.state, "{what}");
            }
        }
    }
}
