//! Tests of the misc kernels against per-element definitions.

use super::*;
use rlx_ir::rng::{philox_normal, philox_uniform};

#[test]
fn fills_match_the_per_element_definition_in_parallel_and_serial() {
    // 70_001 > PAR_MIN: the parallel path, an odd tail block
    for n in [7usize, 70_001] {
        let mut u = vec![0f32; n];
        rng_uniform(&mut u, -1.0, 3.0, 0xDEAD_BEEF, 5);
        let mut z = vec![0f32; n];
        rng_normal(&mut z, 2.0, 0.5, 0xDEAD_BEEF, 5);
        for i in 0..n {
            let ui = -1.0 + 4.0 * philox_uniform(0xDEAD_BEEF, 5, i as u64);
            assert_eq!(u[i].to_bits(), ui.to_bits(), "uniform {i}");
            let zi = 2.0 + 0.5 * philox_normal(0xDEAD_BEEF, 5, i as u64);
            assert_eq!(z[i].to_bits(), zi.to_bits(), "normal {i}");
        }
    }
    // a prefix of a longer fill is the shorter fill
    let mut a = vec![0f32; 10];
    let mut b = vec![0f32; 99];
    rng_normal(&mut a, 0.0, 1.0, 1, 0);
    rng_normal(&mut b, 0.0, 1.0, 1, 0);
    assert_eq!(a[..], b[..10]);
}

#[test]
fn vq_assign_picks_the_nearest_and_the_lowest_tie() {
    let x = [0.0, 0.0, 1.0, 1.0, 5.0, -5.0];
    // rows 1 and 2 equal: a tie resolves to 1
    let cb = [3.0, 3.0, 1.0, 1.1, 1.0, 1.1, 4.0, -4.0];
    let mut out = [9i32; 3];
    vq_assign(&x, &cb, &mut out, (3, 2, 4), VQ_L2).unwrap();
    assert_eq!(out, [1, 1, 3]);
    vq_assign(&x, &cb, &mut out, (3, 2, 4), VQ_DOT).unwrap();
    assert_eq!(out, [0, 0, 3]); // all-zero row: every score 0, index 0
    vq_assign(&x, &cb, &mut out, (3, 2, 4), VQ_COSINE).unwrap();
    assert_eq!(out, [0, 0, 3]);
    let e = vq_assign(&x, &cb, &mut out, (3, 2, 4), 7).unwrap_err();
    assert!(e.to_string().starts_with("[vq_assign]"), "{e}");
    let e = vq_assign(&x, &cb, &mut out, (3, 2, 9), 0).unwrap_err();
    assert!(e.to_string().contains("codebook"), "{e}");
}

#[test]
fn axial_rope_rotates_pairs_by_grid_angles() {
    let a = AxialRope {
        batch: 1,
        seq: 6,
        heads: 1,
        head_dim: 4,
        end_x: 3,
        end_y: 2,
        theta: 10.0,
        repeat_factor: 1,
    };
    let src: Vec<f32> = (0..24).map(|i| i as f32 * 0.25 - 2.0).collect();
    let mut dst = vec![0f32; 24];
    axial_rope2d(&src, &mut dst, &a).unwrap();
    // head_dim 4: one frequency (1.0); pair 0 by x, pair 1 by y
    for s in 0..6 {
        let (gx, gy) = ((s % 3) as f64, (s / 3) as f64);
        for (p, ang) in [(0, gx), (1, gy)] {
            let (x0, x1) = (src[s * 4 + 2 * p] as f64, src[s * 4 + 2 * p + 1] as f64);
            let want0 = x0 * ang.cos() - x1 * ang.sin();
            let want1 = x0 * ang.sin() + x1 * ang.cos();
            assert!((dst[s * 4 + 2 * p] as f64 - want0).abs() < 1e-6);
            assert!((dst[s * 4 + 2 * p + 1] as f64 - want1).abs() < 1e-6);
        }
    }
    let e = axial_rope2d(&src, &mut dst, &AxialRope { seq: 7, ..a }).unwrap_err();
    assert!(e.to_string().starts_with("[axial_rope2d] seq 7"), "{e}");
    let e = axial_rope2d(&src, &mut dst, &AxialRope { head_dim: 6, ..a }).unwrap_err();
    assert!(e.to_string().contains("multiple of 4"), "{e}");
}
