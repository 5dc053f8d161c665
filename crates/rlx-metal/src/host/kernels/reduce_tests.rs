//! Tests for the reduction kernels against naive loops.

use super::*;
use crate::host::kernels::testutil::{assert_close, back, rand_vec, to};
use half::f16;

fn naive_softmax(v: &[f32]) -> Vec<f32> {
    let m = v.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let e: Vec<f64> = v.iter().map(|&x| (x as f64 - m).exp()).collect();
    let z: f64 = e.iter().sum();
    e.iter().map(|x| (x / z) as f32).collect()
}

#[test]
fn softmax_matches_naive() {
    for &(rows, n) in &[(1usize, 1usize), (3, 7), (13, 33), (5, 5000)] {
        let x: Vec<f32> = rand_vec(rows * n, 1).iter().map(|v| v * 20.0).collect();
        let want: Vec<f32> = x.chunks(n).flat_map(naive_softmax).collect();
        let mut y = x.clone();
        softmax_rows(&mut y, rows, n).unwrap();
        assert_close(&y, &want, 1e-5);
        let mut yh: Vec<f16> = to(&x);
        let want_h: Vec<f32> = back(&yh).chunks(n).flat_map(naive_softmax).collect();
        softmax_rows(&mut yh, rows, n).unwrap();
        assert_close(&back(&yh), &want_h, 1e-2);
    }
    let mut nan = [1.0f32, f32::NAN, 2.0];
    softmax_rows(&mut nan, 1, 3).unwrap();
    assert!(nan.iter().all(|v| v.is_nan()));
}

/// Every compiled form of the row softmax gives the baseline's bits, on
/// rows with masked `-inf` scores, a `+inf`, a NaN, an all `-inf` row and
/// lengths that leave a lane remainder.
#[test]
fn softmax_isa_forms_are_bit_identical() {
    let mut rows: Vec<Vec<f32>> = [1usize, 7, 8, 33, 1037]
        .iter()
        .map(|&n| rand_vec(n, n as u64).iter().map(|v| v * 30.0).collect())
        .collect();
    rows[3][5] = f32::NEG_INFINITY;
    rows[4][100] = f32::NEG_INFINITY;
    rows.push(vec![1.0, f32::INFINITY, -2.0]);
    rows.push(vec![1.0, f32::NAN, 2.0, 0.5, -1.0, 3.0, 4.0, 5.0, 6.0]);
    rows.push(vec![f32::NEG_INFINITY; 9]);
    for row in &rows {
        let mut want = row.clone();
        softmax_f32(&mut want);
        for isa in [Isa::detect(), Isa::Base] {
            let mut got = row.clone();
            isa.softmax(&mut got);
            let (g, w): (Vec<u32>, Vec<u32>) = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a.to_bits(), b.to_bits()))
                .unzip();
            assert_eq!(g, w, "row of {}", row.len());
        }
    }
    let all_masked = {
        let mut r = vec![f32::NEG_INFINITY; 9];
        softmax_f32(&mut r);
        r
    };
    assert!(all_masked.iter().all(|v| v.is_nan()));
}

#[test]
fn reduce_all_ops_and_axes() {
    for &(o, r, i) in &[
        (1usize, 1usize, 1usize),
        (3, 7, 1),
        (1, 13, 33),
        (7, 3, 13),
        (2, 0, 3),
    ] {
        let x: Vec<f32> = rand_vec(o * r * i, 2).iter().map(|v| v + 1.1).collect();
        for op in [
            ReduceOp::Sum,
            ReduceOp::Mean,
            ReduceOp::Max,
            ReduceOp::Min,
            ReduceOp::Prod,
        ] {
            let mut want = vec![0f32; o * i];
            for oi in 0..o {
                for ii in 0..i {
                    let vals: Vec<f64> =
                        (0..r).map(|ri| x[(oi * r + ri) * i + ii] as f64).collect();
                    want[oi * i + ii] = match op {
                        ReduceOp::Sum => vals.iter().sum::<f64>(),
                        ReduceOp::Mean => vals.iter().sum::<f64>() / r as f64,
                        ReduceOp::Max => vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                        ReduceOp::Min => vals.iter().cloned().fold(f64::INFINITY, f64::min),
                        ReduceOp::Prod => vals.iter().product(),
                    } as f32;
                }
            }
            let mut out = vec![0f32; o * i];
            reduce(op, &x, &mut out, o, r, i).unwrap();
            assert_close(&out, &want, 1e-5);
        }
    }
    let x = [1.0f32, f32::NAN, 3.0, 0.5];
    let mut out = [0f32; 1];
    reduce(ReduceOp::Max, &x, &mut out, 1, 4, 1).unwrap();
    assert!(out[0].is_nan());
    reduce(ReduceOp::Min, &x, &mut out, 1, 4, 1).unwrap();
    assert!(out[0].is_nan());
}

#[test]
fn cumsum_inclusive_exclusive() {
    let (rows, n) = (3, 7);
    let x = rand_vec(rows * n, 3);
    let mut out = vec![0f32; rows * n];
    for exclusive in [false, true] {
        cumsum(&x, &mut out, rows, n, exclusive).unwrap();
        for r in 0..rows {
            let mut s = 0f32;
            for j in 0..n {
                if !exclusive {
                    s += x[r * n + j];
                }
                assert!((out[r * n + j] - s).abs() < 1e-5);
                if exclusive {
                    s += x[r * n + j];
                }
            }
        }
    }
}

#[test]
fn top_k_and_arg_reduce() {
    let x = [3.0f32, 1.0, 3.0, 7.0, -1.0, 7.0, 0.0];
    let mut out = [0i32; 4];
    top_k(&x, &mut out, 1, 7, 4).unwrap();
    assert_eq!(out, [3, 5, 0, 2]);
    // Against a naive full sort on random rows.
    for &(rows, n, k) in &[
        (3usize, 13usize, 5usize),
        (1, 33, 33),
        (7, 1, 1),
        (2, 1000, 7),
    ] {
        let x: Vec<f32> = rand_vec(rows * n, 4)
            .iter()
            .map(|v| (v * 8.0).round())
            .collect();
        let mut out = vec![0i32; rows * k];
        top_k(&x, &mut out, rows, n, k).unwrap();
        for r in 0..rows {
            let mut idx: Vec<usize> = (0..n).collect();
            idx.sort_by(|&a, &b| {
                x[r * n + b]
                    .partial_cmp(&x[r * n + a])
                    .unwrap()
                    .then(a.cmp(&b))
            });
            let want: Vec<i32> = idx[..k].iter().map(|&i| i as i32).collect();
            assert_eq!(&out[r * k..(r + 1) * k], &want[..]);
        }
    }
    assert!(top_k(&x, &mut out, 1, 7, 8).is_err());

    let mut am = [0i32; 1];
    arg_reduce(&x, &mut am, 1, 7, 1, true).unwrap();
    assert_eq!(am, [3]);
    arg_reduce(&x, &mut am, 1, 7, 1, false).unwrap();
    assert_eq!(am, [4]);
    // [outer=2, reduced=3, inner=2]
    let y = [
        1.0f32, 9.0, 5.0, 2.0, 5.0, 9.0, 0.0, 0.0, -1.0, 0.0, 3.0, -3.0,
    ];
    let mut o4 = [0i32; 4];
    arg_reduce(&y, &mut o4, 2, 3, 2, true).unwrap();
    assert_eq!(o4, [1, 0, 2, 0]);
    arg_reduce(&y, &mut o4, 2, 3, 2, false).unwrap();
    assert_eq!(o4, [0, 1, 1, 2]);
    arg_reduce(&[1.0f32, f32::NAN, 5.0], &mut am, 1, 3, 1, true).unwrap();
    assert_eq!(am, [1]);
}

#[test]
fn cross_entropy() {
    let (rows, n) = (7, 13);
    let x = rand_vec(rows * n, 5);
    let labels: Vec<i32> = (0..rows as i32).map(|r| (r * 5) % n as i32).collect();
    let mut loss = vec![0f32; rows];
    cross_entropy_labels(&x, &labels, &mut loss, rows, n).unwrap();
    let mut dense = vec![0f32; rows * n];
    for r in 0..rows {
        let p = naive_softmax(&x[r * n..(r + 1) * n]);
        let want = -(p[labels[r] as usize] as f64).ln();
        assert!((loss[r] as f64 - want).abs() < 1e-5);
        dense[r * n + labels[r] as usize] = 0.5;
        dense[r * n + (labels[r] as usize + 1) % n] = 0.5;
    }
    let mut loss2 = vec![0f32; rows];
    cross_entropy_dense(&x, &dense, &mut loss2, rows, n).unwrap();
    for r in 0..rows {
        let p = naive_softmax(&x[r * n..(r + 1) * n]);
        let want = -0.5 * (p[labels[r] as usize] as f64).ln()
            - 0.5 * (p[(labels[r] as usize + 1) % n] as f64).ln();
        assert!((loss2[r] as f64 - want).abs() < 1e-5);
    }
    let bad = vec![n as i32; rows];
    assert!(cross_entropy_labels(&x, &bad, &mut loss, rows, n).is_err());
}

/// Naive sampler written from the spec: full sort, top-k, renormalise,
/// top-p on the renormalised survivors, renormalise, draw.
fn naive_sample(row: &[f32], p: SampleParams, r: usize) -> i32 {
    let scaled: Vec<f32> = row.iter().map(|v| v / p.temperature).collect();
    let probs = naive_softmax(&scaled);
    let mut idx: Vec<usize> = (0..row.len()).collect();
    idx.sort_by(|&a, &b| probs[b].partial_cmp(&probs[a]).unwrap().then(a.cmp(&b)));
    if p.top_k > 0 {
        idx.truncate(p.top_k);
    }
    let kept_mass: f64 = idx.iter().map(|&j| probs[j] as f64).sum();
    let mut mass = 0.0;
    let mut keep = idx.len();
    for (i, &j) in idx.iter().enumerate() {
        mass += probs[j] as f64 / kept_mass;
        if p.top_p < 1.0 && mass >= p.top_p as f64 {
            keep = i + 1;
            break;
        }
    }
    idx.truncate(keep);
    let total: f64 = idx.iter().map(|&j| probs[j] as f64).sum();
    let u = uniform_at(p.seed, r as u64) as f64;
    let mut cum = 0.0;
    for &j in &idx {
        cum += probs[j] as f64 / total;
        if cum > u {
            return j as i32;
        }
    }
    *idx.last().unwrap() as i32
}

#[test]
fn sampling() {
    let (rows, n) = (64, 13);
    let x: Vec<f32> = rand_vec(rows * n, 6).iter().map(|v| v * 3.0).collect();
    let mut out = vec![0i32; rows];
    // Greedy equals arg max.
    sample(
        &x,
        &mut out,
        rows,
        n,
        SampleParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 1,
        },
    )
    .unwrap();
    let mut am = vec![0i32; rows];
    arg_reduce(&x, &mut am, rows, n, 1, true).unwrap();
    assert_eq!(out, am);
    for &(t, k, tp) in &[
        (1.0f32, 0usize, 1.0f32),
        (0.7, 5, 1.0),
        (1.3, 0, 0.6),
        (1.0, 3, 0.5),
        (2.0, 1, 0.9),
    ] {
        let p = SampleParams {
            temperature: t,
            top_k: k,
            top_p: tp,
            seed: 42,
        };
        sample(&x, &mut out, rows, n, p).unwrap();
        for r in 0..rows {
            assert_eq!(
                out[r],
                naive_sample(&x[r * n..(r + 1) * n], p, r),
                "row {r} {p:?}"
            );
        }
    }
    // Frequencies follow the distribution.
    let row = [0.0f32, 1.0, 2.0, -1.0];
    let many: Vec<f32> = row.iter().cycle().take(4 * 20_000).cloned().collect();
    let mut picks = vec![0i32; 20_000];
    sample(
        &many,
        &mut picks,
        20_000,
        4,
        SampleParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            seed: 9,
        },
    )
    .unwrap();
    let probs = naive_softmax(&row);
    for (j, &pj) in probs.iter().enumerate() {
        let f = picks.iter().filter(|&&v| v == j as i32).count() as f32 / 20_000.0;
        assert!((f - pj).abs() < 0.015, "token {j}: {f} vs {pj}");
    }
}

#[test]
fn top_k_nan_ranks_last() {
    let x = [f32::NAN, 1.0, f32::NEG_INFINITY, f32::NAN, 2.0];
    let mut out = [0i32; 5];
    top_k(&x, &mut out, 1, 5, 5).unwrap();
    assert_eq!(out, [4, 1, 2, 0, 3]);
}

#[test]
fn sampling_top_p_after_top_k_renormalisation() {
    // softmax ≈ [.38, .28, .19, .09, tail]: top_k = 2 renormalises the first
    // two to ≈ [.57, .43], so top_p = 0.55 keeps token 0 alone (on the full
    // softmax, .38 < .55 would keep tokens 0 and 1).
    let mut row: Vec<f32> = [0.4f32, 0.3, 0.2, 0.1].iter().map(|v| v.ln()).collect();
    row.extend(std::iter::repeat_n(0.002f32.ln(), 29));
    let n = row.len();
    let rows = 256;
    let x: Vec<f32> = row.iter().cycle().take(rows * n).cloned().collect();
    let mut out = vec![0i32; rows];
    let p = SampleParams {
        temperature: 1.0,
        top_k: 2,
        top_p: 0.55,
        seed: 7,
    };
    sample(&x, &mut out, rows, n, p).unwrap();
    assert!(out.iter().all(|&t| t == 0), "{out:?}");
}
