//! Tests for the matmul family against a naive f64 triple loop.

use super::*;
use crate::host::kernels::testutil::{assert_close, rand_vec};

fn naive(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0f64;
            for p in 0..k {
                s += a[i * k + p] as f64 * b[p * n + j] as f64;
            }
            c[i * n + j] = s as f32;
        }
    }
    c
}

const SIZES: [(usize, usize, usize); 7] = [
    (1, 1, 1),
    (3, 7, 13),
    (13, 33, 7),
    (1, 64, 300),
    (33, 1, 3),
    (70, 129, 65),
    (2, 0, 3),
];

#[test]
fn sgemm_and_f16_b_match_naive() {
    for &(m, k, n) in &SIZES {
        let a = rand_vec(m * k, 1);
        let b = rand_vec(k * n, 2);
        let want = naive(&a, &b, m, k, n);
        let mut c = vec![f32::NAN; m * n];
        sgemm(&a, &b, &mut c, m, k, n).unwrap();
        assert_close(&c, &want, 1e-5);

        let bh: Vec<f16> = b.iter().map(|&x| f16::from_f32(x)).collect();
        let bw: Vec<f32> = bh.iter().map(|x| x.to_f32()).collect();
        let want_h = naive(&a, &bw, m, k, n);
        matmul(&a, MatB::F16(&bh), &mut c, m, k, n).unwrap();
        assert_close(&c, &want_h, 1e-5);

        let ah: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
        let mut ch = vec![f16::ZERO; m * n];
        hgemm(&ah, &bh, &mut ch, m, k, n).unwrap();
        let got: Vec<f32> = ch.iter().map(|x| x.to_f32()).collect();
        assert_close(&got, &want_h, 1e-2);
    }
    assert!(sgemm(&[0.0; 5], &[0.0; 6], &mut [0.0; 4], 2, 3, 2).is_err());
}

#[test]
fn bias_act_epilogue() {
    let (m, k, n) = (5, 9, 7);
    let (a, b, bias) = (rand_vec(m * k, 3), rand_vec(k * n, 4), rand_vec(n, 5));
    let mut c = vec![0f32; m * n];
    matmul_bias_act(
        &a,
        MatB::F32(&b),
        Some(&bias),
        Some(Activation::Relu),
        &mut c,
        m,
        k,
        n,
    )
    .unwrap();
    let want: Vec<f32> = naive(&a, &b, m, k, n)
        .iter()
        .enumerate()
        .map(|(i, v)| (v + bias[i % n]).max(0.0))
        .collect();
    assert_close(&c, &want, 1e-5);
}

#[test]
fn batched_with_broadcast() {
    let (batch, m, k, n) = (3, 7, 5, 13);
    let a = rand_vec(batch * m * k, 6);
    let b = rand_vec(k * n, 7);
    let bt = Batch {
        batch,
        a_stride: m * k,
        b_stride: 0,
    };
    let mut c = vec![0f32; batch * m * n];
    batched_matmul(bt, &a, MatB::F32(&b), &mut c, m, k, n).unwrap();
    for i in 0..batch {
        let want = naive(&a[i * m * k..(i + 1) * m * k], &b, m, k, n);
        assert_close(&c[i * m * n..(i + 1) * m * n], &want, 1e-5);
    }
    // Broadcast A, dense B.
    let b2 = rand_vec(batch * k * n, 8);
    let bt = Batch {
        batch,
        a_stride: 0,
        b_stride: k * n,
    };
    batched_matmul(bt, &a, MatB::F32(&b2), &mut c, m, k, n).unwrap();
    for i in 0..batch {
        let want = naive(&a[..m * k], &b2[i * k * n..(i + 1) * k * n], m, k, n);
        assert_close(&c[i * m * n..(i + 1) * m * n], &want, 1e-5);
    }
    let bt = Batch {
        batch,
        a_stride: m * k,
        b_stride: k * n,
    };
    assert!(batched_matmul(bt, &a, MatB::F32(&b), &mut c, m, k, n).is_err());
}

#[test]
fn grouped_moe() {
    let (m, k, n, e) = (13, 7, 5, 3);
    let x = rand_vec(m * k, 9);
    let w = rand_vec(e * k * n, 10);
    let idx: Vec<i32> = (0..m as i32).map(|i| (i * 7 + 1) % 3).collect();
    let mut out = vec![0f32; m * n];
    grouped_matmul(&x, MatB::F32(&w), &idx, &mut out, m, k, n, e).unwrap();
    for i in 0..m {
        let ei = idx[i] as usize;
        let want = naive(
            &x[i * k..(i + 1) * k],
            &w[ei * k * n..(ei + 1) * k * n],
            1,
            k,
            n,
        );
        assert_close(&out[i * n..(i + 1) * n], &want, 1e-5);
    }
    let bad = vec![3i32; m];
    let err = grouped_matmul(&x, MatB::F32(&w), &bad, &mut out, m, k, n, e).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("[grouped_matmul] expert index 3"),
        "{err}"
    );
}
