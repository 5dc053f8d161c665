//! f32 gradient of scaled dot-product attention (the native kernel of the
//! `attention_bwd` thunk), computed the flash-attention way: nothing of the
//! forward is saved, each tile of query rows recomputes its probabilities.
//!
//! Forward, per (batch, query head `h`, query row `i`), with `g` the
//! key/value head of `h` (GQA: `g = h / (heads / kv_heads)`):
//! `s_ij = scale·q_i·k_j + mask_ij`, `P = softmax_j(s)`, `o_i = Σ_j P_ij v_j`.
//! Gradient from the upstream `dO`:
//! - `dV_j = Σ_i P_ij dO_i` (summed over the query heads of the group),
//! - `dP_ij = dO_i·v_j`, `dS_ij = P_ij (dP_ij − Σ_l P_il dP_il)`,
//! - `dQ_i = scale·Σ_j dS_ij k_j`, `dK_j = scale·Σ_i dS_ij q_i` (summed over
//!   the group).
//!
//! A task takes a tile of at most `TILE` (32) query rows of one head: the
//! score tile `Q·Kᵀ` (and `dO·Vᵀ` for dq / dk) is one small GEMM over the
//! keys the tile can see (causal and sliding-window masks shrink that key
//! range), the masked softmax and `dS` run row by row over contiguous
//! floats, and the products with K, Q or dO are GEMMs again, through the
//! `gemm` crate's packed micro-kernels on the calling rayon thread. dq
//! tiles are independent; the k / v gradient of a key/value head sums over
//! every query tile of its group, so those tasks own one (batch, kv head)
//! each and, when there are fewer of them than twice the threads, split
//! the tiles into parts whose partial sums are added at the end.
//!
//! A query row whose keys are all masked has zero probabilities: it
//! contributes nothing, and its dq row is zero (the forward writes zeros).

use gemm::Parallelism;
use rayon::prelude::*;

use super::attention::exp_nonpos;
use super::{check_len, invalid, numel, Result};

/// Query rows per task. 32 rather than 64: at 64 causal tokens the two
/// tiles of a head skip a quarter of the scores and balance two threads
/// better (~10 % faster per call on SmolLM2's shapes; equal at 256).
const TILE: usize = 32;

const K: &str = "attention_bwd";

/// Which attention operand the gradient is taken with respect to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnWrt {
    /// Queries.
    Q,
    /// Keys.
    K,
    /// Values.
    V,
}

/// Masking of the scores. Query `i` sits at absolute position
/// `kv_seq − seq + i`.
#[derive(Debug, Clone, Copy)]
pub enum AttnGradMask<'a> {
    /// Every key.
    None,
    /// Keys `j ≤ abs`.
    Causal,
    /// `[batch, seq, kv_seq]`: a nonzero entry keeps the key.
    Binary(&'a [f32]),
    /// Additive `[batch, heads, seq, kv_seq]` bias on the scaled scores.
    Bias(&'a [f32]),
    /// Causal and `abs − j ≤ window`.
    Window(usize),
}

/// Geometry of an attention gradient.
#[derive(Debug, Clone, Copy)]
pub struct AttnGradDims {
    /// Batch.
    pub batch: usize,
    /// Query length.
    pub seq: usize,
    /// Key length.
    pub kv_seq: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (divides `heads`).
    pub kv_heads: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Score scale (`1/√head_dim` for the thunk).
    pub scale: f32,
    /// Operands `[b, heads, L, d]` (else `[b, L, heads, d]`).
    pub bhsd: bool,
}

/// Gradient of `softmax(scale·q kᵀ + mask) v` with respect to `wrt`,
/// written to `out` (the chosen operand's size). q / dy hold `batch·seq·
/// heads·head_dim` floats, k / v `batch·kv_seq·kv_heads·head_dim`; a
/// binary mask `batch·seq·kv_seq`, a bias `batch·heads·seq·kv_seq`.
#[allow(clippy::too_many_arguments)]
pub fn attention_grad(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    dy: &[f32],
    mask: AttnGradMask<'_>,
    wrt: AttnWrt,
    out: &mut [f32],
    d: AttnGradDims,
) -> Result<()> {
    let (b, s, kv, hd) = (d.batch, d.seq, d.kv_seq, d.head_dim);
    if d.kv_heads == 0 || !d.heads.is_multiple_of(d.kv_heads) {
        return Err(invalid(
            K,
            format!("{} heads over {} kv heads", d.heads, d.kv_heads),
        ));
    }
    let nq = numel(K, &[b, s, d.heads, hd])?;
    let nk = numel(K, &[b, kv, d.kv_heads, hd])?;
    check_len(K, "q", q.len(), nq)?;
    check_len(K, "dy", dy.len(), nq)?;
    check_len(K, "k", k.len(), nk)?;
    check_len(K, "v", v.len(), nk)?;
    match mask {
        AttnGradMask::Binary(m) => check_len(K, "mask", m.len(), numel(K, &[b, s, kv])?)?,
        AttnGradMask::Bias(m) => check_len(K, "mask", m.len(), numel(K, &[b, d.heads, s, kv])?)?,
        _ => {}
    }
    let nout = if wrt == AttnWrt::Q { nq } else { nk };
    check_len(K, "out", out.len(), nout)?;
    if nout == 0 {
        return Ok(());
    }
    let job = Job {
        d,
        q,
        k,
        v,
        dy,
        mask,
        group: d.heads / d.kv_heads,
        tiles: s.div_ceil(TILE),
    };
    let out = &mut out[..nout];
    if wrt == AttnWrt::Q {
        job.dq(out);
    } else {
        job.dkv(wrt, out);
    }
    Ok(())
}

/// A strided view of an f32 matrix: element `(r, c)` at `off + r·rs + c·cs`.
#[derive(Debug, Clone, Copy)]
struct Mat {
    off: usize,
    rs: usize,
    cs: usize,
    rows: usize,
    cols: usize,
}

impl Mat {
    /// Row-major `rows × cols` with row stride `rs`.
    fn rows(off: usize, rs: usize, rows: usize, cols: usize) -> Self {
        Mat {
            off,
            rs,
            cs: 1,
            rows,
            cols,
        }
    }

    /// The transpose of [`Mat::rows`]`(off, rs, cols, rows)`.
    fn cols(off: usize, rs: usize, rows: usize, cols: usize) -> Self {
        Mat {
            off,
            rs: 1,
            cs: rs,
            rows,
            cols,
        }
    }

    /// True when every element lies inside a slice of `len` floats.
    fn fits(&self, len: usize) -> bool {
        if self.rows == 0 || self.cols == 0 {
            return true;
        }
        (self.rows - 1)
            .checked_mul(self.rs)
            .zip((self.cols - 1).checked_mul(self.cs))
            .and_then(|(r, c)| r.checked_add(c)?.checked_add(self.off))
            .is_some_and(|last| last < len)
    }
}

/// `c = beta·a·b`, or `c += beta·a·b` when `acc`, single-threaded.
#[allow(clippy::too_many_arguments)]
fn mm(c: &mut [f32], cm: Mat, a: &[f32], am: Mat, b: &[f32], bm: Mat, beta: f32, acc: bool) {
    let (m, n, kk) = (cm.rows, cm.cols, am.cols);
    assert!(
        am.rows == m && bm.cols == n && bm.rows == kk,
        "[{K}] gemm dims"
    );
    assert!(
        cm.fits(c.len()) && am.fits(a.len()) && bm.fits(b.len()),
        "[{K}] gemm extents"
    );
    if m == 0 || n == 0 || kk == 0 {
        if !acc && m > 0 && n > 0 {
            for r in 0..m {
                for col in 0..n {
                    c[cm.off + r * cm.rs + col * cm.cs] = 0.0;
                }
            }
        }
        return;
    }
    // SAFETY: `fits` checked that every element of the three views lies
    // inside its slice; `c` is borrowed mutably, so it aliases neither `a`
    // nor `b`. Strides are element counts that fit the slices, so they
    // fit an isize.
    unsafe {
        gemm::gemm(
            m,
            n,
            kk,
            c.as_mut_ptr().add(cm.off),
            cm.cs as isize,
            cm.rs as isize,
            acc,
            a.as_ptr().add(am.off),
            am.cs as isize,
            am.rs as isize,
            b.as_ptr().add(bm.off),
            bm.cs as isize,
            bm.rs as isize,
            1.0,
            beta,
            false,
            false,
            false,
            Parallelism::None,
        )
    }
}

/// Sum over 8 independent lanes (vectorisable).
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Per-task buffers: the probability tile and the `dP` / `dS` tile.
#[derive(Default)]
struct Scratch {
    p: Vec<f32>,
    ds: Vec<f32>,
}

struct Job<'a> {
    d: AttnGradDims,
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    dy: &'a [f32],
    mask: AttnGradMask<'a>,
    group: usize,
    tiles: usize,
}

impl Job<'_> {
    /// Offset of query (and dy / dq) row `(b, h, i)`.
    fn q_at(&self, b: usize, h: usize, i: usize) -> usize {
        let d = &self.d;
        if d.bhsd {
            ((b * d.heads + h) * d.seq + i) * d.head_dim
        } else {
            ((b * d.seq + i) * d.heads + h) * d.head_dim
        }
    }

    /// Offset of key (and value / dk / dv) row `(b, g, j)`.
    fn k_at(&self, b: usize, g: usize, j: usize) -> usize {
        let d = &self.d;
        if d.bhsd {
            ((b * d.kv_heads + g) * d.kv_seq + j) * d.head_dim
        } else {
            ((b * d.kv_seq + j) * d.kv_heads + g) * d.head_dim
        }
    }

    /// Distance between consecutive query rows of one head.
    fn q_rs(&self) -> usize {
        if self.d.bhsd {
            self.d.head_dim
        } else {
            self.d.heads * self.d.head_dim
        }
    }

    /// Distance between consecutive key rows of one head.
    fn k_rs(&self) -> usize {
        if self.d.bhsd {
            self.d.head_dim
        } else {
            self.d.kv_heads * self.d.head_dim
        }
    }

    /// Keys `[lo, hi)` query row `i` may see (both bounds non-decreasing
    /// in `i`).
    fn visible(&self, i: usize) -> (usize, usize) {
        let kv = self.d.kv_seq;
        let abs = (kv + i) as i128 - self.d.seq as i128;
        let hi = (abs + 1).clamp(0, kv as i128) as usize;
        match self.mask {
            AttnGradMask::Causal => (0, hi),
            AttnGradMask::Window(w) => {
                let lo = (abs - w as i128).clamp(0, hi as i128) as usize;
                (lo, hi)
            }
            _ => (0, kv),
        }
    }

    /// Query rows `[i0, i1)` of tile `t`.
    fn rows(&self, t: usize) -> (usize, usize) {
        let i0 = t * TILE;
        (i0, (i0 + TILE).min(self.d.seq))
    }

    /// Probabilities of rows `[i0, i1)` of head `(b, h)` into `sc.p` as an
    /// `nr × nk` tile over keys `[lo, lo + nk)`, and with `want_ds` their
    /// `dS` (without the scale) into `sc.ds`. Returns `(lo, nk)`.
    fn tile(
        &self,
        b: usize,
        h: usize,
        (i0, i1): (usize, usize),
        sc: &mut Scratch,
        want_ds: bool,
    ) -> (usize, usize) {
        let (lo, _) = self.visible(i0);
        let (_, hi) = self.visible(i1 - 1);
        if hi <= lo {
            return (lo, 0);
        }
        let (nr, nk, hd) = (i1 - i0, hi - lo, self.d.head_dim);
        let g = h / self.group;
        let qm = Mat::rows(self.q_at(b, h, i0), self.q_rs(), nr, hd);
        let kt = Mat::cols(self.k_at(b, g, lo), self.k_rs(), hd, nk);
        let tm = Mat::rows(0, nk, nr, nk);
        sc.p.resize(nr * nk, 0.0);
        mm(&mut sc.p, tm, self.q, qm, self.k, kt, self.d.scale, false);
        for (r, row) in sc.p.chunks_exact_mut(nk).enumerate() {
            self.softmax_row(b, h, i0 + r, lo, row);
        }
        if want_ds {
            sc.ds.resize(nr * nk, 0.0);
            let dym = Mat::rows(self.q_at(b, h, i0), self.q_rs(), nr, hd);
            mm(&mut sc.ds, tm, self.dy, dym, self.v, kt, 1.0, false);
            for (pr, dr) in sc.p.chunks_exact(nk).zip(sc.ds.chunks_exact_mut(nk)) {
                let delta = dot(pr, dr);
                dr.iter_mut()
                    .zip(pr)
                    .for_each(|(x, &p)| *x = p * (*x - delta));
            }
        }
        (lo, nk)
    }

    /// Mask and softmax one score row over keys `[lo, lo + row.len())`.
    fn softmax_row(&self, b: usize, h: usize, i: usize, lo: usize, row: &mut [f32]) {
        let (s, kv) = (self.d.seq, self.d.kv_seq);
        match self.mask {
            AttnGradMask::Causal | AttnGradMask::Window(_) => {
                let (a, z) = self.visible(i);
                let (a, z) = (a.max(lo) - lo, z.max(lo) - lo);
                for (j, x) in row.iter_mut().enumerate() {
                    if j < a || j >= z {
                        *x = f32::NEG_INFINITY;
                    }
                }
            }
            AttnGradMask::Binary(m) => {
                let mr = &m[(b * s + i) * kv + lo..][..row.len()];
                for (x, &keep) in row.iter_mut().zip(mr) {
                    if keep == 0.0 {
                        *x = f32::NEG_INFINITY;
                    }
                }
            }
            AttnGradMask::Bias(m) => {
                let mr = &m[((b * self.d.heads + h) * s + i) * kv + lo..][..row.len()];
                row.iter_mut().zip(mr).for_each(|(x, &a)| *x += a);
            }
            AttnGradMask::None => {}
        }
        let mx = row.iter().fold(f32::NEG_INFINITY, |a, &x| a.max(x));
        if mx == f32::NEG_INFINITY {
            row.fill(0.0);
            return;
        }
        let mut sum = [0f32; 8];
        for ch in row.chunks_mut(8) {
            for (l, x) in ch.iter_mut().enumerate() {
                let e = if *x == f32::NEG_INFINITY {
                    0.0
                } else {
                    exp_nonpos(*x - mx)
                };
                *x = e;
                sum[l] += e;
            }
        }
        let inv = 1.0 / sum.iter().sum::<f32>();
        row.iter_mut().for_each(|x| *x *= inv);
    }

    /// dq: one task per (batch, head, tile), scattered into `out`.
    fn dq(&self, out: &mut [f32]) {
        let (h, hd, tiles) = (self.d.heads, self.d.head_dim, self.tiles);
        let blocks: Vec<Vec<f32>> = (0..self.d.batch * h * tiles)
            .into_par_iter()
            .map_init(Scratch::default, |sc, t| {
                let (b, hh, rows) = (t / (h * tiles), (t / tiles) % h, self.rows(t % tiles));
                let nr = rows.1 - rows.0;
                let mut blk = vec![0f32; nr * hd];
                let (lo, nk) = self.tile(b, hh, rows, sc, true);
                if nk > 0 {
                    let g = hh / self.group;
                    let km = Mat::rows(self.k_at(b, g, lo), self.k_rs(), nk, hd);
                    let dsm = Mat::rows(0, nk, nr, nk);
                    let om = Mat::rows(0, hd, nr, hd);
                    mm(&mut blk, om, &sc.ds, dsm, self.k, km, self.d.scale, false);
                }
                blk
            })
            .collect();
        for (t, blk) in blocks.iter().enumerate() {
            let (b, hh, (i0, _)) = (t / (h * tiles), (t / tiles) % h, self.rows(t % tiles));
            for (r, row) in blk.chunks_exact(hd).enumerate() {
                let o = self.q_at(b, hh, i0 + r);
                out[o..o + hd].copy_from_slice(row);
            }
        }
    }

    /// dk / dv: per (batch, kv head) a `[kv_seq, head_dim]` sum over every
    /// tile of its query heads, cut into `parts` tasks.
    fn dkv(&self, wrt: AttnWrt, out: &mut [f32]) {
        let (kv, hd, g_n) = (self.d.kv_seq, self.d.head_dim, self.d.kv_heads);
        let units = self.d.batch * g_n;
        let items = self.group * self.tiles;
        let parts = (2 * rayon::current_num_threads())
            .div_ceil(units.max(1))
            .clamp(1, items.max(1));
        let sums: Vec<Vec<f32>> = (0..units * parts)
            .into_par_iter()
            .map_init(Scratch::default, |sc, t| {
                let (unit, part) = (t / parts, t % parts);
                let (b, g) = (unit / g_n, unit % g_n);
                let mut acc = vec![0f32; kv * hd];
                for item in part * items / parts..(part + 1) * items / parts {
                    let h = g * self.group + item / self.tiles;
                    let rows = self.rows(item % self.tiles);
                    self.kv_tile(wrt, b, h, rows, sc, &mut acc);
                }
                acc
            })
            .collect();
        for (unit, part_sums) in sums.chunks(parts).enumerate() {
            let (b, g) = (unit / g_n, unit % g_n);
            for j in 0..kv {
                let o = self.k_at(b, g, j);
                let dst = &mut out[o..o + hd];
                dst.copy_from_slice(&part_sums[0][j * hd..][..hd]);
                for ps in &part_sums[1..] {
                    dst.iter_mut()
                        .zip(&ps[j * hd..][..hd])
                        .for_each(|(x, &y)| *x += y);
                }
            }
        }
    }

    /// Add the dk or dv contribution of rows `rows` of head `(b, h)` to
    /// `acc` (`[kv_seq, head_dim]`).
    fn kv_tile(
        &self,
        wrt: AttnWrt,
        b: usize,
        h: usize,
        rows: (usize, usize),
        sc: &mut Scratch,
        acc: &mut [f32],
    ) {
        let want_ds = wrt == AttnWrt::K;
        let (lo, nk) = self.tile(b, h, rows, sc, want_ds);
        if nk == 0 {
            return;
        }
        let (nr, hd) = (rows.1 - rows.0, self.d.head_dim);
        let cm = Mat::rows(lo * hd, hd, nk, hd);
        let tt = Mat::cols(0, nk, nk, nr);
        let xm = Mat::rows(self.q_at(b, h, rows.0), self.q_rs(), nr, hd);
        if want_ds {
            // dK += scale·dSᵀ·Q
            mm(acc, cm, &sc.ds, tt, self.q, xm, self.d.scale, true);
        } else {
            // dV += Pᵀ·dO
            mm(acc, cm, &sc.p, tt, self.dy, xm, 1.0, true);
        }
    }
}

#[cfg(test)]
#[path = "backward_attn_tests.rs"]
mod tests;
