//! Host splat kernels: an isotropic splat's record against closed forms,
//! the list cut, the SH basis gradient against finite differences, and
//! length errors. (The paper-level oracle and the gradient checks are in
//! `tests/test_splat.py`.)

use super::*;

fn dims(g: usize, k: usize) -> SplatDims {
    SplatDims {
        splats: g,
        sh_coeffs: k,
        width: 11,
        height: 9,
        tile_size: 4,
        radius_scale: 3.0,
        alpha_cutoff: 1.0 / 255.0,
        max_splat_steps: 64,
        transmittance_threshold: 1e-4,
        max_list_entries: 1 << 16,
    }
}

fn identity_camera() -> Vec<f32> {
    let mut m = vec![0.0f32; 20];
    for i in 0..4 {
        m[i * 5] = 1.0;
    }
    m[16..].copy_from_slice(&[10.0, 10.0, 5.5, 4.5]);
    m
}

#[test]
fn isotropic_record_matches_closed_form() {
    let (x, y, z, s) = (0.2f32, -0.1f32, 2.0f32, 0.3f32);
    let p = SplatParams {
        positions: &[x, y, z],
        scales: &[s, s, s],
        rotations: &[2.0, 0.0, 0.0, 0.0],
        opacities: &[0.5],
        colors: &[0.1, 0.2, 0.3],
        sh: &[],
    };
    let mut rec = [0.0f32; 16];
    prepare(&p, &identity_camera(), &dims(1, 0), &mut rec).unwrap();
    let (x, y, z, s) = (x as f64, y as f64, z as f64, s as f64);
    // Σ' = s² J Jᵀ + 0.3 I with J = [[f/z, 0, -f x/z²], [0, f/z, -f y/z²]]
    let f = 10.0;
    let a = s * s * (f * f / (z * z) + f * f * x * x / z.powi(4)) + 0.3;
    let b = s * s * f * f * x * y / z.powi(4);
    let c = s * s * (f * f / (z * z) + f * f * y * y / z.powi(4)) + 0.3;
    let det = a * c - b * b;
    let want = [
        f * x / z + 5.5,
        f * y / z + 4.5,
        z,
        0.0,
        c / det,
        -b / det,
        a / det,
    ];
    for (i, w) in want.iter().enumerate() {
        if i != 3 {
            assert!(
                (rec[i] as f64 - w).abs() < 1e-5 * w.abs().max(1.0),
                "{i}: {rec:?}"
            );
        }
    }
    let mid = 0.5 * (a + c);
    let lam = mid + (mid * mid - det).max(0.1).sqrt();
    assert_eq!(rec[3] as f64, (3.0 * lam.sqrt()).ceil());
    assert_eq!(&rec[7..11], &[0.5, 0.1, 0.2, 0.3]);
    assert_eq!(rec[15], 1.0);
    // behind the camera: culled, all zero
    let behind = SplatParams {
        positions: &[0.2, -0.1, -2.0],
        ..p
    };
    prepare(&behind, &identity_camera(), &dims(1, 0), &mut rec).unwrap();
    assert!(rec.iter().all(|&v| v == 0.0));
}

#[test]
fn sh_basis_gradient_matches_finite_differences() {
    let d = [0.3, -0.5, 0.81];
    let g = sh_basis_grad(d);
    let h = 1e-6;
    for a in 0..3 {
        let mut dp = d;
        let mut dm = d;
        dp[a] += h;
        dm[a] -= h;
        let (bp, bm) = (sh_basis(dp), sh_basis(dm));
        for j in 0..16 {
            let fd = (bp[j] - bm[j]) / (2.0 * h);
            assert!(
                (g[j][a] - fd).abs() < 1e-6,
                "basis {j} axis {a}: {} vs {fd}",
                g[j][a]
            );
        }
    }
}

#[test]
fn list_cut_keeps_the_first_entries_in_tile_order() {
    // two records covering all 3×3 tiles, at depths 2 and 1
    let mut recs = vec![[0.0f64; PREP_WIDTH]; 2];
    for (i, r) in recs.iter_mut().enumerate() {
        r[2] = 2.0 - i as f64;
        r[13] = 3.0;
        r[14] = 3.0;
        r[15] = 1.0;
    }
    let d = SplatDims {
        max_list_entries: 3,
        ..dims(2, 0)
    };
    let l = tile_lists("t", &recs, &d).unwrap();
    assert_eq!(l.lens, [2, 1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&l.ids[..3], &[1, 0, 1]); // nearer first
                                         // a garbage record (NaN corner) is ignored, not a panic
    recs[0][11] = f64::NAN;
    let l = tile_lists("t", &recs, &dims(2, 0)).unwrap();
    assert_eq!(l.ids.len(), 9);
}

#[test]
fn short_operands_are_errors() {
    let p = SplatParams {
        positions: &[0.0; 5],
        scales: &[0.1; 6],
        rotations: &[1.0; 8],
        opacities: &[0.5; 2],
        colors: &[0.0; 6],
        sh: &[],
    };
    let mut img = vec![0.0f32; 11 * 9 * 3];
    let e = render(&p, &identity_camera(), &dims(2, 0), &mut img).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("[gaussian_splat_render] positions"),
        "{e}"
    );
    let e = rasterize(&[0.0; 16], &dims(1, 0), &mut img[..5]).unwrap_err();
    assert!(e.to_string().contains("dst"), "{e}");
}
