//! backward.metal's `attention_bwd_f32`: dq, dk and dv of scaled-dot-product
//! attention against the vector-Jacobian product of an f64 forward
//! (`softmax(q·kᵀ·scale + mask)·v`, a fully masked row giving 0) taken by
//! central differences, for every mask kind (none, causal with a longer
//! key sequence, binary with a fully masked row, additive bias, sliding
//! window), both layouts (`[b, s, heads, d]` and `[b, heads, s, d]`), odd
//! sequence lengths and head dims. Tolerance f32 `2e-5 + 1e-4·|ref|`.

use super::backward::{f64s, run, vjp, F32_TOL};
use super::common::{assert_close, uniform, Dt};
use rlx_metal::metal::args::{AttnBwdArgs, KernelArgs};

#[derive(Clone, Copy, Debug)]
struct Case {
    batch: usize,
    seq: usize,
    kv: usize,
    heads: usize,
    d: usize,
    mask_kind: u32,
    window: usize,
    bhsd: bool,
}

impl Case {
    fn at(&self, b: usize, h: usize, pos: usize, len: usize) -> usize {
        if self.bhsd {
            ((b * self.heads + h) * len + pos) * self.d
        } else {
            ((b * len + pos) * self.heads + h) * self.d
        }
    }

    /// Additive mask of score (b, h, i, j): 0 kept, −∞ dropped, or the bias.
    fn mask(&self, m: &[f64], b: usize, h: usize, i: usize, j: usize) -> f64 {
        let abs_i = (self.kv + i) as isize - self.seq as isize;
        let j = j as isize;
        let keep = match self.mask_kind {
            1 => j <= abs_i,
            4 => j <= abs_i && abs_i - j <= self.window as isize,
            2 => m[(b * self.seq + i) * self.kv + j as usize] != 0.0,
            3 => return m[((b * self.heads + h) * self.seq + i) * self.kv + j as usize],
            _ => true,
        };
        if keep {
            0.0
        } else {
            f64::NEG_INFINITY
        }
    }

    fn forward(&self, q: &[f64], k: &[f64], v: &[f64], m: &[f64]) -> Vec<f64> {
        let scale = 1.0 / (self.d as f64).sqrt();
        let mut out = vec![0.0; q.len()];
        for b in 0..self.batch {
            for h in 0..self.heads {
                for i in 0..self.seq {
                    let qi = &q[self.at(b, h, i, self.seq)..][..self.d];
                    let s: Vec<f64> = (0..self.kv)
                        .map(|j| {
                            let kj = &k[self.at(b, h, j, self.kv)..][..self.d];
                            let dot: f64 = qi.iter().zip(kj).map(|(a, c)| a * c).sum();
                            dot * scale + self.mask(m, b, h, i, j)
                        })
                        .collect();
                    let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    if mx == f64::NEG_INFINITY {
                        continue;
                    }
                    let den: f64 = s.iter().map(|x| (x - mx).exp()).sum();
                    let o = self.at(b, h, i, self.seq);
                    for (j, sj) in s.iter().enumerate() {
                        let p = (sj - mx).exp() / den;
                        let vj = &v[self.at(b, h, j, self.kv)..][..self.d];
                        for t in 0..self.d {
                            out[o + t] += p * vj[t];
                        }
                    }
                }
            }
        }
        out
    }
}

#[test]
fn attention_bwd_every_mask_and_layout() {
    let c = |batch, seq, kv, heads, d, mask_kind, window, bhsd| Case {
        batch,
        seq,
        kv,
        heads,
        d,
        mask_kind,
        window,
        bhsd,
    };
    let cases = [
        c(1, 1, 1, 1, 1, 0, 0, false),
        c(2, 3, 5, 2, 3, 0, 0, false),
        c(1, 5, 7, 3, 4, 1, 0, true),
        c(2, 4, 5, 2, 5, 2, 0, false),
        c(1, 3, 6, 2, 3, 3, 0, true),
        c(2, 7, 7, 1, 6, 4, 2, false),
    ];
    for (n, cs) in cases.iter().enumerate() {
        let seed = 1000 + n as u64 * 10;
        let q = uniform(seed, cs.batch * cs.seq * cs.heads * cs.d, -1.0, 1.0);
        let k = uniform(seed + 1, cs.batch * cs.kv * cs.heads * cs.d, -1.0, 1.0);
        let v = uniform(seed + 2, k.len(), -1.0, 1.0);
        let dy = uniform(seed + 3, q.len(), -1.0, 1.0);
        let mask: Vec<f32> = match cs.mask_kind {
            // binary: row 1 of batch 0 fully masked, the rest random
            2 => uniform(seed + 4, cs.batch * cs.seq * cs.kv, 0.0, 1.0)
                .iter()
                .enumerate()
                .map(|(e, &r)| {
                    let row = e / cs.kv;
                    f32::from(row != 1 && (r > 0.4 || e % cs.kv == 0))
                })
                .collect(),
            3 => uniform(seed + 4, cs.batch * cs.heads * cs.seq * cs.kv, -2.0, 1.0),
            _ => vec![0.0],
        };
        let (qd, kd, vd, md, dyd) = (f64s(&q), f64s(&k), f64s(&v), f64s(&mask), f64s(&dy));
        let wants = [
            vjp(&|x| cs.forward(x, &kd, &vd, &md), &qd, &dyd),
            vjp(&|x| cs.forward(&qd, x, &vd, &md), &kd, &dyd),
            vjp(&|x| cs.forward(&qd, &kd, x, &md), &vd, &dyd),
        ];
        for (wrt, want) in wants.iter().enumerate() {
            let a = AttnBwdArgs {
                batch: cs.batch as u32,
                seq: cs.seq as u32,
                kv_seq: cs.kv as u32,
                heads: cs.heads as u32,
                head_dim: cs.d as u32,
                mask_kind: cs.mask_kind,
                window: cs.window as u32,
                wrt: wrt as u32,
                bhsd: u32::from(cs.bhsd),
                scale: 1.0 / (cs.d as f32).sqrt(),
            };
            let len = if wrt == 0 { cs.seq } else { cs.kv };
            let threads = (cs.batch * cs.heads * len) as u32;
            let ins: Vec<Vec<u8>> = [&q, &k, &v, &dy, &mask]
                .iter()
                .map(|x| Dt::F32.encode(x))
                .collect();
            let got = run(
                "attention_bwd_f32",
                a.as_bytes(),
                &ins,
                want.len() * 4,
                threads,
            );
            let what = format!("attention_bwd wrt {wrt} {cs:?}");
            assert_close(&what, &Dt::F32.decode(&got), want, F32_TOL.0, F32_TOL.1);
        }
    }
}
