//! SPD-manifold ops in f64 (SPDNet: Huang & Van Gool, AAAI 2017;
//! Riemannian batch norm: Brooks et al., NeurIPS 2019), on nalgebra's
//! symmetric eigendecomposition.
//!
//! Every matrix function is `U f(Λ) Uᵀ` of the symmetric eigendecomposition
//! `X = U Λ Uᵀ`: log (`log_eig`), rectification (`re_eig`), square root and
//! inverse square root, exp. The Karcher mean is the affine-invariant
//! fixed point `G ← G^½ exp(mean_i log(G^-½ X_i G^-½)) G^½` from the
//! arithmetic mean, until `‖mean log‖_F < tol` (at most 100 steps). Batch
//! norm transports the batch from its Karcher mean `G` to the bias `B`:
//! `B^½ G^-½ X_i G^-½ B^½`.
//!
//! Gradients: `bi_map` `W dY Wᵀ`; the eigen-functions by Daleckii–Krein;
//! the Karcher mean (and batch norm through it) by implicit
//! differentiation of its fixed-point equation.
//!
//! Inputs are checked: a matrix operand must be symmetric (to a relative
//! `sym_tol` the caller picks by dtype), and the ops that take logs or
//! square roots need it positive definite; both fail with an error naming
//! the op, the batch element and the offending value.

use super::{check_len, invalid, numel, KernelError, Result};
use nalgebra::{DMatrix, SymmetricEigen};
use rlx_ir::op::SpdOp;

/// Kernel name of the errors.
const K: &str = "spd";

/// Most fixed-point steps of the Karcher mean.
pub const KARCHER_MAX_ITER: usize = 100;

/// Name of an SPD op as the IR spells it.
pub fn op_name(kind: SpdOp) -> &'static str {
    match kind {
        SpdOp::BiMap => "bi_map",
        SpdOp::ReEig => "re_eig",
        SpdOp::LogEig => "log_eig",
        SpdOp::BatchNorm => "batch_norm",
        SpdOp::KarcherMean => "karcher_mean",
    }
}

fn err(kind: SpdOp, msg: String) -> KernelError {
    invalid(K, format!("{}: {msg}", op_name(kind)))
}

/// `U f(Λ) Uᵀ` of a symmetric matrix.
fn eig_apply(x: &DMatrix<f64>, f: impl Fn(f64) -> f64) -> DMatrix<f64> {
    let e = SymmetricEigen::new(x.clone());
    let d = DMatrix::from_diagonal(&e.eigenvalues.map(f));
    &e.eigenvectors * d * e.eigenvectors.transpose()
}

/// `(X + Xᵀ) / 2`.
fn sym(x: &DMatrix<f64>) -> DMatrix<f64> {
    (x + x.transpose()) * 0.5
}

/// Fails unless `x` is symmetric to `tol · max(1, max|x|)`.
fn check_sym(kind: SpdOp, what: &str, b: usize, x: &DMatrix<f64>, tol: f64) -> Result<()> {
    let scale = x.amax().max(1.0);
    let asym = (x - x.transpose()).amax();
    // NaN entries fail too
    if asym.is_nan() || asym > tol * scale {
        return Err(err(
            kind,
            format!("{what}[{b}] is not symmetric (max |x - xᵀ| = {asym:.3e})"),
        ));
    }
    Ok(())
}

/// Fails unless symmetric `x` is positive definite (smallest eigenvalue > 0).
fn check_pd(kind: SpdOp, what: &str, b: usize, x: &DMatrix<f64>) -> Result<()> {
    let lmin = SymmetricEigen::new(x.clone()).eigenvalues.min();
    if lmin.is_nan() || lmin <= 0.0 {
        return Err(err(
            kind,
            format!("{what}[{b}] is not positive definite (smallest eigenvalue {lmin:.3e})"),
        ));
    }
    Ok(())
}

/// Affine-invariant Karcher mean of SPD matrices.
pub fn karcher_mean(xs: &[DMatrix<f64>], tol: f64) -> DMatrix<f64> {
    let tol = if tol > 0.0 { tol } else { 1e-12 };
    let n = xs.first().map_or(0, |x| x.nrows());
    let mut g = xs.iter().fold(DMatrix::zeros(n, n), |a, x| a + x) / xs.len().max(1) as f64;
    for _ in 0..KARCHER_MAX_ITER {
        let gh = eig_apply(&g, f64::sqrt);
        let gih = eig_apply(&g, |v| 1.0 / v.sqrt());
        let step = xs.iter().fold(DMatrix::zeros(n, n), |a, x| {
            a + eig_apply(&sym(&(&gih * x * &gih)), f64::ln)
        }) / xs.len() as f64;
        g = sym(&(&gh * eig_apply(&step, f64::exp) * &gh));
        if step.norm() < tol {
            break;
        }
    }
    g
}

/// Matrices `[b, n, n]` of a flat buffer.
fn matrices(v: &[f64], b: usize, n: usize) -> Vec<DMatrix<f64>> {
    (0..b)
        .map(|i| DMatrix::from_row_slice(n, n, &v[i * n * n..(i + 1) * n * n]))
        .collect()
}

/// Row-major flattening of matrices.
fn flatten(ms: &[DMatrix<f64>]) -> Vec<f64> {
    ms.iter()
        .flat_map(|m| m.transpose().as_slice().to_vec())
        .collect()
}

/// An operand: flat values and dims.
pub struct Operand<'a> {
    /// Values (row-major).
    pub data: &'a [f64],
    /// Dims.
    pub dims: &'a [usize],
}

/// Fails unless every operand value is finite (the eigen-solver would not
/// converge on NaN / inf).
fn check_finite(kind: SpdOp, args: &[Operand<'_>]) -> Result<()> {
    for (i, a) in args.iter().enumerate() {
        if let Some(v) = a.data.iter().find(|v| !v.is_finite()) {
            return Err(err(
                kind,
                format!("operand {i} holds a non-finite value ({v})"),
            ));
        }
    }
    Ok(())
}

/// `(batch, n)` of a `[.., n, n]` operand.
fn batch_square(kind: SpdOp, what: &str, o: &Operand<'_>) -> Result<(usize, usize)> {
    let r = o.dims.len();
    if r < 2 || o.dims[r - 1] != o.dims[r - 2] {
        return Err(err(
            kind,
            format!("{what} dims {:?} are not [.., n, n]", o.dims),
        ));
    }
    let n = o.dims[r - 1];
    let b = numel(K, &o.dims[..r - 2])?;
    check_len(K, "x", o.data.len(), numel(K, &[b, n, n])?)?;
    Ok((b, n))
}

/// Forward SPD op `kind` on `args` (`x` first); returns the result,
/// row-major. `sym_tol` is the relative symmetry tolerance of the inputs.
pub fn spd_forward(kind: SpdOp, eps: f64, args: &[Operand<'_>], sym_tol: f64) -> Result<Vec<f64>> {
    let want = match kind {
        SpdOp::BiMap | SpdOp::BatchNorm => 2,
        _ => 1,
    };
    if args.len() != want {
        return Err(err(
            kind,
            format!("takes {want} operands, got {}", args.len()),
        ));
    }
    check_finite(kind, args)?;
    let (b, n) = batch_square(kind, "x", &args[0])?;
    let xs = matrices(args[0].data, b, n);
    for (i, x) in xs.iter().enumerate() {
        check_sym(kind, "x", i, x, sym_tol)?;
    }
    let pd = |xs: &[DMatrix<f64>], what: &str| {
        xs.iter()
            .enumerate()
            .try_for_each(|(i, x)| check_pd(kind, what, i, x))
    };
    let out: Vec<DMatrix<f64>> = match kind {
        SpdOp::BiMap => {
            let w = &args[1];
            if w.dims.len() != 2 || w.dims[0] != n || w.dims[1] > n {
                return Err(err(
                    kind,
                    format!("w dims {:?} are not [{n}, m ≤ {n}]", w.dims),
                ));
            }
            let m = w.dims[1];
            check_len(K, "w", w.data.len(), n * m)?;
            let wm = DMatrix::from_row_slice(n, m, &w.data[..n * m]);
            xs.iter().map(|x| wm.transpose() * x * &wm).collect()
        }
        SpdOp::ReEig => xs
            .iter()
            .map(|x| eig_apply(&sym(x), |v| v.max(eps)))
            .collect(),
        SpdOp::LogEig => {
            pd(&xs, "x")?;
            xs.iter().map(|x| eig_apply(&sym(x), f64::ln)).collect()
        }
        SpdOp::KarcherMean | SpdOp::BatchNorm => {
            pd(&xs, "x")?;
            if b == 0 {
                return Err(err(kind, "needs a non-empty batch".into()));
            }
            let xs: Vec<_> = xs.iter().map(sym).collect();
            let g = karcher_mean(&xs, eps);
            if kind == SpdOp::KarcherMean {
                vec![g]
            } else {
                let bias = &args[1];
                if bias.dims != [n, n] {
                    return Err(err(
                        kind,
                        format!("bias dims {:?} are not [{n}, {n}]", bias.dims),
                    ));
                }
                check_len(K, "bias", bias.data.len(), n * n)?;
                let bm = DMatrix::from_row_slice(n, n, &bias.data[..n * n]);
                check_sym(kind, "bias", 0, &bm, sym_tol)?;
                check_pd(kind, "bias", 0, &sym(&bm))?;
                let gih = eig_apply(&g, |v| 1.0 / v.sqrt());
                let bh = eig_apply(&sym(&bm), f64::sqrt);
                let t = &bh * &gih;
                let tt = &gih * &bh;
                xs.iter().map(|x| sym(&(&t * x * &tt))).collect()
            }
        }
    };
    Ok(flatten(&out))
}

/// The Daleckii–Krein (Fréchet) derivative of `X ↦ U f(Λ) Uᵀ` at one
/// symmetric `x`, precomputed for repeated application: `dY ↦ U (L ∘ Uᵀ
/// sym(dY) U) Uᵀ`, `L_ij = (f(λ_i) − f(λ_j)) / (λ_i − λ_j)` or the mean of
/// `f'` on (near-)equal eigenvalues. It is self-adjoint, so it is also the
/// gradient for cotangent `dY`.
struct FrechetOp {
    u: DMatrix<f64>,
    l: DMatrix<f64>,
}

impl FrechetOp {
    fn new(x: &DMatrix<f64>, f: impl Fn(f64) -> f64, fp: impl Fn(f64) -> f64) -> Self {
        let e = SymmetricEigen::new(sym(x));
        let lam = &e.eigenvalues;
        let n = lam.len();
        let l = DMatrix::from_fn(n, n, |i, j| {
            let dl = lam[i] - lam[j];
            if dl.abs() <= 1e-12 * lam[i].abs().max(1.0) {
                0.5 * (fp(lam[i]) + fp(lam[j]))
            } else {
                (f(lam[i]) - f(lam[j])) / dl
            }
        });
        FrechetOp {
            u: e.eigenvectors,
            l,
        }
    }

    fn apply(&self, dy: &DMatrix<f64>) -> DMatrix<f64> {
        let inner = self.u.transpose() * sym(dy) * &self.u;
        &self.u * self.l.component_mul(&inner) * self.u.transpose()
    }
}

/// Daleckii–Krein gradient of `U f(Λ) Uᵀ` at symmetric `x` for cotangent
/// `dy` (see [`FrechetOp`]).
fn daleckii_krein(
    x: &DMatrix<f64>,
    dy: &DMatrix<f64>,
    f: impl Fn(f64) -> f64,
    fp: impl Fn(f64) -> f64,
) -> DMatrix<f64> {
    FrechetOp::new(x, f, fp).apply(dy)
}

/// Derivative of `G ↦ G^-½` at `g`.
fn inv_sqrt_frechet(g: &DMatrix<f64>) -> FrechetOp {
    FrechetOp::new(g, |v| 1.0 / v.sqrt(), |v| -0.5 * v.powf(-1.5))
}

/// Exact symmetric gradient (one `[n, n]` per batch matrix) of `⟨dY, G(X)⟩`
/// for the Karcher mean `G` of symmetric positive definite `xs`.
///
/// `G` is defined implicitly by `F(G, X) = Σ_i log(S X_i S) = 0`, `S =
/// G^-½` (Moakher 2005); by the implicit function theorem `dG = −(∂F/∂G)⁻¹
/// Σ_i ∂F/∂X_i [dX_i]`, with `∂F/∂G [E] = Σ_i Dlog(Y_i)[dS X_i S + S X_i
/// dS]`, `dS = D(·)^-½(G)[E]`, and `∂F/∂X_i [E] = Dlog(Y_i)[S E S]`, `Y_i =
/// S X_i S` (Fréchet derivatives by Daleckii–Krein). Both Jacobians are
/// built densely on the `n(n+1)/2` symmetric coordinates (basis `E_ii`,
/// `E_ij + E_ji`, upper triangle row by row) and the transposed system is
/// solved (LU) for the cotangent.
fn karcher_mean_vjp(
    kind: SpdOp,
    xs: &[DMatrix<f64>],
    g: &DMatrix<f64>,
    dy: &DMatrix<f64>,
) -> Result<Vec<DMatrix<f64>>> {
    let n = g.nrows();
    let coords: Vec<(usize, usize)> = (0..n).flat_map(|i| (i..n).map(move |j| (i, j))).collect();
    let p = coords.len();
    let basis = |k: usize| {
        let (i, j) = coords[k];
        let mut e = DMatrix::zeros(n, n);
        e[(i, j)] = 1.0;
        e[(j, i)] = 1.0;
        e
    };
    let s = eig_apply(g, |v| 1.0 / v.sqrt());
    let ds_op = inv_sqrt_frechet(g);
    let logs: Vec<FrechetOp> = xs
        .iter()
        .map(|x| FrechetOp::new(&sym(&(&s * x * &s)), f64::ln, |v| 1.0 / v))
        .collect();
    let sx: Vec<DMatrix<f64>> = xs.iter().map(|x| &s * x).collect();
    let mut jg = DMatrix::<f64>::zeros(p, p);
    let mut jx = vec![DMatrix::<f64>::zeros(p, p); xs.len()];
    for k in 0..p {
        let e = basis(k);
        let ds = ds_op.apply(&e);
        let ses = &s * &e * &s;
        for (b, x) in xs.iter().enumerate() {
            let dyi = &ds * x * &s + &sx[b] * &ds;
            let col_g = logs[b].apply(&dyi);
            let col_x = logs[b].apply(&ses);
            for (o, &(i, j)) in coords.iter().enumerate() {
                jg[(o, k)] += col_g[(i, j)];
                jx[b][(o, k)] = col_x[(i, j)];
            }
        }
    }
    let dys = sym(dy);
    let w = nalgebra::DVector::from_iterator(
        p,
        coords.iter().map(|&(i, j)| {
            if i == j {
                dys[(i, i)]
            } else {
                dys[(i, j)] + dys[(j, i)]
            }
        }),
    );
    let v = jg
        .transpose()
        .lu()
        .solve(&w)
        .ok_or_else(|| err(kind, "the Karcher-mean Jacobian is singular".into()))?;
    Ok(jx
        .iter()
        .map(|j| {
            let gc = -(j.transpose() * &v);
            let mut out = DMatrix::zeros(n, n);
            for (k, &(i, jj)) in coords.iter().enumerate() {
                // ⟨Gr, dX⟩ = Σ_{i≤j} Gr_ij c_ij, counted twice off the diagonal
                let val = if i == jj { gc[k] } else { 0.5 * gc[k] };
                out[(i, jj)] = val;
                out[(jj, i)] = val;
            }
            out
        })
        .collect())
}

/// Gradient w.r.t. `x` of Riemannian batch norm `Y_i = sym(B^½ S X_i S
/// B^½)`, `S = G^-½`, `G` the Karcher mean (the bias held fixed): the
/// explicit path `sym(S Z_i S)`, `Z_i = B^½ sym(dY_i) B^½`, plus the path
/// through `G` (cotangent `D(·)^-½(G)[Σ_i Z_i S X_i + X_i S Z_i]`).
fn batch_norm_vjp(
    xs: &[DMatrix<f64>],
    bias: &DMatrix<f64>,
    dys: &[DMatrix<f64>],
    eps: f64,
) -> Result<Vec<DMatrix<f64>>> {
    let n = bias.nrows();
    let g = karcher_mean(xs, eps);
    let s = eig_apply(&g, |v| 1.0 / v.sqrt());
    let bh = eig_apply(&sym(bias), f64::sqrt);
    let zs: Vec<DMatrix<f64>> = dys.iter().map(|d| &bh * sym(d) * &bh).collect();
    let ws = xs.iter().zip(&zs).fold(DMatrix::zeros(n, n), |a, (x, z)| {
        a + z * &s * x + x * &s * z
    });
    let wg = inv_sqrt_frechet(&g).apply(&ws);
    let through_g = karcher_mean_vjp(SpdOp::BatchNorm, xs, &g, &wg)?;
    Ok(zs
        .iter()
        .zip(through_g)
        .map(|(z, t)| sym(&(&s * z * &s)) + t)
        .collect())
}

/// True when [`spd_backward`] covers `kind` natively (every kind).
pub fn backward_native(kind: SpdOp) -> bool {
    matches!(
        kind,
        SpdOp::BiMap | SpdOp::ReEig | SpdOp::LogEig | SpdOp::KarcherMean | SpdOp::BatchNorm
    )
}

/// Gradient w.r.t. `x` of op `kind` (`args` = the forward operands, then
/// `dy`): `bi_map` `W dY Wᵀ`, `re_eig` / `log_eig` Daleckii–Krein,
/// `karcher_mean` / `batch_norm` implicit differentiation of the Karcher
/// mean (tolerance `eps`; the batch-norm bias is held fixed).
pub fn spd_backward(kind: SpdOp, eps: f64, args: &[Operand<'_>], sym_tol: f64) -> Result<Vec<f64>> {
    if !backward_native(kind) || args.len() < 2 {
        return Err(err(kind, "backward not available natively".into()));
    }
    check_finite(kind, args)?;
    let (fwd, dy) = args.split_at(args.len() - 1);
    let (b, n) = batch_square(kind, "x", &fwd[0])?;
    let xs = matrices(fwd[0].data, b, n);
    for (i, x) in xs.iter().enumerate() {
        check_sym(kind, "x", i, x, sym_tol)?;
    }
    let out: Vec<DMatrix<f64>> = match kind {
        SpdOp::BiMap => {
            let w = fwd
                .get(1)
                .ok_or_else(|| err(kind, "backward needs w".into()))?;
            let m = w.dims.get(1).copied().unwrap_or(0);
            check_len(K, "w", w.data.len(), n * m)?;
            check_len(K, "dy", dy[0].data.len(), b * m * m)?;
            let wm = DMatrix::from_row_slice(n, m, &w.data[..n * m]);
            let dys = matrices(dy[0].data, b, m);
            dys.iter().map(|d| &wm * d * wm.transpose()).collect()
        }
        SpdOp::KarcherMean | SpdOp::BatchNorm => {
            if b == 0 {
                return Err(err(kind, "needs a non-empty batch".into()));
            }
            let xs: Vec<_> = xs.iter().map(sym).collect();
            xs.iter()
                .enumerate()
                .try_for_each(|(i, x)| check_pd(kind, "x", i, x))?;
            if kind == SpdOp::KarcherMean {
                check_len(K, "dy", dy[0].data.len(), n * n)?;
                let d = DMatrix::from_row_slice(n, n, dy[0].data);
                let g = karcher_mean(&xs, eps);
                karcher_mean_vjp(kind, &xs, &g, &d)?
            } else {
                let bias = fwd
                    .get(1)
                    .ok_or_else(|| err(kind, "backward needs the bias".into()))?;
                if bias.dims != [n, n] {
                    return Err(err(
                        kind,
                        format!("bias dims {:?} are not [{n}, {n}]", bias.dims),
                    ));
                }
                check_len(K, "bias", bias.data.len(), n * n)?;
                let bm = DMatrix::from_row_slice(n, n, bias.data);
                check_sym(kind, "bias", 0, &bm, sym_tol)?;
                check_pd(kind, "bias", 0, &sym(&bm))?;
                check_len(K, "dy", dy[0].data.len(), b * n * n)?;
                batch_norm_vjp(&xs, &bm, &matrices(dy[0].data, b, n), eps)?
            }
        }
        _ => {
            check_len(K, "dy", dy[0].data.len(), b * n * n)?;
            let dys = matrices(dy[0].data, b, n);
            if kind == SpdOp::LogEig {
                xs.iter()
                    .enumerate()
                    .try_for_each(|(i, x)| check_pd(kind, "x", i, &sym(x)))?;
            }
            xs.iter()
                .zip(&dys)
                .map(|(x, d)| {
                    if kind == SpdOp::LogEig {
                        daleckii_krein(x, d, f64::ln, |v| 1.0 / v)
                    } else {
                        let step = |v: f64| if v > eps { 1.0 } else { 0.0 };
                        daleckii_krein(x, d, |v| v.max(eps), step)
                    }
                })
                .collect()
        }
    };
    Ok(flatten(&out))
}

#[cfg(test)]
#[path = "spd_tests.rs"]
mod tests;
