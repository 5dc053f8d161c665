//! The blocked (GEMM) prefill path of SDPA against the f64 references of
//! `attention_tests` / `attention_kv16_tests`, at sizes that route to it:
//! every mask kind, GQA, scale and soft-cap, rows that see no key, both
//! layouts, f32 / f16 throughout and f16 K / V under f32 queries; plus the
//! NaN rules (a masked key's NaN stays out, a non-finite value keeps the
//! per-row path).

use super::kv16_tests::{check, dims};
use super::sdpa_block::{shape_fits, values_finite};
use super::sdpa_core::Job;
use super::tests::{run_case, MK};
use super::*;
use crate::host::kernels::testutil::rand_vec;
use half::f16;

/// The kernel's job for a BHSD problem (what `sdpa` builds).
fn job<'a>(
    dm: &AttnDims,
    mask: Mask<'a, f32>,
    len: usize,
    q: &'a [f32],
    kv: &'a [f32],
) -> Job<'a, f32, f32> {
    Job {
        layout: Layout::Bhsd,
        mask,
        softcap: 0.0,
        scale: 1.0,
        q,
        k: kv,
        v: kv,
        s: dm.seq,
        kv_s: dm.kv_seq,
        len,
        heads: dm.heads,
        kv_heads: dm.kv_heads,
        d: dm.head_dim,
        group: dm.heads / dm.kv_heads,
        splits: 1,
        f16c: false,
    }
}

/// Whether `dm` under `mk` takes the blocked path (finite data).
fn routes(dm: &AttnDims, mk: MK) -> bool {
    let q = vec![0f32; dm.batch * dm.heads * dm.seq * dm.head_dim];
    let kv = vec![0f32; dm.batch * dm.kv_heads * dm.kv_seq * dm.head_dim];
    let m = vec![1f32; dm.batch * dm.heads * dm.seq * dm.kv_seq];
    let j = job(dm, mk.mask(&m), dm.kv_seq, &q, &kv);
    shape_fits(&j) && values_finite(&j, dm.batch)
}

#[test]
fn block_path_matches_naive_over_masks_gqa_layouts() {
    let masks = [
        MK::None,
        MK::Causal,
        MK::Custom,
        MK::Bias,
        MK::Window(5),
        MK::Window(200),
    ];
    for d in [40, 64] {
        // more keys than queries (a cache), and more queries than keys
        // under causal masks (the first rows see nothing)
        for (s, kvs) in [(67, 131), (67, 40)] {
            let dm = dims(2, s, kvs, 6, 2, d);
            for mk in masks {
                assert!(routes(&dm, mk), "{dm:?} {mk:?} must take the blocked path");
                run_case(dm, mk, 0.0, 0.0);
            }
        }
    }
    let dm = dims(1, 67, 131, 6, 2, 64);
    run_case(dm, MK::Causal, 0.3, 1.5);
    run_case(dm, MK::Bias, 0.7, 2.0);
    run_case(dm, MK::Window(9), 0.0, 0.5);
    run_case(dm, MK::None, 0.2, 1.0);
    // MHA, a sequence of several row blocks
    run_case(dims(1, 150, 150, 2, 2, 16), MK::Causal, 0.0, 0.0);
}

#[test]
fn block_path_half_kv_matches_f64() {
    let causal = |_: usize, _: usize, abs: i64, j: usize| j as i64 <= abs;
    let all = |_: usize, _: usize, _: i64, _: usize| true;
    let win = |_: usize, _: usize, abs: i64, j: usize| j as i64 <= abs && abs - j as i64 <= 7;
    for (d, seed) in [(40, 1), (64, 5), (20, 9)] {
        for bhsd in [false, true] {
            let dm = dims(2, 67, 131, 6, 2, d);
            check(dm, Mask::Causal, None, bhsd, None, &causal, seed);
            check(dm, Mask::None, Some(100), bhsd, None, &all, seed + 1);
            check(
                dm,
                Mask::SlidingWindow(7),
                Some(120),
                bhsd,
                None,
                &win,
                seed + 2,
            );
        }
    }
    let m: Vec<f32> = rand_vec(2 * 67 * 131, 13)
        .iter()
        .map(|&x| (x > -0.3) as u32 as f32)
        .collect();
    let custom = |b: usize, i: usize, _: i64, j: usize| m[(b * 67 + i) * 131 + j] != 0.0;
    for bhsd in [false, true] {
        let dm = dims(2, 67, 131, 6, 2, 64);
        check(dm, Mask::Custom(&m), None, bhsd, None, &custom, 17);
    }
}

#[test]
fn block_path_keeps_masked_nans_out() {
    let (s, d) = (67, 32);
    let dm = dims(1, s, s, 2, 1, d);
    let q = rand_vec(2 * s * d, 1);
    let v = rand_vec(s * d, 3);
    // a NaN key at position 40: causal rows before it never see it
    let mut k = rand_vec(s * d, 2);
    k[40 * d + 3] = f32::NAN;
    assert!(routes(&dm, MK::Causal));
    let mut out = vec![0f32; q.len()];
    let opts = AttnOpts::default();
    sdpa(&dm, Layout::Bhsd, Mask::Causal, opts, &q, &k, &v, &mut out).unwrap();
    for h in 0..2 {
        for i in 0..s {
            let row = &out[(h * s + i) * d..(h * s + i + 1) * d];
            assert_eq!(row.iter().all(|x| x.is_nan()), i >= 40, "head {h} row {i}");
            assert!(row.iter().all(|x| x.is_nan()) || row.iter().all(|x| x.is_finite()));
        }
    }
    // a NaN value masked for every row: the per-row path, which never reads it
    let k = rand_vec(s * d, 2);
    let mut vn = v.clone();
    vn[10 * d] = f32::NAN;
    let mask: Vec<f32> = (0..s * s).map(|e| (e % s != 10) as u32 as f32).collect();
    let j = job(&dm, Mask::Custom(&mask), s, &q, &vn);
    assert!(shape_fits(&j) && !values_finite(&j, 1));
    sdpa(
        &dm,
        Layout::Bhsd,
        Mask::Custom(&mask),
        opts,
        &q,
        &k,
        &vn,
        &mut out,
    )
    .unwrap();
    assert!(out.iter().all(|x| x.is_finite()));
    // f16 values: the bit test
    let vh: Vec<f16> = vn.iter().map(|&x| f16::from_f32(x)).collect();
    let kh: Vec<f16> = k.iter().map(|&x| f16::from_f32(x)).collect();
    sdpa(
        &dm,
        Layout::Bhsd,
        Mask::Custom(&mask),
        opts,
        &q,
        &kh,
        &vh,
        &mut out,
    )
    .unwrap();
    assert!(out.iter().all(|x| x.is_finite()));
}

#[test]
fn long_calls_keep_the_per_row_path() {
    let (q, kv) = (vec![0f32; 1], vec![0f32; 1]);
    // a block seeing more than MAX_KEYS keys; a sliding window bounds it
    let long = dims(1, 64, 5000, 1, 1, 8);
    assert!(!shape_fits(&job(&long, Mask::Causal, 5000, &q, &kv)));
    assert!(shape_fits(&job(
        &long,
        Mask::SlidingWindow(1000),
        5000,
        &q,
        &kv
    )));
}
