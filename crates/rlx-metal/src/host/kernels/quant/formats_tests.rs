//! Decoders against a float64 decoder written from the OCP FP8 / E2M1
//! definitions (sign, exponent with bias, implicit one, subnormals), encoders
//! on the edge values (saturation, ±inf, NaN, ties), and the matmuls against
//! a naive f64 dequantise-then-multiply (bound `1e-5 · max|ref|`: f32
//! accumulation over at most 256 terms).

use super::*;

/// `(-1)^s · 2^(e − bias) · (1 + m / 2^mbits)`, subnormal `2^(1 − bias) · m / 2^mbits`.
fn spec(code: u32, ebits: u32, mbits: u32) -> f64 {
    let bias = (1i32 << (ebits - 1)) - 1;
    let s = if (code >> (ebits + mbits)) & 1 == 1 {
        -1.0
    } else {
        1.0
    };
    let e = ((code >> mbits) & ((1 << ebits) - 1)) as i32;
    let m = (code & ((1 << mbits) - 1)) as f64 / (1u32 << mbits) as f64;
    if e == 0 {
        s * 2f64.powi(1 - bias) * m
    } else {
        s * 2f64.powi(e - bias) * (1.0 + m)
    }
}

#[test]
fn fp8_and_e2m1_decoders_follow_the_spec() {
    for c in 0..=255u8 {
        let (e, m) = ((c >> 3) & 0xF, c & 7);
        let v = e4m3_to_f32(c);
        if e == 0xF && m == 7 {
            assert!(v.is_nan(), "e4m3 {c:#x}");
        } else {
            assert_eq!(v as f64, spec(c as u32, 4, 3), "e4m3 {c:#x}");
        }
        let (e, m) = ((c >> 2) & 0x1F, c & 3);
        let v = e5m2_to_f32(c);
        match (e, m) {
            (0x1F, 0) => assert_eq!(
                v,
                if c & 0x80 != 0 {
                    f32::NEG_INFINITY
                } else {
                    f32::INFINITY
                }
            ),
            (0x1F, _) => assert!(v.is_nan(), "e5m2 {c:#x}"),
            _ => assert_eq!(v as f64, spec(c as u32, 5, 2), "e5m2 {c:#x}"),
        }
    }
    for c in 0..16u8 {
        assert_eq!(e2m1_to_f32(c) as f64, spec(c as u32, 2, 1), "e2m1 {c}");
    }
    // published anchors
    assert_eq!(e4m3_to_f32(0x7E), 448.0);
    assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
    assert_eq!(e5m2_to_f32(0x7B), 57344.0);
    assert_eq!(e5m2_to_f32(0x01), 2f32.powi(-16));
    assert_eq!(e2m1_to_f32(7), 6.0);
    assert!(e4m3_to_f32(0x80).is_sign_negative());
}

#[test]
fn encoders_round_to_nearest_even_and_saturate() {
    use ScaledFormat::*;
    for fmt in [Fp8E4m3, Fp8E5m2] {
        // every finite code round-trips
        for c in 0..=255u8 {
            let v = decode_scaled(fmt, c);
            if v.is_finite() {
                assert_eq!(encode_scaled(fmt, v), c, "{fmt:?} {c:#x}");
            }
        }
        let top = if fmt == Fp8E4m3 { 0x7E } else { 0x7B };
        assert_eq!(encode_scaled(fmt, 1e30), top);
        assert_eq!(encode_scaled(fmt, f32::INFINITY), top);
        assert_eq!(encode_scaled(fmt, f32::NEG_INFINITY), top | 0x80);
        assert_eq!(encode_scaled(fmt, f32::NAN), 0x7F);
        assert_eq!(encode_scaled(fmt, -0.0), 0x80);
        assert_eq!(encode_scaled(fmt, 1e-30), 0);
    }
    // E4M3: 1.0 = 0x38, 1.125 = 0x39, 1.25 = 0x3A: ties go to the even code
    assert_eq!(encode_scaled(Fp8E4m3, 1.0625), 0x38);
    assert_eq!(encode_scaled(Fp8E4m3, 1.1875), 0x3A);
    assert_eq!(encode_scaled(Fp8E4m3, 1.07), 0x39);
    // half the smallest subnormal ties to zero; just above rounds up
    assert_eq!(encode_scaled(Fp8E4m3, 2f32.powi(-10)), 0);
    assert_eq!(encode_scaled(Fp8E4m3, 2f32.powi(-10) * 1.01), 1);
    // between 448 and the (absent) next value: saturates
    assert_eq!(encode_scaled(Fp8E4m3, 480.0), 0x7E);
    assert_eq!(encode_scaled(Int8, 2.5), 2);
    assert_eq!(encode_scaled(Int8, -3.5), (-4i8) as u8);
    assert_eq!(encode_scaled(Int8, 1000.0), 127);
    assert_eq!(encode_scaled(Int8, f32::NAN), 0);
}

fn rand(n: usize, seed: u64) -> Vec<f32> {
    crate::host::kernels::testutil::rand_vec(n, seed)
}

fn naive(x: &[f32], w: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0f64; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|e| x[i * k + e] as f64 * w[j * k + e]).sum();
        }
    }
    out
}

fn close(got: &[f32], want: &[f64]) {
    let big = want.iter().fold(0f64, |a, v| a.max(v.abs())).max(1e-30);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(((*g as f64) - w).abs() <= 1e-5 * big, "{i}: {g} vs {w}");
    }
}

#[test]
fn int_and_float_weight_matmuls_match_a_naive_product() {
    let (m, k, n) = (3, 64, 37);
    let x = rand(m * k, 1);
    let codes: Vec<u8> = (0..n * k).map(|i| (i * 37 % 251) as u8).collect();
    let bs = 32;
    let nb = k / bs;
    let scale: Vec<f32> = rand(n * nb, 2).iter().map(|v| v.abs() + 0.01).collect();
    let zp: Vec<f32> = (0..n * nb).map(|i| (i % 16) as f32).collect();
    // int8 asymmetric
    let mut out = vec![0f32; m * n];
    let w = IntWeight {
        codes: &codes,
        scale: &scale,
        zp: Some(&zp),
        block_size: bs,
        four_bit: false,
    };
    dequant_matmul_int(&x, w, &mut out, m, k, n).unwrap();
    let wd: Vec<f64> = (0..n * k)
        .map(|i| {
            let (j, e) = (i / k, i % k);
            (codes[i] as i8 as f64 - zp[j * nb + e / bs] as f64) * scale[j * nb + e / bs] as f64
        })
        .collect();
    close(&out, &naive(&x, &wd, m, k, n));
    // int4 symmetric: signed nibbles, low nibble first
    let packed = &codes[..n * k / 2];
    let w = IntWeight {
        codes: packed,
        scale: &scale,
        zp: None,
        block_size: bs,
        four_bit: true,
    };
    dequant_matmul_int(&x, w, &mut out, m, k, n).unwrap();
    let wd: Vec<f64> = (0..n * k)
        .map(|i| {
            let (j, e) = (i / k, i % k);
            let byte = packed[j * k / 2 + e / 2];
            let nib = if e % 2 == 0 { byte & 15 } else { byte >> 4 } as i32;
            let q = if nib >= 8 { nib - 16 } else { nib };
            q as f64 * scale[j * nb + e / bs] as f64
        })
        .collect();
    close(&out, &naive(&x, &wd, m, k, n));
    // fp8 e4m3 (NaN codes avoided), one scale per row
    let f8: Vec<u8> = codes.iter().map(|&c| c & 0x7E).collect();
    dequant_matmul_fp8(&x, &f8, &scale[..n], &mut out, m, k, n, false).unwrap();
    let wd: Vec<f64> = (0..n * k)
        .map(|i| spec(f8[i] as u32, 4, 3) * scale[i / k] as f64)
        .collect();
    close(&out, &naive(&x, &wd, m, k, n));
    // nvfp4: 16-element blocks, e4m3 block scales (positive, finite), global
    let bsc: Vec<u8> = (0..n * k / 16).map(|i| 0x20 + (i % 40) as u8).collect();
    dequant_matmul_nvfp4(&x, packed, &bsc, 0.75, &mut out, m, k, n).unwrap();
    let wd: Vec<f64> = (0..n * k)
        .map(|i| {
            let (j, e) = (i / k, i % k);
            let byte = packed[j * k / 2 + e / 2];
            let nib = if e % 2 == 0 { byte & 15 } else { byte >> 4 };
            spec(nib as u32, 2, 1) * spec(bsc[j * k / 16 + e / 16] as u32, 4, 3) * 0.75
        })
        .collect();
    close(&out, &naive(&x, &wd, m, k, n));
    // short buffers are errors, not panics
    assert!(dequant_matmul_fp8(&x, &f8[..10], &scale, &mut out, m, k, n, true).is_err());
}

#[test]
fn scaled_ops_round_trip_and_multiply() {
    let (r, c) = (5, 20);
    let x = rand(r * c, 3);
    for fmt in [
        ScaledFormat::Fp8E4m3,
        ScaledFormat::Fp8E5m2,
        ScaledFormat::Int8,
    ] {
        for layout in [
            ScaleLayout::PerTensor,
            ScaleLayout::PerRow,
            ScaleLayout::Block { size: 8 },
        ] {
            let mut s = vec![0f32; scale_count(layout, r, c)];
            scaled_quant_scale(&x, &mut s, (r, c), fmt, layout).unwrap();
            let mut q = vec![0u8; r * c];
            scaled_quantize(&x, &s, &mut q, (r, c), fmt, layout).unwrap();
            let mut d = vec![0f32; r * c];
            scaled_dequantize(&q, &s, &mut d, (r, c), fmt, layout).unwrap();
            // relative step of the format at its top: E4M3 2^-3, E5M2 2^-2, int8 1/127
            let step = match fmt {
                ScaledFormat::Fp8E4m3 => 0.0625,
                ScaledFormat::Fp8E5m2 => 0.125,
                ScaledFormat::Int8 => 0.5 / 127.0,
            };
            let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
            for (a, b) in x.iter().zip(&d) {
                assert!(
                    (a - b).abs() <= step * amax.max(a.abs()) + 1e-6,
                    "{fmt:?} {layout:?}"
                );
            }
            // the matmul of the codes equals the product of the dequantised operands
            let mut out = vec![0f32; r * r];
            let op = ScaledOperand {
                codes: &q,
                scale: &s,
                fmt,
            };
            let bias: Vec<f32> = (0..r).map(|i| i as f32).collect();
            scaled_matmul(op, op, Some(&bias), layout, &mut out, (r, c, r)).unwrap();
            let dd: Vec<f64> = d.iter().map(|&v| v as f64).collect();
            let mut want = naive(&d, &dd, r, c, r);
            for (i, w) in want.iter_mut().enumerate() {
                *w += bias[i % r] as f64;
            }
            close(&out, &want);
        }
    }
    // all-zero groups get scale 1, NaN propagates
    let mut s = [0f32; 2];
    let z = [0.0, 0.0, f32::NAN, 1.0];
    scaled_quant_scale(&z, &mut s, (2, 2), ScaledFormat::Int8, ScaleLayout::PerRow).unwrap();
    assert_eq!(s[0], 1.0);
    assert!(s[1].is_nan());
}
