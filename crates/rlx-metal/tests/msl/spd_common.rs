//! Setup shared by the spd.metal tests (`spd`, `spd_mean`): f32 byte
//! encoding, matrices `Q diag(λ) Qᵀ` of a known spectrum, and the
//! validation tag a kernel writes over an output matrix with the
//! `StatusCheck` error it reports.

use super::common::{uniform, Dt};
use nalgebra::{DMatrix, DVector};
use rlx_metal::metal::check::{StatusCheck, STATUS_TAG};
use rlx_metal::metal::plan::BufferBinding;
use rlx_metal::thunk::Buf;

/// f32 little-endian bytes.
pub fn enc(v: &[f32]) -> Vec<u8> {
    Dt::F32.encode(v)
}

/// f32 values of little-endian bytes.
pub fn dec(b: &[u8]) -> Vec<f32> {
    Dt::F32.decode(b)
}

/// A random `n × n` orthogonal matrix: the Q factor of a matrix of
/// [`uniform`] values in [-1, 1) drawn from `seed`.
pub fn orthogonal(n: usize, seed: u64) -> DMatrix<f64> {
    let r = uniform(seed, n * n, -1.0, 1.0);
    DMatrix::from_iterator(n, n, r.iter().map(|&v| f64::from(v)))
        .qr()
        .q()
}

/// `Q diag(lam) Qᵀ` as f32 (`Q` = [`orthogonal`] of `seed`), exactly
/// symmetric in f32.
pub fn with_spectrum(lam: &[f64], seed: u64) -> Vec<f32> {
    let n = lam.len();
    let q = orthogonal(n, seed);
    let x = &q * DMatrix::from_diagonal(&DVector::from_vec(lam.to_vec())) * q.transpose();
    (0..n * n)
        .map(|e| {
            let (i, j) = (e / n, e % n);
            (0.5 * (x[(i, j)] + x[(j, i)])) as f32
        })
        .collect()
}

/// Tag word 0 of matrix `b` of an `[.., n, n]` output (`None` untagged).
pub fn tag(out: &[u8], b: usize, n: usize) -> Option<u32> {
    let at = b * n * n * 4;
    let w = u32::from_le_bytes(out[at..at + 4].try_into().unwrap());
    (w & 0xFFFF_FF00 == STATUS_TAG).then_some(w & 0xFF)
}

/// The error message the `StatusCheck` of `op` reports for a tagged
/// `[batch, n, n]` output `out` at offset 0 (panics if it passes).
pub fn status_error(
    op: &str,
    operands: Vec<&'static str>,
    out: &[u8],
    batch: usize,
    n: usize,
) -> String {
    StatusCheck {
        thunk: 0,
        op: op.into(),
        operands,
        status: BufferBinding {
            buffer: Buf::Arena,
            offset: 0,
        },
        stride: (n * n) as u32,
        count: batch as u32,
    }
    .verify(out)
    .unwrap_err()
    .to_string()
}
