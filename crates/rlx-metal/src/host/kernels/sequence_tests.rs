//! Sequence kernels against float64 loops written here from the papers'
//! recurrences, and the two Gated DeltaNet forms against each other.
//! Tolerances: f32 `1e-5·max(1, |want|)` against f64 (recurrences of ≤ 130
//! steps of O(1) values); chunked vs recurrent GDN agree to 2e-5 (a
//! different summation order over ≤ 64-token chunks); f16 2e-2.

use super::ScanForm;
use super::{mamba2, selective_scan, ScanDims, SSD_CHUNK};
use crate::host::kernels::sequence_gdn::{gated_delta_net, GdnDims, CHUNK};
use crate::host::kernels::testutil::{assert_close, back, rand_vec, to};
use half::f16;

/// GDN in f64: returns (o, final state).
fn gdn_f64(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    be: &[f32],
    s0: &[f32],
    d: GdnDims,
) -> (Vec<f32>, Vec<f32>) {
    let GdnDims {
        batch,
        seq,
        heads,
        n,
    } = d;
    let mut o = vec![0f32; batch * seq * heads * n];
    let mut fin = vec![0f32; s0.len()];
    for bi in 0..batch {
        for hd in 0..heads {
            let base = (bi * heads + hd) * n * n;
            let mut s: Vec<f64> = s0[base..base + n * n].iter().map(|&x| x as f64).collect();
            for t in 0..seq {
                let r = ((bi * seq + t) * heads + hd) * n;
                let gi = (bi * seq + t) * heads + hd;
                let (al, b) = ((g[gi] as f64).exp(), be[gi] as f64);
                let kt: Vec<f64> = k[r..r + n].iter().map(|&x| x as f64).collect();
                for i in 0..n {
                    let sk: f64 = (0..n).map(|j| s[i * n + j] * kt[j]).sum();
                    for j in 0..n {
                        s[i * n + j] =
                            al * (s[i * n + j] - b * sk * kt[j]) + b * v[r + i] as f64 * kt[j];
                    }
                }
                for i in 0..n {
                    o[r + i] = (0..n).map(|j| s[i * n + j] * q[r + j] as f64).sum::<f64>() as f32;
                }
            }
            for (f, &x) in fin[base..base + n * n].iter_mut().zip(&s) {
                *f = x as f32;
            }
        }
    }
    (o, fin)
}

struct Case {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    be: Vec<f32>,
    s0: Vec<f32>,
    d: GdnDims,
}

fn case(batch: usize, seq: usize, heads: usize, n: usize, seed: u64) -> Case {
    let qn = batch * seq * heads * n;
    let gn = batch * seq * heads;
    let unit = |seed: u64| {
        let mut x = rand_vec(qn, seed);
        for r in x.chunks_mut(n) {
            let norm = r.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-3);
            r.iter_mut().for_each(|v| *v /= norm);
        }
        x
    };
    Case {
        q: unit(seed),
        k: unit(seed + 1),
        v: rand_vec(qn, seed + 2),
        g: rand_vec(gn, seed + 3)
            .iter()
            .map(|x| -0.2 - 0.15 * x)
            .collect(),
        be: rand_vec(gn, seed + 4)
            .iter()
            .map(|x| 0.5 + 0.4 * x)
            .collect(),
        s0: rand_vec(batch * heads * n * n, seed + 5)
            .iter()
            .map(|x| 0.3 * x)
            .collect(),
        d: GdnDims {
            batch,
            seq,
            heads,
            n,
        },
    }
}

fn run_f32(c: &Case, form: ScanForm) -> (Vec<f32>, Vec<f32>) {
    let mut s = c.s0.clone();
    let mut o = vec![0f32; c.q.len()];
    gated_delta_net(&c.q, &c.k, &c.v, &c.g, &c.be, &mut s, &mut o, c.d, form).unwrap();
    (o, s)
}

#[test]
fn gdn_chunked_and_recurrent_agree_with_f64() {
    // one partial chunk, exactly one chunk, one + 1, two + partial
    for (seq, n) in [(7, 5), (CHUNK, 16), (CHUNK + 1, 8), (2 * CHUNK + 2, 16)] {
        let c = case(2, seq, 3, n, seq as u64);
        let (want_o, want_s) = gdn_f64(&c.q, &c.k, &c.v, &c.g, &c.be, &c.s0, c.d);
        let (ro, rs) = run_f32(&c, ScanForm::Recurrent);
        let (co, cs) = run_f32(&c, ScanForm::Chunked);
        assert_close(&ro, &want_o, 1e-5);
        assert_close(&rs, &want_s, 1e-5);
        assert_close(&co, &want_o, 2e-5);
        assert_close(&cs, &want_s, 2e-5);
        assert_close(&co, &ro, 2e-5);
    }
}

#[test]
fn gdn_f16_keeps_f32_accumulation() {
    let c = case(1, 70, 2, 16, 9);
    let (want_o, want_s) = gdn_f64(&c.q, &c.k, &c.v, &c.g, &c.be, &c.s0, c.d);
    for form in [ScanForm::Recurrent, ScanForm::Chunked] {
        let mut s = to::<f16>(&c.s0);
        let mut o = vec![f16::ZERO; c.q.len()];
        let h = |x: &[f32]| to::<f16>(x);
        gated_delta_net(
            &h(&c.q),
            &h(&c.k),
            &h(&c.v),
            &h(&c.g),
            &h(&c.be),
            &mut s,
            &mut o,
            c.d,
            form,
        )
        .unwrap();
        assert_close(&back(&o), &want_o, 2e-2);
        assert_close(&back(&s), &want_s, 2e-2);
    }
}

#[test]
fn gdn_rejects_short_operands() {
    let c = case(1, 3, 2, 4, 1);
    let mut s = c.s0.clone();
    let mut o = vec![0f32; 5];
    let e = gated_delta_net(
        &c.q,
        &c.k,
        &c.v,
        &c.g,
        &c.be,
        &mut s,
        &mut o,
        c.d,
        ScanForm::Auto,
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("[gated_delta_net] o"), "{e}");
}

#[test]
fn ssm_scans_resume_from_their_state() {
    // s steps at once == s1 steps then s − s1 from the state; and vs f64
    let (b, s, w, n, p) = (2, 9, 19, 5, 3);
    for (m2, form) in [
        (false, ScanForm::Auto),
        (true, ScanForm::Recurrent),
        (true, ScanForm::Chunked),
    ] {
        let cols = if m2 { w * p } else { w };
        let gates = w;
        let x = rand_vec(b * s * cols, 1);
        let dt: Vec<f32> = rand_vec(b * s * gates, 2)
            .iter()
            .map(|v| 0.2 + 0.15 * v)
            .collect();
        let a: Vec<f32> = rand_vec(if m2 { w } else { w * n }, 3)
            .iter()
            .map(|v| -0.8 + 0.5 * v)
            .collect();
        let bb = rand_vec(b * s * n, 4);
        let cc = rand_vec(b * s * n, 5);
        let st_len = if m2 { b * w * p * n } else { b * w * n };
        let run = |lo: usize, hi: usize, st: &mut [f32]| {
            let l = hi - lo;
            let cut = |v: &[f32], per: usize| -> Vec<f32> {
                (0..b)
                    .flat_map(|bi| v[(bi * s + lo) * per..(bi * s + hi) * per].to_vec())
                    .collect()
            };
            let mut y = vec![0f32; b * l * cols];
            let d = ScanDims {
                batch: b,
                seq: l,
                width: w,
                n,
            };
            if m2 {
                mamba2(
                    &cut(&x, cols),
                    &cut(&dt, gates),
                    &a,
                    &cut(&bb, n),
                    &cut(&cc, n),
                    Some(st),
                    &mut y,
                    d,
                    p,
                    form,
                )
                .unwrap();
            } else {
                selective_scan(
                    &cut(&x, cols),
                    &cut(&dt, gates),
                    &a,
                    &cut(&bb, n),
                    &cut(&cc, n),
                    Some(st),
                    &mut y,
                    d,
                )
                .unwrap();
            }
            y
        };
        let mut s_all = vec![0f32; st_len];
        let y_all = run(0, s, &mut s_all);
        let mut s_two = vec![0f32; st_len];
        let y1 = run(0, 4, &mut s_two);
        let y2 = run(4, s, &mut s_two);
        assert_close(&s_two, &s_all, 1e-5);
        for bi in 0..b {
            assert_close(
                &y1[bi * 4 * cols..(bi + 1) * 4 * cols],
                &y_all[bi * s * cols..(bi * s + 4) * cols],
                1e-5,
            );
            assert_close(
                &y2[bi * 5 * cols..(bi + 1) * 5 * cols],
                &y_all[(bi * s + 4) * cols..(bi + 1) * s * cols],
                1e-5,
            );
        }
        // f64 recurrence per (batch, column)
        for bi in 0..b {
            for col in 0..cols {
                let (ch, head) = (col, col / p);
                let mut h = vec![0f64; n];
                for t in 0..s {
                    let r = bi * s + t;
                    let step = if m2 {
                        dt[r * gates + head]
                    } else {
                        dt[r * gates + ch]
                    } as f64;
                    let mut y = 0f64;
                    for j in 0..n {
                        let av = if m2 { a[head] } else { a[ch * n + j] } as f64;
                        h[j] = (step * av).exp() * h[j]
                            + step * x[r * cols + col] as f64 * bb[r * n + j] as f64;
                        y += h[j] * cc[r * n + j] as f64;
                    }
                    let got = y_all[r * cols + col] as f64;
                    assert!(
                        (got - y).abs() <= 1e-5 * (1.0 + y.abs()),
                        "{m2} {bi} {col} {t}: {got} vs {y}"
                    );
                }
            }
        }
    }
}

#[test]
fn mamba2_chunked_matches_recurrent_across_chunks() {
    // two full chunks and a partial one, starting from a non-zero state
    let (b, s, heads, p, n) = (2, 2 * SSD_CHUNK + 3, 3, 4, 16);
    let x = rand_vec(b * s * heads * p, 11);
    let dt: Vec<f32> = rand_vec(b * s * heads, 12)
        .iter()
        .map(|v| 0.1 + 0.08 * v)
        .collect();
    let a: Vec<f32> = rand_vec(heads, 13).iter().map(|v| -1.0 + 0.5 * v).collect();
    let bb = rand_vec(b * s * n, 14);
    let cc = rand_vec(b * s * n, 15);
    let s0: Vec<f32> = rand_vec(b * heads * p * n, 16)
        .iter()
        .map(|v| 0.5 * v)
        .collect();
    let d = ScanDims {
        batch: b,
        seq: s,
        width: heads,
        n,
    };
    let run = |form| {
        let mut st = s0.clone();
        let mut y = vec![0f32; x.len()];
        mamba2(&x, &dt, &a, &bb, &cc, Some(&mut st), &mut y, d, p, form).unwrap();
        (y, st)
    };
    let (ry, rs) = run(ScanForm::Recurrent);
    let (cy, cs) = run(ScanForm::Chunked);
    assert_close(&cy, &ry, 2e-5);
    assert_close(&cs, &rs, 2e-5);
}
