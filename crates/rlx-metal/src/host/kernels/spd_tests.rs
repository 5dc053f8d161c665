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
