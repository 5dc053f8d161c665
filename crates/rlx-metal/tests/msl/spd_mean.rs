//! spd.metal's Karcher-mean gradients (`spd_karcher_bwd_f32`,
//! `spd_bn_bwd_f32`: one thread runs the f32 Karcher iteration and the
//! implicit-function solve for the whole batch) against the host kernel's
//! f64 gradients (`host::kernels::spd::spd_backward`, itself checked against
//! the numpy reference and central differences in tests/test_spd_native.py)
//! within 1e-4 of the largest |gradient|, on odd sizes n = 1, 2, 3, 5, 8
//! (the largest the kernels take) and batches of 1 (the mean is the matrix
//! itself), 2, 3, 4; also against f64 central differences of the host's
//! forward ops (the definition, not the gradient code); plus their
//! validation tags.

use super::common::{lib, uniform};
use super::spd_common::{dec, enc, status_error, tag, with_spectrum};
use msl_sim::Grid;
use rlx_ir::op::SpdOp;
use rlx_metal::host::kernels::spd::{spd_backward, spd_forward, Operand};
use rlx_metal::metal::args::{KernelArgs, SpdArgs};
use rlx_metal::metal::check::{CODE_NOT_PD, CODE_NOT_SYMMETRIC};
use rlx_metal::metal::kernels::Family;

/// `[batch, n, n]` SPD matrices `Q diag(λ) Qᵀ`, `λ` in [0.5, 2.5], exactly
/// symmetric in f32.
fn spd(batch: usize, n: usize, seed: u64) -> Vec<f32> {
    spd_in(batch, n, seed, 0.5, 2.5)
}

/// [`spd`] with `λ` in [lo, hi].
fn spd_in(batch: usize, n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(batch * n * n);
    for b in 0..batch {
        let s = seed + 7 * b as u64;
        let lam: Vec<f64> = uniform(s + 1, n, lo, hi)
            .into_iter()
            .map(f64::from)
            .collect();
        out.extend(with_spectrum(&lam, s));
    }
    out
}

/// Runs `kernel` on one thread over `ins`; returns dx's bytes.
fn run(kernel: &str, kind: u32, batch: usize, n: usize, eps: f32, ins: &[&[f32]]) -> Vec<u8> {
    let args = SpdArgs {
        batch: batch as u32,
        n: n as u32,
        kind,
        eps,
    };
    let mut bufs: Vec<Vec<u8>> = ins.iter().map(|v| enc(v)).collect();
    bufs.push(vec![0xFF; batch * n * n * 4]);
    let mut refs: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
    lib(Family::Spd)
        .dispatch(kernel, args.as_bytes(), &mut refs, Grid::d1(1, 1), &[])
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
    bufs.pop().unwrap()
}

/// The host's f64 gradient of `kind` at the f32 operands `(values, dims)`.
fn host(kind: SpdOp, eps: f32, ops: &[(&[f32], Vec<usize>)]) -> Vec<f64> {
    let wide: Vec<Vec<f64>> = ops
        .iter()
        .map(|(v, _)| v.iter().map(|&x| f64::from(x)).collect())
        .collect();
    let args: Vec<Operand<'_>> = wide
        .iter()
        .zip(ops)
        .map(|(data, (_, dims))| Operand { data, dims })
        .collect();
    spd_backward(kind, f64::from(eps), &args, 1e-5).unwrap_or_else(|e| panic!("{e}"))
}

/// `|got − want| ≤ 1e-4 · max|want|` elementwise.
fn close(what: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    let big = want.iter().fold(0.0f64, |a, v| a.max(v.abs()));
    assert!(big > 1e-2, "{what}: gradient too small to compare ({big})");
    let worst = got
        .iter()
        .zip(want)
        .map(|(&g, &w)| (f64::from(g) - w).abs())
        .fold(0.0f64, f64::max);
    assert!(
        worst <= 1e-4 * big,
        "{what}: worst |metal − host| {worst:e} vs max |host| {big:e}\ngot {got:?}\nwant {want:?}"
    );
}

#[test]
fn spd_karcher_bwd_matches_the_host() {
    for (case, &(batch, n, eps)) in [
        (3usize, 2usize, 1e-6f32),
        (4, 3, 1e-6),
        (3, 5, 1e-4),
        (2, 8, 1e-6),
        (1, 4, 1e-6),
        (3, 1, 1e-6),
    ]
    .iter()
    .enumerate()
    {
        let seed = 2000 + 16 * case as u64;
        let x = spd(batch, n, seed);
        let dy = uniform(seed + 9, n * n, -1.0, 1.0);
        let got = dec(&run("spd_karcher_bwd_f32", 2, batch, n, eps, &[&x, &dy]));
        let want = host(
            SpdOp::KarcherMean,
            eps,
            &[(&x, vec![batch, n, n]), (&dy, vec![n, n])],
        );
        close(&format!("karcher b {batch} n {n}"), &got, &want);
    }
}

#[test]
fn spd_mean_bwd_matches_the_host_on_ill_conditioned_batches() {
    // eigenvalues spread over [0.1, 10] (condition numbers up to 100)
    for (batch, n) in [(4usize, 6usize), (3, 8)] {
        let seed = 2300 + n as u64;
        let x = spd_in(batch, n, seed, 0.1, 10.0);
        let dy = uniform(seed + 9, batch * n * n, -1.0, 1.0);
        let got = dec(&run(
            "spd_karcher_bwd_f32",
            2,
            batch,
            n,
            1e-6,
            &[&x, &dy[..n * n]],
        ));
        let want = host(
            SpdOp::KarcherMean,
            1e-6,
            &[(&x, vec![batch, n, n]), (&dy[..n * n], vec![n, n])],
        );
        close(
            &format!("ill-conditioned karcher b {batch} n {n}"),
            &got,
            &want,
        );
        let bias = spd_in(1, n, seed + 5, 0.1, 10.0);
        let got = dec(&run("spd_bn_bwd_f32", 3, batch, n, 1e-6, &[&x, &bias, &dy]));
        let want = host(
            SpdOp::BatchNorm,
            1e-6,
            &[
                (&x, vec![batch, n, n]),
                (&bias, vec![n, n]),
                (&dy, vec![batch, n, n]),
            ],
        );
        close(
            &format!("ill-conditioned batch_norm b {batch} n {n}"),
            &got,
            &want,
        );
    }
}

#[test]
fn spd_bn_bwd_matches_the_host() {
    for (case, &(batch, n)) in [(3usize, 3usize), (4, 5), (2, 8), (5, 2), (2, 1)]
        .iter()
        .enumerate()
    {
        let seed = 2200 + 16 * case as u64;
        let x = spd(batch, n, seed);
        let bias = spd(1, n, seed + 5);
        let dy = uniform(seed + 9, batch * n * n, -1.0, 1.0);
        let got = dec(&run("spd_bn_bwd_f32", 3, batch, n, 1e-6, &[&x, &bias, &dy]));
        let want = host(
            SpdOp::BatchNorm,
            1e-6,
            &[
                (&x, vec![batch, n, n]),
                (&bias, vec![n, n]),
                (&dy, vec![batch, n, n]),
            ],
        );
        close(&format!("batch_norm b {batch} n {n}"), &got, &want);
    }
}

/// `⟨dy, f(x + hE) − f(x − hE)⟩ / 2h ≈ ⟨dx, E⟩` along a random symmetric
/// `E`, f the host's f64 forward (Karcher tolerance 1e-12), for the Metal
/// gradient `dx`: within 1e-4 of `Σ |dx ∘ E|`.
#[test]
fn spd_mean_bwd_matches_central_differences_of_the_forward() {
    let (batch, n) = (3usize, 4usize);
    let x = spd(batch, n, 2500);
    let bias = spd(1, n, 2501);
    let e: Vec<f64> = {
        let r = uniform(2502, batch * n * n, -1.0, 1.0);
        (0..batch * n * n)
            .map(|k| {
                let (b, i, j) = (k / (n * n), k / n % n, k % n);
                f64::from(r[k] + r[b * n * n + j * n + i])
            })
            .collect()
    };
    let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let b64: Vec<f64> = bias.iter().map(|&v| f64::from(v)).collect();
    for kind in [SpdOp::KarcherMean, SpdOp::BatchNorm] {
        let bn = kind == SpdOp::BatchNorm;
        let dy = uniform(2503, if bn { batch * n * n } else { n * n }, -1.0, 1.0);
        let got = if bn {
            dec(&run(
                "spd_bn_bwd_f32",
                3,
                batch,
                n,
                1e-12,
                &[&x, &bias, &dy],
            ))
        } else {
            dec(&run("spd_karcher_bwd_f32", 2, batch, n, 1e-12, &[&x, &dy]))
        };
        let h = 1e-5;
        let f = |sign: f64| -> Vec<f64> {
            let xs: Vec<f64> = x64.iter().zip(&e).map(|(v, d)| v + sign * h * d).collect();
            let xd = [batch, n, n];
            let bd = [n, n];
            let mut ops = vec![Operand {
                data: &xs,
                dims: &xd,
            }];
            if bn {
                ops.push(Operand {
                    data: &b64,
                    dims: &bd,
                });
            }
            spd_forward(kind, 1e-12, &ops, 1e-9).unwrap_or_else(|e| panic!("{e}"))
        };
        let (fp, fm) = (f(1.0), f(-1.0));
        let fd: f64 = dy
            .iter()
            .zip(fp.iter().zip(&fm))
            .map(|(&d, (p, m))| f64::from(d) * (p - m) / (2.0 * h))
            .sum();
        let dot: f64 = got.iter().zip(&e).map(|(&g, d)| f64::from(g) * d).sum();
        let mag: f64 = got
            .iter()
            .zip(&e)
            .map(|(&g, d)| (f64::from(g) * d).abs())
            .sum();
        assert!(
            (dot - fd).abs() <= 1e-4 * mag,
            "{kind:?}: ⟨dx, E⟩ {dot}, central difference {fd} (Σ|dx∘E| {mag})"
        );
    }
}

#[test]
fn spd_mean_bwd_tags_invalid_operands() {
    let (batch, n) = (3, 3);
    let good = spd(batch, n, 2400);
    let dy = uniform(2401, batch * n * n, -1.0, 1.0);
    // x[2] indefinite: its (0, 0) entry made very negative
    let mut indefinite = good.clone();
    indefinite[2 * n * n] = -5.0;
    let out = run(
        "spd_karcher_bwd_f32",
        2,
        batch,
        n,
        1e-6,
        &[&indefinite, &dy[..n * n]],
    );
    assert_eq!(
        (tag(&out, 0, n), tag(&out, 2, n)),
        (None, Some(CODE_NOT_PD))
    );
    let e = status_error("karcher_mean backward", vec!["x", "dy"], &out, batch, n);
    assert!(
        e.contains("karcher_mean backward: x[2] is not positive definite"),
        "{e}"
    );
    // symmetry is checked for every matrix before definiteness
    let mut both = indefinite.clone();
    both[n * n + 1] += 0.5;
    let out = run(
        "spd_karcher_bwd_f32",
        2,
        batch,
        n,
        1e-6,
        &[&both, &dy[..n * n]],
    );
    assert_eq!(
        (tag(&out, 1, n), tag(&out, 2, n)),
        (Some(CODE_NOT_SYMMETRIC), None)
    );
    // batch norm: a non-symmetric, then an indefinite bias (operand 1)
    let mut bias = spd(1, n, 2402);
    bias[1] += 0.5;
    let out = run("spd_bn_bwd_f32", 3, batch, n, 1e-6, &[&good, &bias, &dy]);
    assert_eq!(tag(&out, 0, n), Some(CODE_NOT_SYMMETRIC | 1));
    let e = status_error(
        "batch_norm backward",
        vec!["x", "bias", "dy"],
        &out,
        batch,
        n,
    );
    assert!(
        e.contains("batch_norm backward: bias[0] is not symmetric"),
        "{e}"
    );
    let neg: Vec<f32> = spd(1, n, 2403).iter().map(|v| -v).collect();
    let out = run("spd_bn_bwd_f32", 3, batch, n, 1e-6, &[&good, &neg, &dy]);
    assert_eq!(tag(&out, 0, n), Some(CODE_NOT_PD | 1));
    // a stale tag of an earlier failure is cleared: only x[1] is reported
    let mut nan_dy = dy.clone();
    nan_dy[n * n + 4] = f32::NAN;
    let out = run(
        "spd_bn_bwd_f32",
        3,
        batch,
        n,
        1e-6,
        &[&good, &spd(1, n, 2402), &nan_dy],
    );
    let e = status_error(
        "batch_norm backward",
        vec!["x", "bias", "dy"],
        &out,
        batch,
        n,
    );
    assert!(
        e.contains("dy holds a non-finite value (NaN; matrix 1)"),
        "{e}"
    );
}
