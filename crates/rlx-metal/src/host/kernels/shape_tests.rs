//! Tests for the data-movement kernels against naive index loops.

use super::*;
use crate::host::kernels::testutil::rand_vec;
use half::f16;

#[test]
fn gathers() {
    let (vocab, dim) = (13, 7);
    let table = rand_vec(vocab * dim, 1);
    let idx = [3i32, 0, 12, 3];
    let mut out = vec![0f32; 4 * dim];
    gather_rows(&table, &idx, &mut out, 4, vocab, dim).unwrap();
    for (i, &t) in idx.iter().enumerate() {
        assert_eq!(
            &out[i * dim..(i + 1) * dim],
            &table[t as usize * dim..(t as usize + 1) * dim]
        );
    }
    let err = gather_rows(&table, &[13], &mut out, 1, vocab, dim).unwrap_err();
    assert!(
        err.to_string().contains("index 13 out of range 0..13"),
        "{err}"
    );
    assert!(gather_rows(&table, &[-1], &mut out, 1, vocab, dim).is_err());

    let (outer, axis, trail) = (3, 5, 2);
    let x: Vec<i32> = (0..(outer * axis * trail) as i32).collect();
    let idx = [4i32, 4, 1];
    let mut o = vec![0i32; outer * 3 * trail];
    gather_axis(&x, &idx, &mut o, outer, axis, trail, 3).unwrap();
    for a in 0..outer {
        for (i, &t) in idx.iter().enumerate() {
            for k in 0..trail {
                assert_eq!(
                    o[(a * 3 + i) * trail + k],
                    x[(a * axis + t as usize) * trail + k]
                );
            }
        }
    }
}

#[test]
fn narrow_split_concat() {
    let (rows, n) = (3, 13);
    let x: Vec<u16> = (0..(rows * n) as u16).collect();
    let mut a = vec![0u16; rows * 4];
    let mut b = vec![0u16; rows * 2];
    let mut c = vec![0u16; rows * 7];
    split_last(
        &x,
        &mut [&mut a[..], &mut b[..], &mut c[..]],
        &[4, 2, 7],
        rows,
    )
    .unwrap();
    for r in 0..rows {
        assert_eq!(&a[r * 4..r * 4 + 4], &x[r * n..r * n + 4]);
        assert_eq!(&b[r * 2..r * 2 + 2], &x[r * n + 4..r * n + 6]);
        assert_eq!(&c[r * 7..r * 7 + 7], &x[r * n + 6..r * n + 13]);
    }
    let mut back = vec![0u16; rows * n];
    concat(&[&a[..], &b[..], &c[..]], &[4, 2, 7], &mut back, rows, 1).unwrap();
    assert_eq!(back, x);
    assert!(narrow_last(&x, &mut a, rows, n, 10, 4).is_err());

    // Middle-axis concat with inner > 1: [2, 1, 3] ++ [2, 2, 3].
    let p: Vec<f32> = (0..6).map(|v| v as f32).collect();
    let q: Vec<f32> = (100..112).map(|v| v as f32).collect();
    let mut out = vec![0f32; 18];
    concat(&[&p[..], &q[..]], &[1, 2], &mut out, 2, 3).unwrap();
    assert_eq!(&out[..9], &[0., 1., 2., 100., 101., 102., 103., 104., 105.]);
    assert_eq!(&out[9..], &[3., 4., 5., 106., 107., 108., 109., 110., 111.]);
}

fn naive_strided(x: &[f32], strides: &[usize], dims: &[usize]) -> Vec<f32> {
    let n: usize = dims.iter().product();
    (0..n)
        .map(|mut f| {
            let mut off = 0;
            for k in (0..dims.len()).rev() {
                off += (f % dims[k]) * strides[k];
                f /= dims[k];
            }
            x[off]
        })
        .collect()
}

#[test]
fn strided_copy_transposes_and_broadcasts() {
    // (input dims, permutation) → strides of the permuted view.
    let cases: &[(&[usize], &[usize])] = &[
        (&[33, 65], &[1, 0]),
        (&[1, 7], &[1, 0]),
        (&[3, 7, 13], &[0, 2, 1]),
        (&[3, 7, 13], &[2, 0, 1]),
        (&[2, 3, 5, 7], &[3, 1, 0, 2]),
        (&[300, 257], &[1, 0]),
    ];
    for &(dims, perm) in cases {
        let n: usize = dims.iter().product();
        let x = rand_vec(n, 2);
        let mut cs = vec![1; dims.len()];
        for k in (0..dims.len() - 1).rev() {
            cs[k] = cs[k + 1] * dims[k + 1];
        }
        let od: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
        let os: Vec<usize> = perm.iter().map(|&p| cs[p]).collect();
        let mut out = vec![0f32; n];
        strided_copy(&x, &os, &od, &mut out).unwrap();
        assert_eq!(out, naive_strided(&x, &os, &od), "{dims:?} {perm:?}");
    }
    // Broadcast [1, 7] → [5, 7] and [5, 1] → [5, 3].
    let x = rand_vec(7, 3);
    let mut out = vec![0f32; 35];
    strided_copy(&x, &[0, 1], &[5, 7], &mut out).unwrap();
    assert_eq!(out, naive_strided(&x, &[0, 1], &[5, 7]));
    strided_copy(&x, &[1, 0], &[5, 3], &mut out).unwrap();
    assert_eq!(&out[..15], &naive_strided(&x, &[1, 0], &[5, 3])[..]);
    assert!(strided_copy(&x, &[2, 1], &[5, 3], &mut out).is_err());
}

#[test]
fn reverse_axes() {
    let dims = [3usize, 4, 5];
    let x: Vec<u8> = (0..60).collect();
    for mask in [
        [true, false, false],
        [false, false, true],
        [true, true, true],
        [false, true, false],
    ] {
        let mut out = vec![0u8; 60];
        reverse(&x, &dims, &mask, &mut out).unwrap();
        for a in 0..3 {
            for b in 0..4 {
                for c in 0..5 {
                    let sa = if mask[0] { 2 - a } else { a };
                    let sb = if mask[1] { 3 - b } else { b };
                    let sc = if mask[2] { 4 - c } else { c };
                    assert_eq!(out[(a * 4 + b) * 5 + c], x[(sa * 4 + sb) * 5 + sc]);
                }
            }
        }
    }
}

#[test]
fn scatter_copy_resize() {
    let mut dst = vec![1f32; 4 * 3];
    let src = rand_vec(3 * 3, 4);
    scatter_add(&mut dst, &[2, 0, 2], &src, 3, 3, 4).unwrap();
    for j in 0..3 {
        assert_eq!(dst[j], 1.0 + src[3 + j]);
        assert_eq!(dst[3 + j], 1.0);
        assert!((dst[6 + j] - (1.0 + src[j] + src[6 + j])).abs() < 1e-6);
    }
    assert!(scatter_add(&mut dst, &[4], &src, 1, 3, 4).is_err());
    let mut dh = vec![f16::ONE; 3];
    let sh: Vec<f16> = [0.5f32, 1.0, 2.0]
        .iter()
        .map(|&v| f16::from_f32(v))
        .collect();
    scatter_add(&mut dh, &[0], &sh, 1, 3, 1).unwrap();
    assert_eq!(
        dh.iter().map(|v| v.to_f32()).collect::<Vec<_>>(),
        vec![1.5, 2.0, 3.0]
    );

    let mut c = vec![0f32; 9];
    copy(&src, &mut c, 9).unwrap();
    assert_eq!(c, src);

    let (planes, h, w) = (2, 3, 5);
    let x = rand_vec(planes * h * w, 5);
    let mut out = vec![0f32; planes * 4 * h * w];
    resize_nearest2x(&x, &mut out, planes, h, w).unwrap();
    for p in 0..planes {
        for i in 0..2 * h {
            for j in 0..2 * w {
                assert_eq!(
                    out[(p * 2 * h + i) * 2 * w + j],
                    x[(p * h + i / 2) * w + j / 2]
                );
            }
        }
    }
}

#[test]
fn gather_axis_negative_indices_count_from_end() {
    // x [outer=2, axis=3, trailing=1]
    let x = [0i32, 1, 2, 10, 11, 12];
    let mut o = [0i32; 4];
    gather_axis(&x, &[-1, 0], &mut o, 2, 3, 1, 2).unwrap();
    assert_eq!(o, [2, 0, 12, 10]);
    assert!(gather_axis(&x, &[-4], &mut o, 2, 3, 1, 1).is_err());
    assert!(gather_axis(&x, &[3], &mut o, 2, 3, 1, 1).is_err());
}
