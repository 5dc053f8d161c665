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
use msl_sim::Grid;
use nalgebra::DMatrix;
use rlx_metal::metal::args::{KernelArgs, SpdArgs};
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

fn orthogonal(n: usize, seed: u64, identity: bool) -> DMatrix<f64> {
    if identity {
        return DMatrix::identity(n, n);
    }
    let r = uniform(seed, n * n, -1.0, 1.0);
    let m = DMatrix::from_iterator(n, n, r.iter().map(|&v| f64::from(v)));
    m.qr().q()
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
            let q = orthogonal(n, seed + 1, diag);
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
        let args = SpdArgs {
            batch: batch as u32,
            n: n as u32,
            kind,
            eps,
        };
        let enc = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let mut bufs = [enc(&x), enc(&dy), vec![0xFF; batch * n * n * 4]];
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
        let got: Vec<f32> = bufs[2]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let big = want.iter().fold(0.0f64, |a, v| a.max(v.abs()));
        let what = format!("spd_eig_bwd n {n} batch {batch} kind {kind}");
        assert_close(&what, &got, &want, 2e-5 * big, 1e-4);
    }
}
