//! The f32 attention gradient against central finite differences of an f64
//! forward (written here from the definition, independent of the gradient
//! formulas) and against the former scalar f64 kernel, kept here as a
//! second oracle, over both layouts, every mask, GQA, other score scales
//! and sizes that are not multiples of the tile or of the SIMD width.

use super::super::testutil::rand_vec;
use super::*;

#[derive(Debug, Clone, Copy, PartialEq)]
enum M {
    None,
    Causal,
    Binary,
    Bias,
    Window(usize),
}

#[derive(Debug, Clone, Copy)]
struct Case {
    b: usize,
    s: usize,
    kv: usize,
    h: usize,
    g: usize,
    hd: usize,
    bhsd: bool,
    mask: M,
    /// Score scale; `None` is `1/√hd`.
    scale: Option<f64>,
}

struct Data {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    dy: Vec<f32>,
    m: Vec<f32>,
}

impl Case {
    fn scale(&self) -> f64 {
        self.scale.unwrap_or(1.0 / (self.hd as f64).sqrt())
    }
    fn nq(&self) -> usize {
        self.b * self.s * self.h * self.hd
    }
    fn nk(&self) -> usize {
        self.b * self.kv * self.g * self.hd
    }
    fn dims(&self) -> AttnGradDims {
        AttnGradDims {
            batch: self.b,
            seq: self.s,
            kv_seq: self.kv,
            heads: self.h,
            kv_heads: self.g,
            head_dim: self.hd,
            scale: self.scale() as f32,
            bhsd: self.bhsd,
        }
    }
    fn data(&self, seed: u64) -> Data {
        let nm = match self.mask {
            M::Binary => self.b * self.s * self.kv,
            M::Bias => self.b * self.h * self.s * self.kv,
            _ => 0,
        };
        let mut m = rand_vec(nm, seed + 4);
        if self.mask == M::Binary {
            // keep ~70%; query row 1 sees no key at all
            for (idx, x) in m.iter_mut().enumerate() {
                let (i, j) = ((idx / self.kv) % self.s, idx % self.kv);
                *x = if i == 1 || *x < -0.4 { 0.0 } else { 1.0 } * (j as f32 + 1.0);
            }
        }
        Data {
            q: rand_vec(self.nq(), seed),
            k: rand_vec(self.nk(), seed + 1),
            v: rand_vec(self.nk(), seed + 2),
            dy: rand_vec(self.nq(), seed + 3),
            m,
        }
    }
    fn mask<'a>(&self, m: &'a [f32]) -> AttnGradMask<'a> {
        match self.mask {
            M::None => AttnGradMask::None,
            M::Causal => AttnGradMask::Causal,
            M::Binary => AttnGradMask::Binary(m),
            M::Bias => AttnGradMask::Bias(m),
            M::Window(w) => AttnGradMask::Window(w),
        }
    }
    fn q_at(&self, b: usize, h: usize, i: usize) -> usize {
        if self.bhsd {
            ((b * self.h + h) * self.s + i) * self.hd
        } else {
            ((b * self.s + i) * self.h + h) * self.hd
        }
    }
    fn k_at(&self, b: usize, g: usize, j: usize) -> usize {
        if self.bhsd {
            ((b * self.g + g) * self.kv + j) * self.hd
        } else {
            ((b * self.kv + j) * self.g + g) * self.hd
        }
    }
    /// Additive mask of score `(b, h, i, j)`.
    fn add(&self, m: &[f32], b: usize, h: usize, i: usize, j: usize) -> f64 {
        let abs = (self.kv + i) as i64 - self.s as i64;
        let j64 = j as i64;
        let keep = match self.mask {
            M::None | M::Bias => true,
            M::Causal => j64 <= abs,
            M::Window(w) => j64 <= abs && abs - j64 <= w as i64,
            M::Binary => m[(b * self.s + i) * self.kv + j] != 0.0,
        };
        if !keep {
            return f64::NEG_INFINITY;
        }
        if self.mask == M::Bias {
            f64::from(m[((b * self.h + h) * self.s + i) * self.kv + j])
        } else {
            0.0
        }
    }

    /// `Σ dy·attention(q, k, v)` in f64.
    fn loss(&self, x: [&[f64]; 4], m: &[f32]) -> f64 {
        let [q, k, v, dy] = x;
        let rep = self.h / self.g;
        let mut total = 0.0;
        let mut p = vec![0f64; self.kv];
        for b in 0..self.b {
            for h in 0..self.h {
                for i in 0..self.s {
                    let qi = &q[self.q_at(b, h, i)..][..self.hd];
                    for (j, pj) in p.iter_mut().enumerate() {
                        let kj = &k[self.k_at(b, h / rep, j)..][..self.hd];
                        let sc: f64 = qi.iter().zip(kj).map(|(a, c)| a * c).sum();
                        *pj = sc * self.scale() + self.add(m, b, h, i, j);
                    }
                    let mx = p.iter().fold(f64::NEG_INFINITY, |a, &x| a.max(x));
                    if mx == f64::NEG_INFINITY {
                        continue;
                    }
                    let den: f64 = p.iter().map(|x| (x - mx).exp()).sum();
                    let dyi = &dy[self.q_at(b, h, i)..][..self.hd];
                    for (j, pj) in p.iter().enumerate() {
                        let w = (pj - mx).exp() / den;
                        let vj = &v[self.k_at(b, h / rep, j)..][..self.hd];
                        total += w * dyi.iter().zip(vj).map(|(a, c)| a * c).sum::<f64>();
                    }
                }
            }
        }
        total
    }

    fn grad(&self, x: &Data, wrt: AttnWrt) -> Vec<f32> {
        let n = if wrt == AttnWrt::Q {
            self.nq()
        } else {
            self.nk()
        };
        let mut out = vec![f32::NAN; n];
        attention_grad(
            &x.q,
            &x.k,
            &x.v,
            &x.dy,
            self.mask(&x.m),
            wrt,
            &mut out,
            self.dims(),
        )
        .unwrap();
        out
    }
}

const WRTS: [AttnWrt; 3] = [AttnWrt::Q, AttnWrt::K, AttnWrt::V];

/// Largest `|a − b|` over `max |b|`.
fn rel_err(a: &[f32], b: &[f64]) -> f64 {
    let scale = b.iter().fold(0f64, |m, x| m.max(x.abs())).max(1e-30);
    let err = a
        .iter()
        .zip(b)
        .fold(0f64, |m, (&x, y)| m.max((f64::from(x) - y).abs()));
    err / scale
}

/// Central differences (step 1e-5) of the f64 loss w.r.t. every element.
fn finite_diff(c: &Case, x: &Data, wrt: AttnWrt) -> Vec<f64> {
    let wide = |v: &[f32]| v.iter().map(|&t| f64::from(t)).collect::<Vec<f64>>();
    let mut ops = [wide(&x.q), wide(&x.k), wide(&x.v), wide(&x.dy)];
    let t = match wrt {
        AttnWrt::Q => 0,
        AttnWrt::K => 1,
        AttnWrt::V => 2,
    };
    let eps = 1e-5;
    (0..ops[t].len())
        .map(|e| {
            let x0 = ops[t][e];
            ops[t][e] = x0 + eps;
            let up = c.loss([&ops[0], &ops[1], &ops[2], &ops[3]], &x.m);
            ops[t][e] = x0 - eps;
            let dn = c.loss([&ops[0], &ops[1], &ops[2], &ops[3]], &x.m);
            ops[t][e] = x0;
            (up - dn) / (2.0 * eps)
        })
        .collect()
}

fn case(s: usize, kv: usize, h: usize, g: usize, hd: usize, bhsd: bool, mask: M) -> Case {
    Case {
        b: 2,
        s,
        kv,
        h,
        g,
        hd,
        bhsd,
        mask,
        scale: None,
    }
}

#[test]
fn matches_finite_differences() {
    let cases = [
        case(5, 7, 4, 2, 3, false, M::Causal),
        case(5, 7, 2, 2, 9, true, M::Window(2)),
        case(4, 6, 3, 1, 5, true, M::Bias),
        case(5, 5, 2, 2, 3, false, M::Binary),
        Case {
            scale: Some(0.37),
            ..case(6, 6, 2, 1, 4, false, M::None)
        },
        // three query tiles (32 + 32 + 6 rows)
        Case {
            b: 1,
            ..case(70, 73, 2, 1, 3, true, M::Causal)
        },
    ];
    let mut worst = 0f64;
    for (n, c) in cases.iter().enumerate() {
        let x = c.data(11 * n as u64 + 5);
        for wrt in WRTS {
            let fd = finite_diff(c, &x, wrt);
            let err = rel_err(&c.grad(&x, wrt), &fd);
            assert!(err <= 2e-6, "{c:?} {wrt:?}: relative error {err:e}");
            worst = worst.max(err);
        }
    }
    eprintln!("attention_grad vs finite differences: worst relative error {worst:e}");
}

#[test]
fn matches_the_f64_kernel() {
    let mut cases = vec![];
    for bhsd in [false, true] {
        for mask in [M::None, M::Causal, M::Binary, M::Bias, M::Window(5)] {
            cases.push(case(67, 131, 3, 3, 13, bhsd, mask));
            cases.push(case(9, 9, 6, 2, 64, bhsd, mask));
        }
    }
    // more query rows than keys: the first causal rows see nothing
    cases.push(case(11, 4, 2, 1, 8, false, M::Causal));
    cases.push(case(130, 130, 1, 1, 16, true, M::Window(70)));
    let mut worst = 0f64;
    for (n, c) in cases.iter().enumerate() {
        let x = c.data(7 * n as u64 + 1);
        for wrt in WRTS {
            let want = oracle(c, &x, wrt);
            let err = rel_err(&c.grad(&x, wrt), &want);
            assert!(err <= 1e-5, "{c:?} {wrt:?}: relative error {err:e}");
            worst = worst.max(err);
        }
    }
    eprintln!("attention_grad vs the f64 kernel: worst relative error {worst:e}");
}

#[test]
fn masked_out_rows_get_zero_gradient() {
    // binary mask: query row 1 sees no key (see `Case::data`)
    let c = case(4, 5, 2, 1, 8, false, M::Binary);
    let x = c.data(3);
    let dq = c.grad(&x, AttnWrt::Q);
    for b in 0..c.b {
        for h in 0..c.h {
            assert!(dq[c.q_at(b, h, 1)..][..c.hd].iter().all(|&v| v == 0.0));
        }
    }
    // causal with s > kv: rows 0..s-kv see nothing; dy there changes nothing
    let c = case(6, 3, 2, 2, 4, true, M::Causal);
    let mut x = c.data(4);
    let before = [c.grad(&x, AttnWrt::K), c.grad(&x, AttnWrt::V)];
    for b in 0..c.b {
        for h in 0..c.h {
            for i in 0..3 {
                x.dy[c.q_at(b, h, i)..][..c.hd].fill(100.0);
            }
        }
    }
    assert_eq!(before, [c.grad(&x, AttnWrt::K), c.grad(&x, AttnWrt::V)]);
}

#[test]
fn bad_geometry_is_an_error() {
    let c = case(3, 4, 4, 3, 2, false, M::None);
    let x = case(3, 4, 4, 4, 2, false, M::None).data(1);
    let mut out = vec![0f32; x.q.len()];
    let e = attention_grad(
        &x.q,
        &x.k,
        &x.v,
        &x.dy,
        AttnGradMask::None,
        AttnWrt::Q,
        &mut out,
        c.dims(),
    )
    .unwrap_err();
    assert!(e.to_string().starts_with("[attention_bwd] 4 heads over 3"));
    let c = case(3, 4, 2, 2, 2, false, M::Bias);
    let x = c.data(2);
    let e = attention_grad(
        &x.q,
        &x.k,
        &x.v,
        &x.dy,
        AttnGradMask::Bias(&x.m[1..]),
        AttnWrt::K,
        &mut out,
        c.dims(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("mask"), "{e}");
    let e = attention_grad(
        &x.q,
        &x.k,
        &x.v,
        &x.dy[1..],
        AttnGradMask::None,
        AttnWrt::V,
        &mut out,
        c.dims(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("dy"), "{e}");
    let huge = AttnGradDims {
        seq: usize::MAX,
        ..c.dims()
    };
    assert!(attention_grad(
        &x.q,
        &x.k,
        &x.v,
        &x.dy,
        AttnGradMask::None,
        AttnWrt::Q,
        &mut out,
        huge
    )
    .is_err());
}

#[test]
fn empty_shapes_write_zeros() {
    // no keys: dq is zero; no queries: dk is zero
    let c = case(3, 0, 2, 1, 4, false, M::None);
    let x = c.data(1);
    assert!(c.grad(&x, AttnWrt::Q).iter().all(|&v| v == 0.0));
    let c = case(0, 3, 2, 1, 4, true, M::Causal);
    let x = c.data(1);
    assert!(c.grad(&x, AttnWrt::K).iter().all(|&v| v == 0.0));
}

// ------------------------------------------------------------- f64 oracle

/// The former scalar kernel: every head has its own k / v and the scale is
/// `1/√hd`. GQA runs on k / v repeated per query head with the k / v
/// gradient summed per group; another scale is folded into q (and dq).
fn oracle(c: &Case, x: &Data, wrt: AttnWrt) -> Vec<f64> {
    let rep = c.h / c.g;
    let full = Case { g: c.h, ..*c };
    let expand = |src: &[f32]| {
        let mut o = vec![0f32; full.nk()];
        for b in 0..c.b {
            for h in 0..c.h {
                for j in 0..c.kv {
                    o[full.k_at(b, h, j)..][..c.hd]
                        .copy_from_slice(&src[c.k_at(b, h / rep, j)..][..c.hd]);
                }
            }
        }
        o
    };
    let factor = c.scale() * (c.hd as f64).sqrt();
    let q: Vec<f32> =
        x.q.iter()
            .map(|&t| (f64::from(t) * factor) as f32)
            .collect();
    let (k, v) = (expand(&x.k), expand(&x.v));
    let g = scalar_f64(c, [&q, &k, &v, &x.dy], &x.m, wrt);
    match wrt {
        AttnWrt::Q => g.iter().map(|t| t * factor).collect(),
        _ => {
            let mut o = vec![0f64; c.nk()];
            for b in 0..c.b {
                for h in 0..c.h {
                    for j in 0..c.kv {
                        let src = &g[full.k_at(b, h, j)..][..c.hd];
                        o[c.k_at(b, h / rep, j)..][..c.hd]
                            .iter_mut()
                            .zip(src)
                            .for_each(|(a, b)| *a += b);
                    }
                }
            }
            o
        }
    }
}

/// Scalar f64 gradient, heads = kv heads, scale `1/√hd`.
fn scalar_f64(c: &Case, x: [&[f32]; 4], mask: &[f32], wrt: AttnWrt) -> Vec<f64> {
    let full = Case { g: c.h, ..*c };
    let [q, k, v, dy] = x;
    let hd = c.hd;
    let scale = 1.0 / (hd as f64).sqrt();
    let wide = |s: &[f32]| s.iter().map(|&t| f64::from(t)).collect::<Vec<f64>>();
    let (len_out, n) = match wrt {
        AttnWrt::Q => (c.s, full.nq()),
        _ => (c.kv, full.nk()),
    };
    let mut out = vec![0f64; n];
    let mut p = vec![0f64; c.kv];
    let mut dp = vec![0f64; c.kv];
    for b in 0..c.b {
        for h in 0..c.h {
            let mut g = vec![0f64; len_out * hd];
            for i in 0..c.s {
                let qi = wide(&q[full.q_at(b, h, i)..][..hd]);
                let dyi = wide(&dy[full.q_at(b, h, i)..][..hd]);
                let mut mx = f64::NEG_INFINITY;
                for (j, pj) in p.iter_mut().enumerate() {
                    let kj = &k[full.k_at(b, h, j)..][..hd];
                    let dot: f64 = qi.iter().zip(kj).map(|(a, &t)| a * f64::from(t)).sum();
                    *pj = dot * scale + full.add(mask, b, h, i, j);
                    mx = mx.max(*pj);
                }
                if mx == f64::NEG_INFINITY {
                    continue;
                }
                let den: f64 = p
                    .iter_mut()
                    .map(|pj| {
                        *pj = (*pj - mx).exp();
                        *pj
                    })
                    .sum();
                p.iter_mut().for_each(|pj| *pj /= den);
                if wrt == AttnWrt::V {
                    for (j, &pj) in p.iter().enumerate() {
                        let gj = &mut g[j * hd..][..hd];
                        gj.iter_mut().zip(&dyi).for_each(|(o, y)| *o += pj * y);
                    }
                    continue;
                }
                let mut pdp = 0.0;
                for (j, dpj) in dp.iter_mut().enumerate() {
                    let vj = &v[full.k_at(b, h, j)..][..hd];
                    *dpj = dyi.iter().zip(vj).map(|(a, &t)| a * f64::from(t)).sum();
                    pdp += *dpj * p[j];
                }
                for j in 0..c.kv {
                    let ds = p[j] * (dp[j] - pdp) * scale;
                    if wrt == AttnWrt::Q {
                        let kj = &k[full.k_at(b, h, j)..][..hd];
                        let gi = &mut g[i * hd..][..hd];
                        gi.iter_mut()
                            .zip(kj)
                            .for_each(|(o, &t)| *o += ds * f64::from(t));
                    } else {
                        let gj = &mut g[j * hd..][..hd];
                        gj.iter_mut().zip(&qi).for_each(|(o, t)| *o += ds * t);
                    }
                }
            }
            for pos in 0..len_out {
                let o = if wrt == AttnWrt::Q {
                    full.q_at(b, h, pos)
                } else {
                    full.k_at(b, h, pos)
                };
                out[o..o + hd].copy_from_slice(&g[pos * hd..][..hd]);
            }
        }
    }
    out
}
