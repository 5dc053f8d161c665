//! ssm.metal: Mamba selective scan and Mamba-2 SSD (f32), with and
//! without an initial / final state, against f64 references of the
//! recurrences (`h ← exp(Δ·A) ⊙ h + Δ·x·B`, `y = h·C`; Mamba-2 with a
//! scalar decay per head) on odd sizes: batch 2, seq 1 / 7 / 33 / 70,
//! hidden 13, 3 heads of head_dim 5, n 5 / 16 / 64 / 128. Δ > 0 and A < 0
//! as in the models (decaying state).
//!
//! Mamba-2's chunked SSD kernel (`mamba2_chunked_f32`) on seq 1 / 15 / 64 /
//! 65 / 70 / 130 (below the lowering's threshold, one chunk exactly, one
//! past it, past two), 1 / 3 / 5 heads, head_dim 5 / 7 / 70 (two
//! threadgroups of rows), n 5 / 16 / 33 / 128, with and without a state,
//! against the same reference and against the recurrent kernel.
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

/// f64 reference of the Mamba-2 scan: (y, final state; the initial state
/// when `has_state`, else zero).
fn mamba2_reference(o: &Ops, d: M2Dims, has_state: bool) -> (Vec<f64>, Vec<f64>) {
    let (b, s, heads, p, n) = d;
    let width = heads * p;
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
    (want_y, want_st)
}

/// Mamba-2 dims: (batch, seq, heads, head_dim, n).
type M2Dims = (usize, usize, usize, usize, usize);

/// Simdgroups (`RLX_SSDC_SG`) and rows per simdgroup (`RLX_SSDC_RPS`) of
/// `mamba2_chunked_f32`, as the lowering sizes it.
const SSDC_SG: u32 = 8;
const SSDC_RPS: u32 = 8;

/// Runs `mamba2_f32` or `mamba2_chunked_f32` with the lowering's grid.
fn run_mamba2(chunked: bool, o: &Ops, d: M2Dims, has_state: bool) -> (Vec<f32>, Vec<f32>) {
    let (b, s, heads, p, n) = d;
    let args = Mamba2Args {
        batch: b as u32,
        seq: s as u32,
        heads: heads as u32,
        head_dim: p as u32,
        n: n as u32,
        has_state: has_state as u32,
    };
    let (name, grid) = if chunked {
        let sg = (p as u32).min(SSDC_SG);
        let grid = Grid {
            groups: [(p as u32).div_ceil(sg * SSDC_RPS), heads as u32, b as u32],
            threads: [32 * sg, 1, 1],
        };
        ("mamba2_chunked_f32", grid)
    } else {
        let grid = Grid {
            groups: [(p as u32).div_ceil(ROWS), heads as u32, b as u32],
            threads: [32 * ROWS, 1, 1],
        };
        ("mamba2_f32", grid)
    };
    run(&lib(Family::Ssm), name, args.as_bytes(), o, grid)
}

/// Checks one Mamba-2 form on `cases` (with and without a state) against
/// the f64 reference.
fn check_mamba2(chunked: bool, cases: &[M2Dims], seed: u64, tol: (f64, f64)) {
    for (ci, &d) in cases.iter().enumerate() {
        let (b, s, heads, p, n) = d;
        for has_state in [false, true] {
            let o = ops(seed + ci as u64, b, s, heads * p, heads, heads, n);
            let (y, st) = run_mamba2(chunked, &o, d, has_state);
            let (want_y, want_st) = mamba2_reference(&o, d, has_state);
            let what = format!(
                "mamba2 chunked={chunked} b={b} s={s} heads={heads} p={p} n={n} state={has_state}"
            );
            assert_close(&format!("{what} y"), &y, &want_y, tol.0, tol.1);
            if has_state {
                assert_close(&format!("{what} state"), &st, &want_st, tol.0, tol.1);
            } else {
                assert_eq!(st, o.state, "{what}");
            }
        }
    }
}

#[test]
fn mamba2_matches_reference() {
    let cases: Vec<M2Dims> = CASES.iter().map(|&(b, s, n)| (b, s, 3, 5, n)).collect();
    check_mamba2(false, &cases, 40, (ATOL, RTOL));
}

/// Chunked-form tolerance `4e-6 + 2e-5·|ref|`: the chunk sums add up to
/// 64 terms in another order than the token-by-token reference, and
/// `e^{G_t − G_r}` is formed from two f32 cumulative sums (seen: 2.4e-6
/// abs on the outputs at n = 128, 3.2e-7 on the final state; 1.4e-6
/// against the recurrent kernel).
const CHUNKED_TOL: (f64, f64) = (4e-6, 2e-5);

#[test]
fn mamba2_chunked_matches_reference() {
    // (batch, seq, heads, head_dim, n): seq 1 and 15 (below the lowering's
    // threshold, still exact), exactly one chunk, one past it, past two;
    // odd heads, head_dim 5 / 7 / 70 (70 > 64 rows: two threadgroups of
    // rows, the second partial), partial lanes (n 5 / 33), the widest state
    let cases = [
        (2usize, 1usize, 3usize, 5usize, 5usize),
        (2, 15, 3, 7, 16),
        (1, 64, 5, 5, 33),
        (2, 65, 3, 7, 5),
        (1, 130, 3, 5, 128),
        (1, 70, 1, 70, 16),
    ];
    check_mamba2(true, &cases, 60, CHUNKED_TOL);
}

#[test]
fn mamba2_chunked_agrees_with_recurrent() {
    for (ci, &d) in [
        (1usize, 130usize, 3usize, 9usize, 16usize),
        (2, 80, 5, 3, 33),
    ]
    .iter()
    .enumerate()
    {
        let (b, s, heads, p, n) = d;
        let o = ops(80 + ci as u64, b, s, heads * p, heads, heads, n);
        let (ry, rs) = run_mamba2(false, &o, d, true);
        let (cy, cs) = run_mamba2(true, &o, d, true);
        let wide = |x: &[f32]| x.iter().map(|&v| v as f64).collect::<Vec<_>>();
        let what = format!("mamba2 chunked vs recurrent b={b} s={s} heads={heads} p={p} n={n}");
        assert_close(
            &format!("{what} y"),
            &cy,
            &wide(&ry),
            CHUNKED_TOL.0,
            CHUNKED_TOL.1,
        );
        assert_close(
            &format!("{what} state"),
            &cs,
            &wide(&rs),
            CHUNKED_TOL.0,
            CHUNKED_TOL.1,
        );
    }
}
