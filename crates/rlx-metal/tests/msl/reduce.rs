//! reduce.metal: every reduce op over contiguous rows and strided columns
//! (f32, f16), arg max / min with ties and NaN, inclusive / exclusive
//! cumsum and top-k (ties, NaN, k = n), on odd sizes and partial simdgroups, against f64 references.
//!
//! Tolerances: sums / means / products / cumsums are f32 accumulations
//! compared with f64: f32 `1e-6·Σ|x| + 1e-6·|ref|` (n ≤ 1000 terms of
//! rounding 2^-24 each, summed pairwise or in order); f16 adds one f16
//! rounding of the result (`2^-10·|ref|`). Max / min / arg are exact.

use super::common::{assert_close, lib, row_threads, uniform, Dt, DTS};
use msl_sim::Grid;
use rlx_metal::metal::args::{ArgReduceArgs, CumsumArgs, KernelArgs, ReduceArgs, TopKArgs};
use rlx_metal::metal::kernels::Family;

/// (outer, reduced, inner)
const SHAPES: [(u32, u32, u32); 6] = [
    (1, 1, 1),
    (3, 31, 1),
    (2, 100, 1),
    (2, 1000, 1),
    (3, 33, 5),
    (2, 7, 31),
];

fn grid(outer: u32, reduced: u32, inner: u32) -> Grid {
    if inner == 1 {
        Grid::d1(outer, row_threads(reduced))
    } else {
        Grid::d1((outer * inner).div_ceil(64), 64)
    }
}

#[test]
fn reduce_matches_reference() {
    let lib = lib(Family::Reduce);
    for dt in DTS {
        for (code, name) in ["sum", "mean", "max", "min", "prod"].iter().enumerate() {
            for (k, &(outer, reduced, inner)) in SHAPES.iter().enumerate() {
                let n = (outer * reduced * inner) as usize;
                // products stay near 1 so that they neither vanish nor overflow
                let (lo, hi) = if *name == "prod" {
                    (0.97, 1.03)
                } else {
                    (-2.0, 2.0)
                };
                let x = dt.round(&uniform(k as u64 + 3, n, lo, hi));
                let args = ReduceArgs {
                    outer,
                    reduced,
                    inner,
                    op: code as u32,
                };
                let kind = if inner == 1 { "rows" } else { "cols" };
                let kernel = format!("reduce_{kind}_{}", dt.suffix());
                let mut dst = dt.encode(&vec![0.0; (outer * inner) as usize]);
                lib.dispatch(
                    &kernel,
                    args.as_bytes(),
                    &mut [&mut dt.encode(&x), &mut dst],
                    grid(outer, reduced, inner),
                    &[],
                )
                .unwrap_or_else(|e| panic!("{kernel}: {e}"));
                let (mut want, mut mag) = (Vec::new(), Vec::new());
                for o in 0..outer as usize {
                    for i in 0..inner as usize {
                        let col: Vec<f64> = (0..reduced as usize)
                            .map(|r| x[(o * reduced as usize + r) * inner as usize + i] as f64)
                            .collect();
                        mag.push(col.iter().map(|v| v.abs()).sum::<f64>());
                        want.push(match *name {
                            "sum" => col.iter().sum(),
                            "mean" => col.iter().sum::<f64>() / reduced as f64,
                            "max" => col.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                            "min" => col.iter().cloned().fold(f64::INFINITY, f64::min),
                            _ => col.iter().product(),
                        });
                    }
                }
                let got = dt.decode(&dst);
                let r16 = if dt == Dt::F16 { 1.0 / 1024.0 } else { 0.0 };
                for (j, (&g, &w)) in got.iter().zip(&want).enumerate() {
                    let tol = 1e-6 * mag[j] + (1e-6 + r16) * w.abs() + 1e-30;
                    assert!(
                        (g as f64 - w).abs() <= tol,
                        "{kernel} {name} case {k}[{j}]: {g} vs {w}"
                    );
                }
            }
        }
    }
}

#[test]
fn max_min_propagate_nan() {
    let lib = lib(Family::Reduce);
    for (inner, kernel) in [(1u32, "reduce_rows_f32"), (3, "reduce_cols_f32")] {
        let reduced = 40u32;
        let mut x = uniform(5, (reduced * inner) as usize, -1.0, 1.0);
        x[17 * inner as usize] = f32::NAN;
        for op in [2u32, 3] {
            let args = ReduceArgs {
                outer: 1,
                reduced,
                inner,
                op,
            };
            let mut dst = vec![0u8; 4 * inner as usize];
            lib.dispatch(
                kernel,
                args.as_bytes(),
                &mut [&mut Dt::F32.encode(&x), &mut dst],
                grid(1, reduced, inner),
                &[],
            )
            .unwrap();
            let got = Dt::F32.decode(&dst);
            assert!(got[0].is_nan(), "{kernel} op {op}: {got:?}");
        }
    }
}

/// The host's rule: first extreme, a NaN wins at its first occurrence.
fn arg_ref(col: &[f32], max: bool) -> i32 {
    let (mut best, mut bi) = (col[0], 0);
    for (r, &v) in col.iter().enumerate().skip(1) {
        if best.is_nan() {
            break;
        }
        if v.is_nan() || (max && v > best) || (!max && v < best) {
            best = v;
            bi = r;
        }
    }
    bi as i32
}

#[test]
fn argreduce_matches_reference() {
    let lib = lib(Family::Reduce);
    for (k, &(outer, reduced, inner)) in SHAPES.iter().enumerate() {
        let n = (outer * reduced * inner) as usize;
        // few distinct values: many ties; some rows get NaNs or -inf only
        let mut x: Vec<f32> = uniform(k as u64 + 8, n, 0.0, 5.0)
            .iter()
            .map(|v| v.floor())
            .collect();
        if n > 40 {
            x[n / 2] = f32::NAN;
            x[n / 2 + 7] = f32::NAN;
        }
        if k == 2 {
            x[..reduced as usize].fill(f32::NEG_INFINITY);
        }
        for is_max in [true, false] {
            let args = ArgReduceArgs {
                outer,
                reduced,
                inner,
                is_max: is_max as u32,
            };
            let kernel = if inner == 1 {
                "argreduce_rows_f32"
            } else {
                "argreduce_cols_f32"
            };
            let mut dst = vec![0u8; 4 * (outer * inner) as usize];
            lib.dispatch(
                kernel,
                args.as_bytes(),
                &mut [&mut Dt::F32.encode(&x), &mut dst],
                grid(outer, reduced, inner),
                &[],
            )
            .unwrap_or_else(|e| panic!("{kernel}: {e}"));
            let got: Vec<i32> = dst
                .chunks_exact(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            let mut want = Vec::new();
            for o in 0..outer as usize {
                for i in 0..inner as usize {
                    let col: Vec<f32> = (0..reduced as usize)
                        .map(|r| x[(o * reduced as usize + r) * inner as usize + i])
                        .collect();
                    want.push(arg_ref(&col, is_max));
                }
            }
            assert_eq!(got, want, "{kernel} max={is_max} case {k}");
        }
    }
}

#[test]
fn cumsum_matches_reference() {
    let lib = lib(Family::Reduce);
    for (k, &(rows, cols)) in [(1u32, 1u32), (3, 31), (2, 100), (2, 1000), (2, 33)]
        .iter()
        .enumerate()
    {
        for exclusive in [false, true] {
            let x = uniform(k as u64 + 30, (rows * cols) as usize, -2.0, 2.0);
            let args = CumsumArgs {
                rows,
                cols,
                exclusive: exclusive as u32,
            };
            let mut dst = vec![0u8; 4 * (rows * cols) as usize];
            lib.dispatch(
                "cumsum_f32",
                args.as_bytes(),
                &mut [&mut Dt::F32.encode(&x), &mut dst],
                Grid::d1(rows, row_threads(cols)),
                &[],
            )
            .unwrap_or_else(|e| panic!("cumsum: {e}"));
            let mut want = Vec::new();
            let mut mag = Vec::new();
            for row in x.chunks(cols as usize) {
                let (mut s, mut m) = (0f64, 0f64);
                for &v in row {
                    if exclusive {
                        want.push(s);
                        s += v as f64;
                    } else {
                        s += v as f64;
                        want.push(s);
                    }
                    m += (v as f64).abs();
                    mag.push(m);
                }
            }
            let got = Dt::F32.decode(&dst);
            let worst = mag.iter().cloned().fold(0.0, f64::max);
            assert_close(
                &format!("cumsum {rows}x{cols} excl={exclusive}"),
                &got,
                &want,
                1e-6 * worst,
                1e-6,
            );
        }
    }
}

/// The host's top-k order: value descending, ties by lower index, NaN
/// after every number (NaNs by index).
fn topk_ref(row: &[f32], k: usize) -> Vec<i32> {
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.sort_by(|&a, &b| {
        let (x, y) = (row[a], row[b]);
        match (x.is_nan(), y.is_nan()) {
            (true, false) => std::cmp::Ordering::Greater,
            (false, true) => std::cmp::Ordering::Less,
            (true, true) => a.cmp(&b),
            _ => y.partial_cmp(&x).unwrap().then(a.cmp(&b)),
        }
    });
    idx[..k].iter().map(|&i| i as i32).collect()
}

#[test]
fn topk_matches_reference() {
    let lib = lib(Family::Reduce);
    // (rows, n, k): ties (few distinct values), NaNs, -inf, k = n
    for (c, &(rows, n, k)) in [
        (1u32, 1u32, 1u32),
        (3, 31, 5),
        (2, 100, 17),
        (2, 1000, 8),
        (2, 33, 33),
        (1, 40, 0),
    ]
    .iter()
    .enumerate()
    {
        let mut x: Vec<f32> = uniform(c as u64 + 60, (rows * n) as usize, -4.0, 4.0)
            .iter()
            .map(|v| v.floor())
            .collect();
        if n > 30 {
            x[3] = f32::NAN;
            x[n as usize - 1] = f32::NAN;
            x[5] = f32::NEG_INFINITY;
            x[7] = f32::INFINITY;
        }
        let args = TopKArgs { outer: rows, n, k };
        let mut dst = vec![0xEEu8; 4 * (rows * k) as usize];
        lib.dispatch(
            "topk_f32",
            args.as_bytes(),
            &mut [&mut Dt::F32.encode(&x), &mut dst],
            Grid::d1(rows, row_threads(n)),
            &[],
        )
        .unwrap_or_else(|e| panic!("topk: {e}"));
        let got: Vec<i32> = dst
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let want: Vec<i32> = x
            .chunks(n as usize)
            .flat_map(|r| topk_ref(r, k as usize))
            .collect();
        assert_eq!(got, want, "topk case {c} {rows}x{n} k={k}");
    }
}
