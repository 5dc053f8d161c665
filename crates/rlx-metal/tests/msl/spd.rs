//! spd.metal's `spd_eig_bwd_f32` (the `re_eig` / `log_eig` gradient, one
//! Jacobi eigen-solve per matrix) against the Daleckii–Krein formula in
//! f64 at matrices built from a known eigendecomposition `X = Q Λ Qᵀ`
//! (`Q` the orthogonal factor of a random matrix, `Λ` chosen with gaps
//! ≥ 0.2, for `re_eig` on both sides of the floor): `dX = Q (L ∘ Qᵀ
//! sym(dY) Q) Qᵀ`, `L_ij` the divided difference of `f` (no eigen-solver
//! in the reference). Sizes n = 1, 2, 3, 5, 8, 16 (the largest the kernel
//! takes), batches of 1 / 3 / 5 / 33 matrices (partial threadgroups), a
//! diagonal input (no rotation) and repeated eigenvalues for `log_eig`.
//!
//! Tolerance `2e-5·max|ref| + 1e-4·|ref|`: `X` is rounded to f32 (moving
//! its eigenvectors by ~1e-7 / gap) and the solve and products run in f32.

use super::common::{assert_close, lib, uniform};
use super::spd_common::{dec, enc, orthogonal, status_error, tag, with_spectrum};
use msl_sim::Grid;
use nalgebra::DMatrix;
use rlx_metal::metal::args::{KernelArgs, SpdArgs, SpdBiMapArgs};
use rlx_metal::metal::check::{CODE_NON_FINITE, CODE_NOT_PD, CODE_NOT_SYMMETRIC};
use rlx_metal::metal::kernels::Family;

/// Eigenvalues `0.3 + 0.25·k` (shuffled by the seed), or for `repeat` all
/// but the first equal.
fn spectrum(n: usize, seed: u64, repeat: bool) -> Vec<f64> {
    let jitter = uniform(seed, n, 0.0, 0.05);
    (0..n)
        .map(|k| {
            let k = if repeat && k > 0 {
                1
            } else {
                (k * 7 + seed as usize) % n
            };
            0.3 + 0.25 * k as f64
                + if repeat {
                    0.0
                } else {
                    f64::from(jitter[k.min(n - 1)])
                }
        })
        .collect()
}

/// Divided difference of `f` (`kind` 0 re_eig, 1 log_eig) at two eigenvalues.
fn l_entry(kind: u32, a: f64, b: f64, eps: f64) -> f64 {
    let f = |v: f64| if kind == 0 { v.max(eps) } else { v.ln() };
    let fp = |v: f64| match kind {
        0 if v > eps => 1.0,
        0 => 0.0,
        _ => 1.0 / v,
    };
    if a == b {
        fp(a)
    } else {
        (f(a) - f(b)) / (a - b)
    }
}

#[test]
fn spd_eig_bwd_matches_daleckii_krein() {
    // (n, batch, kind, diagonal, repeated eigenvalues)
    let cases: &[(usize, usize, u32, bool, bool)] = &[
        (1, 3, 1, false, false),
        (2, 5, 0, false, false),
        (3, 1, 1, true, false),
        (5, 3, 1, false, false),
        (5, 3, 0, false, false),
        (8, 33, 1, false, false),
        (8, 5, 0, false, false),
        (16, 3, 1, false, false),
        (4, 3, 1, false, true),
    ];
    for (case, &(n, batch, kind, diag, repeat)) in cases.iter().enumerate() {
        // re_eig's floor between the smallest eigenvalues (≥ 0.1 from each)
        let eps = if kind == 0 { 0.42f32 } else { 0.0 };
        let mut x = Vec::with_capacity(batch * n * n);
        let mut want = Vec::with_capacity(batch * n * n);
        let dy = uniform(1200 + case as u64, batch * n * n, -1.0, 1.0);
        for b in 0..batch {
            let seed = 1300 + (case * 64 + b) as u64;
            let lam = spectrum(n, seed, repeat);
            let q = if diag {
                DMatrix::identity(n, n)
            } else {
                orthogonal(n, seed + 1)
            };
            let xm = &q
                * DMatrix::from_diagonal(&nalgebra::DVector::from_vec(lam.clone()))
                * q.transpose();
            x.extend((0..n * n).map(|e| xm[(e / n, e % n)] as f32));
            let d = DMatrix::from_fn(n, n, |i, j| {
                0.5 * f64::from(dy[b * n * n + i * n + j] + dy[b * n * n + j * n + i])
            });
            let inner = q.transpose() * d * &q;
            let l = DMatrix::from_fn(n, n, |i, j| l_entry(kind, lam[i], lam[j], f64::from(eps)));
            let g = &q * l.component_mul(&inner) * q.transpose();
            want.extend((0..n * n).map(|e| g[(e / n, e % n)]));
        }
        let got = dec(&eig(batch, n, kind, eps, &x, &dy));
        let big = want.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        let what = format!("spd_eig_bwd n {n} batch {batch} kind {kind}");
        assert_close(&what, &got, &want, 2e-5 * big, 1e-4);
    }
}

/// Runs `spd_bimap_bwd_f32` (one 64-thread threadgroup per output row);
/// returns dx's bytes.
fn bimap(batch: usize, n: usize, m: usize, x: &[f32], w: &[f32], dy: &[f32]) -> Vec<u8> {
    let args = SpdBiMapArgs {
        batch: batch as u32,
        n: n as u32,
        m: m as u32,
        _pad: 0,
    };
    let mut bufs = [enc(x), enc(w), enc(dy), vec![0xFF; batch * n * n * 4]];
    let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
    lib(Family::Spd)
        .dispatch(
            "spd_bimap_bwd_f32",
            args.as_bytes(),
            &mut refs,
            Grid::d1((batch * n) as u32, 64),
            &[],
        )
        .unwrap_or_else(|e| panic!("spd_bimap_bwd_f32: {e}"));
    bufs[3].clone()
}

/// Runs `spd_eig_bwd_f32` (kind 0 re_eig, 1 log_eig); returns dx's bytes.
fn eig(batch: usize, n: usize, kind: u32, eps: f32, x: &[f32], dy: &[f32]) -> Vec<u8> {
    let args = SpdArgs {
        batch: batch as u32,
        n: n as u32,
        kind,
        eps,
    };
    let mut bufs = [enc(x), enc(dy), vec![0xFF; batch * n * n * 4]];
    let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
    lib(Family::Spd)
        .dispatch(
            "spd_eig_bwd_f32",
            args.as_bytes(),
            &mut refs,
            Grid::d1((batch as u32).div_ceil(32), 32),
            &[],
        )
        .unwrap_or_else(|e| panic!("spd_eig_bwd_f32: {e}"));
    bufs[2].clone()
}

/// Symmetric `[batch, n, n]` f32 matrices (the mean of a random matrix and
/// its transpose, exactly symmetric in f32).
fn symmetric(batch: usize, n: usize, seed: u64) -> Vec<f32> {
    let r = uniform(seed, batch * n * n, -1.0, 1.0);
    let mut x = vec![0.0f32; batch * n * n];
    for b in 0..batch {
        for i in 0..n {
            for j in 0..n {
                let at = |i: usize, j: usize| r[b * n * n + i * n + j];
                x[b * n * n + i * n + j] = 0.5 * (at(i, j) + at(j, i));
            }
        }
    }
    x
}

#[test]
fn spd_bimap_bwd_matches_w_dy_wt() {
    // (batch, n, m): odd sizes, n = 1, m = n, and rows / columns past the
    // 64 threads of a threadgroup (both loops strided)
    let cases: &[(usize, usize, usize)] =
        &[(3, 5, 3), (1, 1, 1), (2, 7, 7), (5, 2, 1), (2, 70, 66)];
    for (case, &(batch, n, m)) in cases.iter().enumerate() {
        let seed = 1500 + 8 * case as u64;
        let x = symmetric(batch, n, seed);
        let w = uniform(seed + 1, n * m, -1.0, 1.0);
        // dy is not symmetric: the kernel must not symmetrise it
        let dy = uniform(seed + 2, batch * m * m, -1.0, 1.0);
        let got = dec(&bimap(batch, n, m, &x, &w, &dy));
        // f64 reference Σ_kl W_ik dY_kl W_jl, and Σ |terms| for the bound
        for b in 0..batch {
            for i in 0..n {
                for j in 0..n {
                    let (mut want, mut mag) = (0.0f64, 0.0f64);
                    for k in 0..m {
                        for l in 0..m {
                            let t = f64::from(w[i * m + k])
                                * f64::from(dy[b * m * m + k * m + l])
                                * f64::from(w[j * m + l]);
                            want += t;
                            mag += t.abs();
                        }
                    }
                    let g = f64::from(got[b * n * n + i * n + j]);
                    // two f32 accumulations of m terms each
                    let tol = (2 * m + 4) as f64 * 6e-8 * mag + 1e-30;
                    assert!(
                        (g - want).abs() <= tol,
                        "bimap b {b} n {n} m {m} [{b},{i},{j}]: got {g}, want {want}"
                    );
                }
            }
        }
    }
}

#[test]
fn spd_eig_bwd_tags_non_symmetric_indefinite_and_non_finite() {
    let n = 4;
    let good = with_spectrum(&[0.5, 1.0, 1.7, 2.4], 1600);
    let mut asym = good.clone();
    asym[1] += 0.25; // x[0, 1] only
    let indefinite = with_spectrum(&[-0.5, 0.8, 1.3, 2.0], 1601);
    let x: Vec<f32> = [good.clone(), asym, indefinite.clone()].concat();
    let dy = uniform(1602, 3 * n * n, -1.0, 1.0);
    let out = eig(3, n, 1, 0.0, &x, &dy);
    assert_eq!(tag(&out, 0, n), None);
    assert_eq!(tag(&out, 1, n), Some(CODE_NOT_SYMMETRIC));
    assert_eq!(tag(&out, 2, n), Some(CODE_NOT_PD));
    let vals = dec(&out);
    assert!(
        (vals[n * n + 1] - 0.25).abs() < 1e-6,
        "max |x - xᵀ| {}",
        vals[n * n + 1]
    );
    assert!(
        (vals[2 * n * n + 1] + 0.5).abs() < 1e-4,
        "λmin {}",
        vals[2 * n * n + 1]
    );
    let e = status_error("log_eig backward", vec!["x", "dy"], &out, 3, n);
    assert!(
        e.contains("[spd] log_eig backward: x[1] is not symmetric"),
        "{e}"
    );
    // the valid matrix's gradient is still right (as the first test's
    // reference, from its known spectrum)
    let one = dec(&eig(1, n, 1, 0.0, &good, &dy[..n * n]));
    assert_eq!(&vals[..n * n], &one[..]);
    // indefinite alone: the PD error with its smallest eigenvalue
    let out = eig(1, n, 1, 0.0, &indefinite, &dy[..n * n]);
    let e = status_error("log_eig backward", vec!["x", "dy"], &out, 1, n);
    assert!(
        e.contains("x[0] is not positive definite (smallest eigenvalue -5.000e-1)"),
        "{e}"
    );
    // re_eig needs no definiteness: an indefinite x is fine
    let out = eig(1, n, 0, 0.1, &indefinite, &dy[..n * n]);
    assert_eq!(tag(&out, 0, n), None);
    assert!(dec(&out).iter().all(|v| v.is_finite()));
    // 1×1: a non-positive value, no detail word
    let out = eig(2, 1, 1, 0.0, &[2.0, -3.0], &[1.0, 1.0]);
    assert_eq!(tag(&out, 0, 1), None);
    assert!((dec(&out)[0] - 0.5).abs() < 1e-7);
    assert_eq!(tag(&out, 1, 1), Some(CODE_NOT_PD));
    // non-finite x and dy
    let mut bad_x = good.clone();
    bad_x[5] = f32::NAN;
    let out = eig(1, n, 0, 0.1, &bad_x, &dy[..n * n]);
    assert_eq!(tag(&out, 0, n), Some(CODE_NON_FINITE));
    let mut bad_dy = dy[..n * n].to_vec();
    bad_dy[7] = f32::INFINITY;
    let out = eig(1, n, 1, 0.0, &good, &bad_dy);
    assert_eq!(tag(&out, 0, n), Some(CODE_NON_FINITE | 1));
    let e = status_error("log_eig backward", vec!["x", "dy"], &out, 1, n);
    assert!(
        e.contains("dy holds a non-finite value (inf; matrix 0)"),
        "{e}"
    );
}

#[test]
fn spd_bimap_bwd_tags_non_symmetric_and_non_finite() {
    let (batch, n, m) = (3, 5, 3);
    let mut x = symmetric(batch, n, 1700);
    let w = uniform(1701, n * m, -1.0, 1.0);
    let dy = uniform(1702, batch * m * m, -1.0, 1.0);
    x[n * n + 2 * n + 4] += 0.5; // x[1][2, 4]
    let out = bimap(batch, n, m, &x, &w, &dy);
    assert_eq!(
        (tag(&out, 0, n), tag(&out, 1, n), tag(&out, 2, n)),
        (None, Some(CODE_NOT_SYMMETRIC), None)
    );
    let e = status_error("bi_map backward", vec!["x", "w", "dy"], &out, batch, n);
    assert!(
        e.contains("bi_map backward: x[1] is not symmetric (max |x - xᵀ| = 5.000e-1)"),
        "{e}"
    );
    // a relative asymmetry below the f32 tolerance 1e-5 · max|x| passes
    let mut big = symmetric(1, n, 1703);
    big.iter_mut().for_each(|v| *v *= 1e4);
    big[3] += 0.05; // 5e-6 of max |x| ≤ 1e4
    assert_eq!(tag(&bimap(1, n, m, &big, &w, &dy[..m * m]), 0, n), None);
    // non-finite: w (every matrix checks it), dy of one matrix; x before w
    let x = symmetric(batch, n, 1704);
    let mut bad_w = w.clone();
    bad_w[4] = f32::NEG_INFINITY;
    let out = bimap(batch, n, m, &x, &bad_w, &dy);
    assert!((0..batch).all(|b| tag(&out, b, n) == Some(CODE_NON_FINITE | 1)));
    let mut bad_dy = dy.clone();
    bad_dy[2 * m * m + 1] = f32::NAN;
    let out = bimap(batch, n, m, &x, &w, &bad_dy);
    assert_eq!(
        (tag(&out, 0, n), tag(&out, 1, n), tag(&out, 2, n)),
        (None, None, Some(CODE_NON_FINITE | 2))
    );
    let mut bad_x = x.clone();
    bad_x[n * n + 3] = f32::NAN;
    let out = bimap(batch, n, m, &bad_x, &bad_w, &dy);
    assert_eq!(tag(&out, 1, n), Some(CODE_NON_FINITE));
    // n = 1 (no detail word)
    let out = bimap(1, 1, 1, &[f32::NAN], &[1.0], &[1.0]);
    let e = status_error("bi_map backward", vec!["x", "w", "dy"], &out, 1, 1);
    assert!(e.contains("x holds a non-finite value (matrix 0)"), "{e}");
}
