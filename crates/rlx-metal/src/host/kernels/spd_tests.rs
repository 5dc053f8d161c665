//! SPD kernel checks that need no reference: identities of the matrix
//! functions and the input errors. The comparison against scipy.linalg
//! (logm / sqrtm / expm, 1e-10) is `tests/test_spd_native.py`.

use super::*;

fn op<'a>(data: &'a [f64], dims: &'a [usize]) -> Operand<'a> {
    Operand { data, dims }
}

#[test]
fn log_eig_of_a_diagonal_is_the_log_of_its_entries() {
    let x = [2.0, 0.0, 0.0, 5.0];
    let y = spd_forward(SpdOp::LogEig, 0.0, &[op(&x, &[1, 2, 2])], 1e-9).unwrap();
    let want = [2f64.ln(), 0.0, 0.0, 5f64.ln()];
    for (a, b) in y.iter().zip(want) {
        assert!((a - b).abs() < 1e-14, "{y:?}");
    }
    // Karcher mean of one matrix is itself
    let x = [4.0, 1.0, 1.0, 3.0];
    let g = spd_forward(SpdOp::KarcherMean, 1e-12, &[op(&x, &[1, 2, 2])], 1e-9).unwrap();
    for (a, b) in g.iter().zip(x) {
        assert!((a - b).abs() < 1e-12, "{g:?}");
    }
}

#[test]
fn non_symmetric_and_indefinite_inputs_name_the_op() {
    let asym = [1.0, 2.0, 0.0, 1.0];
    let e = spd_forward(SpdOp::LogEig, 0.0, &[op(&asym, &[2, 2])], 1e-9).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("[spd] log_eig: x[0] is not symmetric"),
        "{msg}"
    );
    let indef = [1.0, 0.0, 0.0, -1.0];
    let e = spd_forward(SpdOp::KarcherMean, 1e-6, &[op(&indef, &[1, 2, 2])], 1e-9).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("karcher_mean: x[0] is not positive definite"),
        "{msg}"
    );
    // rectification accepts an indefinite matrix
    let y = spd_forward(SpdOp::ReEig, 0.5, &[op(&indef, &[2, 2])], 1e-9).unwrap();
    assert_eq!(y, vec![1.0, 0.0, 0.0, 0.5]);
}

#[test]
fn non_finite_input_is_an_error_not_a_hang() {
    let x = [1.0, f64::NAN, f64::NAN, 1.0];
    let e = spd_forward(SpdOp::ReEig, 0.1, &[op(&x, &[2, 2])], 1e-9).unwrap_err();
    assert!(
        e.to_string()
            .contains("re_eig: operand 0 holds a non-finite"),
        "{e}"
    );
}

#[test]
fn karcher_mean_gradient_of_equal_matrices_is_the_mean_share() {
    // b copies of X: G = X, and moving one copy by dX moves G by dX / b
    // (to first order), so the gradient of ⟨dY, G⟩ is sym(dY) / b each.
    let x = [4.0, 1.0, 0.5, 1.0, 3.0, 0.2, 0.5, 0.2, 2.0];
    let xs: Vec<f64> = x.iter().cycle().take(27).copied().collect();
    let dy = [1.0, 2.0, -1.0, 0.0, 0.5, 3.0, 1.0, -2.0, 0.25];
    let args = [op(&xs, &[3, 3, 3]), op(&dy, &[3, 3])];
    let got = spd_backward(SpdOp::KarcherMean, 0.0, &args, 1e-9).unwrap();
    for b in 0..3 {
        for i in 0..3 {
            for j in 0..3 {
                let want = 0.5 * (dy[i * 3 + j] + dy[j * 3 + i]) / 3.0;
                let g = got[b * 9 + i * 3 + j];
                assert!((g - want).abs() < 1e-10, "[{b},{i},{j}] {g} vs {want}");
            }
        }
    }
}

#[test]
fn batch_norm_gradient_is_zero_along_a_congruence_of_the_batch() {
    // Y_i = B^½ G^-½ X_i G^-½ B^½ is invariant under X_i ↦ c·X_i (G scales
    // by c too), so the gradient is orthogonal to the direction X itself:
    // Σ_i ⟨grad_i, X_i⟩ = 0 for any dY.
    let xs = [
        3.0, 0.5, 0.5, 2.0, // X_0
        1.5, -0.3, -0.3, 1.0, // X_1
        2.0, 0.1, 0.1, 4.0, // X_2
    ];
    let bias = [2.0, 0.3, 0.3, 1.0];
    let dy = [
        1.0, -0.5, 0.2, 2.0, 0.3, 0.7, -1.0, 0.4, -0.8, 1.1, 0.6, 0.9,
    ];
    let args = [op(&xs, &[3, 2, 2]), op(&bias, &[2, 2]), op(&dy, &[3, 2, 2])];
    let got = spd_backward(SpdOp::BatchNorm, 0.0, &args, 1e-9).unwrap();
    let along: f64 = got.iter().zip(&xs).map(|(g, x)| g * x).sum();
    let size: f64 = got.iter().map(|g| g.abs()).sum();
    assert!(size > 0.1, "{got:?}");
    assert!(along.abs() < 1e-10 * size, "⟨grad, X⟩ = {along}");
}
