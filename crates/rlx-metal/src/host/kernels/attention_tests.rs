//! Tests for SDPA and RoPE against naive f64 loops (explicit KV-head
//! repetition and an explicit visibility matrix).

use super::*;
use crate::host::kernels::testutil::{assert_close, back, rand_vec, to};
use half::f16;

#[derive(Clone, Copy, Debug)]
pub(super) enum MK {
    None,
    Causal,
    Custom,
    Bias,
    Window(usize),
}

impl MK {
    /// The kernel's mask for this kind; `data` is the custom mask or bias.
    pub(super) fn mask<T>(self, data: &[T]) -> Mask<'_, T> {
        match self {
            MK::None => Mask::None,
            MK::Causal => Mask::Causal,
            MK::Custom => Mask::Custom(data),
            MK::Bias => Mask::Bias(data),
            MK::Window(w) => Mask::SlidingWindow(w),
        }
    }
}

/// Naive attention on canonical `[b, h, s, d]` tensors.
#[allow(clippy::too_many_arguments)]
fn naive(
    dm: &AttnDims,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mk: MK,
    mask: &[f32],
    scale: f32,
    cap: f32,
) -> Vec<f32> {
    let AttnDims {
        batch,
        seq: s,
        kv_seq: kvs,
        heads,
        kv_heads,
        head_dim: d,
    } = *dm;
    let rep = heads / kv_heads;
    let scale = if scale == 0.0 {
        1.0 / (d as f64).sqrt()
    } else {
        scale as f64
    };
    let mut out = vec![0f32; batch * heads * s * d];
    for b in 0..batch {
        for h in 0..heads {
            let g = h / rep;
            for i in 0..s {
                let abs = kvs as i64 - s as i64 + i as i64;
                let mut sc = vec![f64::NEG_INFINITY; kvs];
                for j in 0..kvs {
                    let mut x = 0f64;
                    for t in 0..d {
                        x += q[((b * heads + h) * s + i) * d + t] as f64
                            * k[((b * kv_heads + g) * kvs + j) * d + t] as f64;
                    }
                    x *= scale;
                    if cap > 0.0 {
                        x = cap as f64 * (x / cap as f64).tanh();
                    }
                    let visible = match mk {
                        MK::None | MK::Bias => true,
                        MK::Causal => (j as i64) <= abs,
                        MK::Window(w) => (j as i64) <= abs && abs - j as i64 <= w as i64,
                        MK::Custom => mask[(b * s + i) * kvs + j] != 0.0,
                    };
                    if let MK::Bias = mk {
                        x += mask[((b * heads + h) * s + i) * kvs + j] as f64;
                    }
                    if visible {
                        sc[j] = x;
                    }
                }
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                if m == f64::NEG_INFINITY {
                    continue;
                }
                let w: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = w.iter().sum();
                for t in 0..d {
                    let mut acc = 0f64;
                    for j in 0..kvs {
                        acc += w[j] * v[((b * kv_heads + g) * kvs + j) * d + t] as f64;
                    }
                    out[((b * heads + h) * s + i) * d + t] = (acc / z) as f32;
                }
            }
        }
    }
    out
}

/// `[b, h, s, d]` → `[b, s, h, d]`.
fn to_bshd(x: &[f32], b: usize, h: usize, s: usize, d: usize) -> Vec<f32> {
    let mut o = vec![0f32; x.len()];
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                for t in 0..d {
                    o[((bi * s + si) * h + hi) * d + t] = x[((bi * h + hi) * s + si) * d + t];
                }
            }
        }
    }
    o
}

/// `[q, k, v, out]` of a canonical `[b, h, s, d]` problem `dm` in
/// `layout` (k and v with `kv_seq` rows, q and out with `seq`).
fn in_layout(layout: Layout, dm: &AttnDims, qkvo: [&[f32]; 4]) -> [Vec<f32>; 4] {
    let (b, d) = (dm.batch, dm.head_dim);
    let shape = [
        (dm.heads, dm.seq),
        (dm.kv_heads, dm.kv_seq),
        (dm.kv_heads, dm.kv_seq),
        (dm.heads, dm.seq),
    ];
    std::array::from_fn(|i| match layout {
        Layout::Bhsd => qkvo[i].to_vec(),
        Layout::Bshd => to_bshd(qkvo[i], b, shape[i].0, shape[i].1, d),
    })
}

pub(super) fn run_case(dm: AttnDims, mk: MK, scale: f32, cap: f32) {
    let AttnDims {
        batch: b,
        seq: s,
        kv_seq: kvs,
        heads,
        kv_heads,
        head_dim: d,
    } = dm;
    let q = rand_vec(b * heads * s * d, 1);
    let k = rand_vec(b * kv_heads * kvs * d, 2);
    let v = rand_vec(b * kv_heads * kvs * d, 3);
    let mask: Vec<f32> = match mk {
        MK::Custom => (0..b * s * kvs)
            .map(|i| ((i * 7) % 3 != 0) as u8 as f32)
            .collect(),
        MK::Bias => rand_vec(b * heads * s * kvs, 4),
        _ => vec![],
    };
    let want = naive(&dm, &q, &k, &v, mk, &mask, scale, cap);
    let opts = AttnOpts {
        scale,
        softcap: cap,
        kv_len: None,
    };
    for layout in [Layout::Bhsd, Layout::Bshd] {
        let [qq, kk, vv, ww] = in_layout(layout, &dm, [&q, &k, &v, &want]);
        let mut out = vec![f32::NAN; ww.len()];
        sdpa(&dm, layout, mk.mask(&mask), opts, &qq, &kk, &vv, &mut out).unwrap();
        assert_close(&out, &ww, 1e-5);

        // f16 through the same kernel.
        let (qh, kh, vh, mh): (Vec<f16>, Vec<f16>, Vec<f16>, Vec<f16>) =
            (to(&qq), to(&kk), to(&vv), to(&mask));
        let mut oh = vec![f16::ZERO; ww.len()];
        sdpa(&dm, layout, mk.mask(&mh), opts, &qh, &kh, &vh, &mut oh).unwrap();
        assert_close(&back(&oh), &ww, 1e-2);
    }
}

#[test]
fn sdpa_matches_naive_over_masks_gqa_layouts() {
    let masks = [
        MK::None,
        MK::Causal,
        MK::Custom,
        MK::Bias,
        MK::Window(2),
        MK::Window(100),
    ];
    for &(heads, kv_heads) in &[(3usize, 3usize), (4, 2), (6, 2), (3, 1)] {
        for &(s, kvs) in &[(1usize, 1usize), (7, 7), (1, 13), (3, 13), (13, 13)] {
            for &d in &[1usize, 7, 33] {
                for &mk in &masks {
                    let dm = AttnDims {
                        batch: 2,
                        seq: s,
                        kv_seq: kvs,
                        heads,
                        kv_heads,
                        head_dim: d,
                    };
                    run_case(dm, mk, 0.0, 0.0);
                }
            }
        }
    }
}

#[test]
fn sdpa_scale_softcap_and_empty_rows() {
    let dm = AttnDims {
        batch: 1,
        seq: 5,
        kv_seq: 9,
        heads: 2,
        kv_heads: 1,
        head_dim: 8,
    };
    run_case(dm, MK::Causal, 3.0, 0.5);
    run_case(dm, MK::Bias, 0.7, 2.0);
    run_case(dm, MK::Window(0), 0.0, 0.0);
    // More queries than keys under a causal mask: the first rows see no key.
    let dm = AttnDims {
        batch: 1,
        seq: 4,
        kv_seq: 2,
        heads: 1,
        kv_heads: 1,
        head_dim: 3,
    };
    run_case(dm, MK::Causal, 0.0, 0.0);
    let q = rand_vec(12, 1);
    let mut out = vec![9f32; 12];
    sdpa(
        &dm,
        Layout::Bhsd,
        Mask::Causal,
        AttnOpts::default(),
        &q,
        &q[..6],
        &q[..6],
        &mut out,
    )
    .unwrap();
    assert_eq!(&out[..6], &[0.0; 6], "fully masked rows must be zero");
    assert!(out[6..].iter().all(|x| *x != 0.0));
    // Custom mask with an all-zero row.
    let mask = [0.0f32; 8];
    sdpa(
        &dm,
        Layout::Bhsd,
        Mask::Custom(&mask),
        AttnOpts::default(),
        &q,
        &q[..6],
        &q[..6],
        &mut out,
    )
    .unwrap();
    assert_eq!(out, vec![0.0; 12]);
    // Bad geometry.
    let bad = AttnDims {
        heads: 3,
        kv_heads: 2,
        ..dm
    };
    assert!(sdpa(
        &bad,
        Layout::Bhsd,
        Mask::<f32>::None,
        AttnOpts::default(),
        &q,
        &q,
        &q,
        &mut out
    )
    .is_err());
    assert!(sdpa(
        &dm,
        Layout::Bhsd,
        Mask::<f32>::None,
        AttnOpts::default(),
        &q,
        &q[..5],
        &q,
        &mut out
    )
    .is_err());
}

fn naive_rope(p: &RopeDims, x: &[f32], cos: &[f32], sin: &[f32]) -> Vec<f32> {
    let tokens = p.batch * p.seq;
    let half = p.n_rot / 2;
    let mut out = vec![0f32; tokens * p.hidden];
    for t in 0..tokens {
        let tr = if p.per_token { t } else { t % p.seq };
        for h in 0..p.hidden / p.head_dim {
            let base = h * p.head_dim;
            for dd in 0..p.head_dim {
                out[t * p.hidden + base + dd] = x[t * p.src_row_stride + base + dd];
            }
            for i in 0..half {
                let (ia, ib) = if p.neox {
                    (i, i + half)
                } else {
                    (2 * i, 2 * i + 1)
                };
                let a = x[t * p.src_row_stride + base + ia] as f64;
                let b = x[t * p.src_row_stride + base + ib] as f64;
                let (c, s) = (cos[tr * half + i] as f64, sin[tr * half + i] as f64);
                out[t * p.hidden + base + ia] = (a * c - b * s) as f32;
                out[t * p.hidden + base + ib] = (a * s + b * c) as f32;
            }
        }
    }
    out
}

#[test]
fn rope_matches_naive() {
    for &(batch, seq, heads, head_dim, n_rot, extra) in &[
        (1usize, 1usize, 1usize, 2usize, 2usize, 0usize),
        (2, 7, 3, 8, 8, 5),
        (3, 5, 2, 12, 6, 0),
        (1, 13, 4, 33, 32, 17),
    ] {
        for neox in [true, false] {
            for per_token in [false, true] {
                let hidden = heads * head_dim;
                let stride = hidden + extra;
                let p = RopeDims {
                    batch,
                    seq,
                    hidden,
                    src_row_stride: stride,
                    head_dim,
                    n_rot,
                    neox,
                    per_token,
                };
                let x = rand_vec(batch * seq * stride, 5);
                let rows = if per_token { batch * seq } else { seq };
                let ang = rand_vec(rows * n_rot / 2, 6);
                let cos: Vec<f32> = ang.iter().map(|a| (a * 3.0).cos()).collect();
                let sin: Vec<f32> = ang.iter().map(|a| (a * 3.0).sin()).collect();
                let want = naive_rope(&p, &x, &cos, &sin);
                let mut out = vec![0f32; want.len()];
                rope(&p, &x, &cos, &sin, &mut out).unwrap();
                assert_close(&out, &want, 1e-5);
                let xh: Vec<f16> = to(&x);
                let mut oh = vec![f16::ZERO; want.len()];
                rope(&p, &xh, &cos, &sin, &mut oh).unwrap();
                assert_close(&back(&oh), &want, 1e-2);
            }
        }
    }
    let p = RopeDims {
        batch: 1,
        seq: 2,
        hidden: 4,
        src_row_stride: 4,
        head_dim: 4,
        n_rot: 3,
        neox: true,
        per_token: false,
    };
    assert!(rope(&p, &[0f32; 8], &[0f32; 4], &[0f32; 4], &mut [0f32; 8]).is_err());
}

/// `[b, h, kvs, d]` rows `0..len` of every (batch, head).
fn prefix_rows(x: &[f32], b: usize, h: usize, kvs: usize, len: usize, d: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(b * h * len * d);
    for bh in 0..b * h {
        out.extend_from_slice(&x[bh * kvs * d..(bh * kvs + len) * d]);
    }
    out
}

/// A run-time `kv_len` case: q `[b, heads, s, d]` and a `cap`-row k / v
/// cache (seeds `seed`, `seed + 1`, `seed + 2`) of which the first `len`
/// rows are live, the naive answer over those rows, the cache's dims and
/// the options carrying `kv_len`.
struct KvLenCase {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    want: Vec<f32>,
    full: AttnDims,
    opts: AttnOpts,
}

fn kv_len_case(short: AttnDims, cap: usize, mk: MK, seed: u64) -> KvLenCase {
    let (b, s, len, d) = (short.batch, short.seq, short.kv_seq, short.head_dim);
    let q = rand_vec(b * short.heads * s * d, seed);
    let k = rand_vec(b * short.kv_heads * cap * d, seed + 1);
    let v = rand_vec(b * short.kv_heads * cap * d, seed + 2);
    let (kt, vt) = (
        prefix_rows(&k, b, short.kv_heads, cap, len, d),
        prefix_rows(&v, b, short.kv_heads, cap, len, d),
    );
    let want = naive(&short, &q, &kt, &vt, mk, &[], 0.0, 0.0);
    let full = AttnDims {
        kv_seq: cap,
        ..short
    };
    let opts = AttnOpts {
        kv_len: Some(len as i64),
        ..AttnOpts::default()
    };
    KvLenCase {
        q,
        k,
        v,
        want,
        full,
        opts,
    }
}

#[test]
fn sdpa_runtime_kv_len_equals_truncated_cache() {
    let (b, cap) = (2usize, 11usize);
    for &(heads, kv_heads, d) in &[(9usize, 3usize, 8usize), (4, 1, 16), (6, 6, 5)] {
        for &s in &[1usize, 3] {
            for len in [s, 5, cap] {
                for mk in [MK::Causal, MK::Window(2), MK::None] {
                    let short = AttnDims {
                        batch: b,
                        seq: s,
                        kv_seq: len,
                        heads,
                        kv_heads,
                        head_dim: d,
                    };
                    let c = kv_len_case(short, cap, mk, 11);
                    for layout in [Layout::Bhsd, Layout::Bshd] {
                        let [qq, kk, vv, ww] =
                            in_layout(layout, &c.full, [&c.q, &c.k, &c.v, &c.want]);
                        let mut out = vec![f32::NAN; ww.len()];
                        let m = mk.mask::<f32>(&[]);
                        sdpa(&c.full, layout, m, c.opts, &qq, &kk, &vv, &mut out).unwrap();
                        assert_close(&out, &ww, 1e-5);
                    }
                }
            }
        }
    }
}

#[test]
fn sdpa_per_batch_lengths_equal_each_sequence_alone() {
    // batched decode: entry e attends its own first lens[e] keys, exactly
    // as the naive formula on its own truncated cache
    let (b, cap, s) = (3usize, 9usize, 1usize);
    let (heads, kv_heads, d) = (6usize, 2usize, 8usize);
    let lens = [9i32, 1, 4];
    let q = rand_vec(b * heads * s * d, 21);
    let k = rand_vec(b * kv_heads * cap * d, 22);
    let v = rand_vec(b * kv_heads * cap * d, 23);
    let full = AttnDims {
        batch: b,
        seq: s,
        kv_seq: cap,
        heads,
        kv_heads,
        head_dim: d,
    };
    for mk in [MK::Causal, MK::Window(2)] {
        let m = mk.mask::<f32>(&[]);
        let mut out = vec![f32::NAN; q.len()];
        sdpa_per_batch(
            &full,
            Layout::Bhsd,
            m,
            0.0,
            0.0,
            &lens,
            &q,
            &k,
            &v,
            &mut out,
        )
        .unwrap();
        let (qn, kn) = (heads * s * d, kv_heads * cap * d);
        for (e, &len) in lens.iter().enumerate() {
            let len = len as usize;
            let one = AttnDims {
                batch: 1,
                kv_seq: len,
                ..full
            };
            let kt = prefix_rows(&k[e * kn..(e + 1) * kn], 1, kv_heads, cap, len, d);
            let vt = prefix_rows(&v[e * kn..(e + 1) * kn], 1, kv_heads, cap, len, d);
            let want = naive(&one, &q[e * qn..(e + 1) * qn], &kt, &vt, mk, &[], 0.0, 0.0);
            assert_close(&out[e * qn..(e + 1) * qn], &want, 1e-5);
        }
    }
    let mut out = vec![0f32; q.len()];
    let e = sdpa_per_batch(
        &full,
        Layout::Bhsd,
        Mask::<f32>::Causal,
        0.0,
        0.0,
        &[9, 10, 1],
        &q,
        &k,
        &v,
        &mut out,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("[sdpa] kv_len 10"), "{e}");
}

#[test]
fn sdpa_kv_len_out_of_range_is_an_error() {
    let dm = AttnDims {
        batch: 1,
        seq: 1,
        kv_seq: 4,
        heads: 2,
        kv_heads: 1,
        head_dim: 4,
    };
    let (q, k) = (vec![0f32; 8], vec![0f32; 16]);
    let mut out = vec![0f32; 8];
    for bad in [0i64, -1, 5] {
        let opts = AttnOpts {
            kv_len: Some(bad),
            ..AttnOpts::default()
        };
        let e = sdpa(
            &dm,
            Layout::Bshd,
            Mask::<f32>::Causal,
            opts,
            &q,
            &k,
            &k,
            &mut out,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("[sdpa] kv_len") && e.contains(&bad.to_string()),
            "{e}"
        );
    }
}

#[test]
fn exp_nonpos_matches_libm() {
    let mut worst = 0f64;
    for i in 0..=86_900 {
        let x = -(i as f32) * 1e-3;
        let (got, want) = (exp_nonpos(x) as f64, (x as f64).exp());
        worst = worst.max((got - want).abs() / want);
    }
    assert!(worst < 3e-7, "max relative error {worst}");
    assert_eq!(exp_nonpos(0.0), 1.0);
    assert!(exp_nonpos(-1e30) < 1e-37);
}

/// The decode path cut into `splits` pieces per unit against the naive f64
/// loops: odd head dims, GQA ratios 1 / 3 / 7, windows, a run-time key
/// length, both layouts, and the same answer (within 1e-5) for every split.
#[test]
fn sdpa_split_pieces_match_naive_for_every_split() {
    let cap = 37usize;
    for &(b, s, heads, kv_heads, d) in &[
        (1usize, 1usize, 9usize, 3usize, 64usize),
        (1, 1, 7, 1, 17),
        (2, 2, 6, 6, 5),
        (1, 3, 14, 2, 67),
        (1, 1, 4, 1, 256),
    ] {
        for len in [1usize, 2, 23, cap] {
            if len < s {
                continue;
            }
            for mk in [MK::Causal, MK::Window(0), MK::Window(6), MK::None] {
                let short = AttnDims {
                    batch: b,
                    seq: s,
                    kv_seq: len,
                    heads,
                    kv_heads,
                    head_dim: d,
                };
                let KvLenCase {
                    q,
                    k,
                    v,
                    want,
                    full,
                    opts,
                } = kv_len_case(short, cap, mk, 21);
                let m = mk.mask::<f32>(&[]);
                let mut first: Option<Vec<f32>> = None;
                for splits in [1usize, 2, 3, 8, 50] {
                    let mut out = vec![f32::NAN; want.len()];
                    sdpa_checked(
                        &full,
                        Layout::Bhsd,
                        m,
                        opts,
                        &q,
                        &k,
                        &v,
                        &mut out,
                        Some(splits),
                    )
                    .unwrap();
                    assert_close(&out, &want, 1e-5);
                    match &first {
                        None => first = Some(out),
                        Some(f) => assert_close(&out, f, 1e-5),
                    }
                    let mut ob = vec![f32::NAN; want.len()];
                    let [qb, kb, vb, wb] = in_layout(Layout::Bshd, &full, [&q, &k, &v, &want]);
                    sdpa_checked(
                        &full,
                        Layout::Bshd,
                        m,
                        opts,
                        &qb,
                        &kb,
                        &vb,
                        &mut ob,
                        Some(splits),
                    )
                    .unwrap();
                    assert_close(&ob, &wb, 1e-5);
                }
                // an f16 KV cache under f32 queries (read directly by the
                // AVX2 kernels when d % 8 == 0): against the naive answer
                // over the rounded keys / values
                let (kh, vh): (Vec<f16>, Vec<f16>) = (to(&k), to(&v));
                let (kr, vr) = (back(&kh), back(&vh));
                let want_h = naive(
                    &short,
                    &q,
                    &prefix_rows(&kr, b, kv_heads, cap, len, d),
                    &prefix_rows(&vr, b, kv_heads, cap, len, d),
                    mk,
                    &[],
                    0.0,
                    0.0,
                );
                for splits in [1usize, 3, 50] {
                    let mut out = vec![f32::NAN; want.len()];
                    sdpa_checked(
                        &full,
                        Layout::Bhsd,
                        m,
                        opts,
                        &q,
                        &kh,
                        &vh,
                        &mut out,
                        Some(splits),
                    )
                    .unwrap();
                    assert_close(&out, &want_h, 1e-5);
                }
            }
        }
    }
}

/// Split pieces keep the masking rules: a custom mask, a bias and a
/// soft-cap through the pieces; a NaN score in one piece poisons the whole
/// head; a NaN stored in a masked value row does not leak.
#[test]
fn sdpa_split_masks_and_poison() {
    let dm = AttnDims {
        batch: 1,
        seq: 1,
        kv_seq: 40,
        heads: 4,
        kv_heads: 2,
        head_dim: 9,
    };
    let q = rand_vec(36, 31);
    let k = rand_vec(2 * 40 * 9, 32);
    let mut v = rand_vec(2 * 40 * 9, 33);
    let custom: Vec<f32> = (0..40).map(|j| (j % 3 != 1) as u8 as f32).collect();
    let bias = rand_vec(4 * 40, 34);
    for (mk, mask, cap) in [(MK::Custom, &custom, 0.0f32), (MK::Bias, &bias, 1.5)] {
        let want = naive(&dm, &q, &k, &v, mk, mask, 0.0, cap);
        let m = mk.mask(mask);
        let opts = AttnOpts {
            softcap: cap,
            ..AttnOpts::default()
        };
        for splits in [1usize, 4, 13] {
            let mut out = vec![0f32; 36];
            sdpa_checked(
                &dm,
                Layout::Bhsd,
                m,
                opts,
                &q,
                &k,
                &v,
                &mut out,
                Some(splits),
            )
            .unwrap();
            assert_close(&out, &want, 1e-5);
        }
    }
    // a NaN in a masked value row (key 1 of kv head 0) stays out
    v[9..18].fill(f32::NAN);
    let mut out = vec![0f32; 36];
    sdpa_checked(
        &dm,
        Layout::Bhsd,
        Mask::Custom(&custom),
        AttnOpts::default(),
        &q,
        &k,
        &v,
        &mut out,
        Some(5),
    )
    .unwrap();
    assert!(out.iter().all(|x| x.is_finite()));
    // a NaN key row (key 30 of kv head 1) poisons both heads of group 1 only
    let mut k2 = k.clone();
    k2[(40 + 30) * 9] = f32::NAN;
    sdpa_checked(
        &dm,
        Layout::Bhsd,
        Mask::<f32>::None,
        AttnOpts::default(),
        &q,
        &k2,
        &rand_vec(720, 35),
        &mut out,
        Some(5),
    )
    .unwrap();
    assert!(out[..18].iter().all(|x| x.is_finite()));
    assert!(out[18..].iter().all(|x| x.is_nan()));
}
