//! Signal family: fft, log_mel, welch_peaks.

use super::*;
use rlx_ir::op::FftNorm;

#[test]
fn fft_block_and_complex() {
    let op = Op::Fft {
        inverse: false,
        norm: FftNorm::Ortho,
    };
    assert_eq!(ok(&op, &[f32s(&[3, 8])]), f32s(&[3, 8]));
    let c = shp(&[sym("b"), st(7)], DType::C64);
    assert_eq!(ok(&op, std::slice::from_ref(&c)), c);
    let c = shp(&[st(2), sym("n")], DType::C64);
    assert_eq!(ok(&op, std::slice::from_ref(&c)), c);
    err(&op, &[f32s(&[3, 7])], "must be even");
    err(
        &op,
        &[shp(&[st(3), sym("n")], DType::F32)],
        "must be a static size",
    );
    err(
        &op,
        &[Shape::of(&[3, 8], DType::I32)],
        "float (2N-real block) or c64",
    );
    err(&op, &[Shape::scalar(DType::F32)], "rank >= 1");
    err(&op, &[], "expects 1 input(s), got 0");
}

#[test]
fn log_mel() {
    let op = Op::LogMel { n_fft: 8 };
    let spec = shp(&[sym("frames"), st(16)], DType::F32);
    let y = ok(&op, &[spec.clone(), f32s(&[4, 5])]);
    assert_eq!(y, shp(&[sym("frames"), st(4)], DType::F32));
    assert_eq!(ok(&op, &[spec.clone(), f32s(&[4, 3])]).dims[1], st(4));
    err(&op, &[spec.clone(), f32s(&[4, 6])], "1..=5 bins");
    err(
        &op,
        &[f32s(&[10, 15]), f32s(&[4, 5])],
        "(2·n_fft) must be 16",
    );
    err(
        &op,
        &[spec, Shape::of(&[4, 5], DType::F16)],
        "dtypes differ",
    );
    err(
        &Op::LogMel { n_fft: 0 },
        &[f32s(&[1, 0]), f32s(&[1, 1])],
        "n_fft must be >= 1",
    );
}

#[test]
fn welch_peaks() {
    let op = Op::WelchPeaks {
        n_fft: 8,
        n_segments: 3,
        k: 2,
    };
    assert_eq!(ok(&op, &[f32s(&[6, 16])]), f32s(&[2, 2]));
    // result is f32 whatever the spectrum's float type
    assert_eq!(ok(&op, &[Shape::of(&[6, 16], DType::F16)]), f32s(&[2, 2]));
    err(&op, &[f32s(&[7, 16])], "not a multiple of n_segments 3");
    err(
        &op,
        &[shp(&[sym("r"), st(16)], DType::F32)],
        "needs n_segments 1",
    );
    let one = Op::WelchPeaks {
        n_fft: 8,
        n_segments: 1,
        k: 5,
    };
    let y = ok(&one, &[shp(&[sym("r"), st(16)], DType::F32)]);
    assert_eq!(y, shp(&[sym("r"), st(5)], DType::F32));
    let too_many = Op::WelchPeaks {
        n_fft: 8,
        n_segments: 1,
        k: 6,
    };
    err(&too_many, &[f32s(&[1, 16])], "exceeds the 5 one-sided bins");
}
