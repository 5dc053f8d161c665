//! softmax.metal: last-axis softmax in place, f32 / f16, odd row lengths,
//! partial simdgroups, large logits (the max must be subtracted).
//!
//! Tolerances: f32 `1e-7 + 1e-5·|ref|`; f16 `1e-5 + 2^-10·|ref|` (f32
//! math, one rounding to f16; outputs are at most 1).

use super::common::{assert_close, lib, row_threads, uniform, Dt, DTS};
use msl_sim::Grid;
use rlx_metal::metal::args::{KernelArgs, SoftmaxArgs};
use rlx_metal::metal::kernels::Family;

#[test]
fn softmax_matches_reference() {
    let lib = lib(Family::Softmax);
    let shapes: [(u32, u32, u32); 7] = [
        (1, 1, 0),
        (3, 31, 0),
        (4, 33, 0),
        (2, 100, 0),
        (3, 1000, 0),
        (2, 100, 40), // partial second simdgroup
        (2, 33, 1),   // a single lane
    ];
    for dt in DTS {
        let (atol, rtol) = match dt {
            Dt::F32 => (1e-7, 1e-5),
            Dt::F16 => (1e-5, 1.0 / 1024.0),
        };
        let kernel = format!("softmax_{}", dt.suffix());
        for (k, &(rows, cols, tpg)) in shapes.iter().enumerate() {
            let n = (rows * cols) as usize;
            // logits far from 0: exp without the max would overflow in f32
            let mut x = uniform(k as u64 + 11, n, -8.0, 8.0);
            for (i, v) in x.iter_mut().enumerate() {
                if (i / cols as usize) % 2 == 1 {
                    *v += 100.0;
                }
            }
            let x = dt.round(&x);
            let args = SoftmaxArgs { rows, cols };
            let mut data = dt.encode(&x);
            let t = if tpg == 0 { row_threads(cols) } else { tpg };
            lib.dispatch(
                &kernel,
                args.as_bytes(),
                &mut [&mut data],
                Grid::d1(rows, t),
                &[],
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let mut want = Vec::with_capacity(n);
            for row in x.chunks(cols as usize) {
                let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
                let s: f64 = row.iter().map(|&v| (v as f64 - m).exp()).sum();
                want.extend(row.iter().map(|&v| (v as f64 - m).exp() / s));
            }
            let got = dt.decode(&data);
            assert_close(
                &format!("{kernel} rows={rows} cols={cols} tpg={t}"),
                &got,
                &want,
                atol,
                rtol,
            );
            for row in got.chunks(cols as usize) {
                let s: f32 = row.iter().sum();
                assert!((s - 1.0).abs() < 2e-2, "{kernel}: row sums to {s}");
            }
        }
    }
}
