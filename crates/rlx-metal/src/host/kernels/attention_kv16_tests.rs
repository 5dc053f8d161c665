//! SDPA over a half KV cache: f16 keys / values under f32 queries and
//! output (`sdpa::<f32, f16>`), against an f64 reference computed from the
//! same f16-rounded keys and values. Covers prefill (cache + new rows), the
//! decode path with forced splits, GQA, causal / sliding-window / custom
//! masks, a run-time `kv_len`, one length per batch entry, both layouts,
//! head dims that are and are not a multiple of 8 (the AVX2 and portable
//! block kernels, the F16C widening and its scalar tail).

use super::*;
use crate::host::kernels::testutil::{assert_close, rand_vec};
use half::f16;

/// f64 attention of one `[b, s, heads·d]` BSHD problem with run-time key
/// length `len` (query `i` at `len - s + i`); `visible(b, i, abs, j)`.
#[allow(clippy::too_many_arguments)]
fn reference(
    dm: &AttnDims,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    lens: &[usize],
    visible: &dyn Fn(usize, usize, i64, usize) -> bool,
    bhsd: bool,
) -> Vec<f32> {
    let AttnDims {
        batch,
        seq: s,
        kv_seq: kvs,
        heads,
        kv_heads,
        head_dim: d,
    } = *dm;
    let qrow = |b: usize, i: usize, h: usize| {
        if bhsd {
            ((b * heads + h) * s + i) * d
        } else {
            ((b * s + i) * heads + h) * d
        }
    };
    let krow = |b: usize, j: usize, g: usize| {
        if bhsd {
            ((b * kv_heads + g) * kvs + j) * d
        } else {
            ((b * kvs + j) * kv_heads + g) * d
        }
    };
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0f32; q.len()];
    for b in 0..batch {
        let len = lens[b];
        for i in 0..s {
            let abs = len as i64 - s as i64 + i as i64;
            for h in 0..heads {
                let g = h / (heads / kv_heads);
                let (qr, o) = (qrow(b, i, h), qrow(b, i, h));
                let sc: Vec<(usize, f64)> = (0..len)
                    .filter(|&j| visible(b, i, abs, j))
                    .map(|j| {
                        let kr = krow(b, j, g);
                        let dot: f64 = (0..d).map(|t| q[qr + t] as f64 * k[kr + t] as f64).sum();
                        (j, dot * scale)
                    })
                    .collect();
                let m = sc.iter().fold(f64::NEG_INFINITY, |a, x| a.max(x.1));
                if m == f64::NEG_INFINITY {
                    continue;
                }
                let z: f64 = sc.iter().map(|x| (x.1 - m).exp()).sum();
                for t in 0..d {
                    let acc: f64 = sc
                        .iter()
                        .map(|&(j, x)| (x - m).exp() * v[krow(b, j, g) + t] as f64)
                        .sum();
                    out[o + t] = (acc / z) as f32;
                }
            }
        }
    }
    out
}

/// f16 copies of `x` and `x` rounded to them (the values the kernel sees).
fn halves(x: &[f32]) -> (Vec<f16>, Vec<f32>) {
    let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let r = h.iter().map(|v| v.to_f32()).collect();
    (h, r)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn check(
    dm: AttnDims,
    mask: Mask<'_, f32>,
    kv_len: Option<usize>,
    bhsd: bool,
    splits: Option<usize>,
    visible: &dyn Fn(usize, usize, i64, usize) -> bool,
    seed: u64,
) {
    let qn = dm.batch * dm.seq * dm.heads * dm.head_dim;
    let kn = dm.batch * dm.kv_seq * dm.kv_heads * dm.head_dim;
    let q = rand_vec(qn, seed);
    // keys / values past f16's 11-bit mantissa, so the rounding matters
    let (k16, k) = halves(
        &rand_vec(kn, seed + 1)
            .iter()
            .map(|x| 3.0 * x)
            .collect::<Vec<_>>(),
    );
    let (v16, v) = halves(&rand_vec(kn, seed + 2));
    let layout = if bhsd { Layout::Bhsd } else { Layout::Bshd };
    let opts = AttnOpts {
        scale: 0.0,
        softcap: 0.0,
        kv_len: kv_len.map(|l| l as i64),
    };
    let mut out = vec![f32::NAN; qn];
    sdpa_checked(&dm, layout, mask, opts, &q, &k16, &v16, &mut out, splits).unwrap();
    let lens = vec![kv_len.unwrap_or(dm.kv_seq); dm.batch];
    let want = reference(&dm, &q, &k, &v, &lens, visible, bhsd);
    assert_close(&out, &want, 2e-5);
}

pub(super) fn dims(
    batch: usize,
    seq: usize,
    kv_seq: usize,
    heads: usize,
    kv_heads: usize,
    d: usize,
) -> AttnDims {
    AttnDims {
        batch,
        seq,
        kv_seq,
        heads,
        kv_heads,
        head_dim: d,
    }
}

#[test]
fn half_kv_prefill_matches_f64() {
    let causal = |_: usize, _: usize, abs: i64, j: usize| j as i64 <= abs;
    // cache of 16 + 7 new rows, GQA 3:1, d = 40 (AVX2 kernels) and 20 (portable, F16C tail)
    for (d, seed) in [(40, 1), (20, 7)] {
        check(
            dims(2, 7, 23, 6, 2, d),
            Mask::Causal,
            None,
            false,
            None,
            &causal,
            seed,
        );
    }
    let win = |_: usize, _: usize, abs: i64, j: usize| j as i64 <= abs && abs - j as i64 <= 5;
    check(
        dims(1, 9, 41, 4, 1, 24),
        Mask::SlidingWindow(5),
        Some(30),
        true,
        None,
        &win,
        11,
    );
    let m: Vec<f32> = rand_vec(2 * 5 * 19, 13)
        .iter()
        .map(|&x| (x > -0.3) as u32 as f32)
        .collect();
    let custom = |b: usize, i: usize, _: i64, j: usize| m[(b * 5 + i) * 19 + j] != 0.0;
    check(
        dims(2, 5, 19, 2, 2, 16),
        Mask::Custom(&m),
        None,
        false,
        None,
        &custom,
        17,
    );
}

#[test]
fn half_kv_decode_matches_f64_for_any_split() {
    let causal = |_: usize, _: usize, abs: i64, j: usize| j as i64 <= abs;
    let win = |_: usize, _: usize, abs: i64, j: usize| j as i64 <= abs && abs - j as i64 <= 50;
    for splits in [None, Some(1), Some(5)] {
        // SmolLM2's shape: 9 heads over 3 KV heads of 64, a 300-slot cache filled to 257
        let dm = dims(1, 1, 300, 9, 3, 64);
        check(dm, Mask::Causal, Some(257), false, splits, &causal, 21);
        check(
            dm,
            Mask::SlidingWindow(50),
            Some(200),
            true,
            splits,
            &win,
            23,
        );
        check(
            dims(1, 3, 130, 4, 2, 36),
            Mask::Causal,
            Some(99),
            false,
            splits,
            &causal,
            29,
        );
    }
}

#[test]
fn half_kv_per_batch_lengths_match_f64() {
    let dm = dims(3, 1, 70, 4, 2, 32);
    let kn = 3 * 70 * 2 * 32;
    let q = rand_vec(3 * 4 * 32, 31);
    let (k16, k) = halves(&rand_vec(kn, 32));
    let (v16, v) = halves(&rand_vec(kn, 33));
    let lens = [70i32, 1, 33];
    let mut out = vec![f32::NAN; q.len()];
    sdpa_per_batch(
        &dm,
        Layout::Bshd,
        Mask::Causal,
        0.0,
        0.0,
        &lens,
        &q,
        &k16,
        &v16,
        &mut out,
    )
    .unwrap();
    let causal = |_: usize, _: usize, abs: i64, j: usize| j as i64 <= abs;
    let want = reference(&dm, &q, &k, &v, &[70, 1, 33], &causal, false);
    assert_close(&out, &want, 2e-5);
}

/// The F16C widening equals `f16::to_f32` on every non-NaN half (NaNs stay
/// NaN), including the scalar tail.
#[test]
fn f16c_widening_is_exact() {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("f16c") && std::is_x86_feature_detected!("avx") {
        let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let mut got = vec![0f32; all.len() - 3];
        // SAFETY: the CPU reported F16C and AVX.
        unsafe { sdpa_core::widen_f16(&all[..all.len() - 3], &mut got) };
        for (h, g) in all.iter().zip(&got) {
            if h.is_nan() {
                assert!(g.is_nan(), "{h:?}");
            } else {
                assert_eq!(g.to_bits(), h.to_f32().to_bits(), "{h:?}");
            }
        }
    }
}
