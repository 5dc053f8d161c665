//! Attention kernels: scaled dot-product attention (BSHD and BHSD layouts,
//! grouped-query heads, five mask kinds, logit soft-capping) and rotary
//! position embedding.
//!
//! SDPA works one query row (one batch, position, head) at a time with a
//! two-pass softmax: scores for the visible key range, their max, then
//! `exp(s - max)` weights accumulated against V in f32. Rows are
//! independent, so rayon splits the flat list of output rows; causal and
//! sliding-window masks shrink the key range instead of masking scores.
//! GQA maps query head `h` to KV head `h / (heads / kv_heads)` by index —
//! K and V are never repeated.

use rayon::prelude::*;

use super::{check_len, invalid, numel, Elem, Result, PAR_MIN};

/// Memory layout of q / k / v / out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `q, out [b, s, heads·d]`, `k, v [b, kv_s, kv_heads·d]`.
    Bshd,
    /// `q, out [b, heads, s, d]`, `k, v [b, kv_heads, kv_s, d]`.
    Bhsd,
}

/// SDPA problem dims.
#[derive(Debug, Clone, Copy)]
pub struct AttnDims {
    /// Batch size.
    pub batch: usize,
    /// Query positions (`s`).
    pub seq: usize,
    /// Key / value positions (`kv_s`; larger than `s` when decoding
    /// against a cache).
    pub kv_seq: usize,
    /// Query heads.
    pub heads: usize,
    /// Key / value heads (divides `heads`).
    pub kv_heads: usize,
    /// Head dim `d`.
    pub head_dim: usize,
}

/// Which keys a query row sees. Query `i` sits at absolute position
/// `abs = kv_s - s + i`.
#[derive(Debug, Clone, Copy)]
pub enum Mask<'a, T> {
    /// Every key.
    None,
    /// Keys `j <= abs`.
    Causal,
    /// `[b, s, kv_s]`; a nonzero entry makes the key visible.
    Custom(&'a [T]),
    /// Additive `[b, heads, s, kv_s]` bias on the (scaled, capped) scores.
    Bias(&'a [T]),
    /// Causal and `abs - j <= window`.
    SlidingWindow(usize),
}

/// Scalar options of SDPA.
#[derive(Debug, Clone, Copy, Default)]
pub struct AttnOpts {
    /// Score scale; `0.0` means `1/sqrt(d)`.
    pub scale: f32,
    /// Logit soft-cap: `cap·tanh(x/cap)` after scaling, before masking;
    /// `0.0` disables it.
    pub softcap: f32,
    /// Run-time key length `L` (`1 ≤ L ≤ kv_s`): only keys `0..L` are
    /// attended and query `i` sits at `L - s + i`. `None` means `kv_s`.
    pub kv_len: Option<i64>,
}

/// f32 dot product over eight independent lanes (vectorises).
#[inline(always)]
fn dot<T: Elem>(a: &[f32], b: &[T]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l].to_f32();
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ar.iter().zip(br) {
        s += x * y.to_f32();
    }
    s
}

/// Per-thread reusable buffers of [`sdpa`] (grown once, never shrunk, so a
/// warm decode loop allocates nothing).
#[derive(Default)]
struct Scratch {
    /// Queries of the head subset, widened to f32 (`gs · d`).
    qf: Vec<f32>,
    /// One key / value row widened to f32 (`d`).
    krow: Vec<f32>,
    /// Scores, then probabilities, head-major (`gs · n`).
    scores: Vec<f32>,
    /// Output accumulators (`gs · d`).
    acc: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// `out` as a raw pointer shared by the parallel tasks, each of which
/// writes its own disjoint rows.
#[derive(Clone, Copy)]
struct OutPtr<T>(*mut T);
// SAFETY: tasks write pairwise-disjoint rows (one query position and head
// subset each), so sharing the pointer across threads is race-free.
unsafe impl<T: Send> Send for OutPtr<T> {}
unsafe impl<T: Send> Sync for OutPtr<T> {}

impl<T> OutPtr<T> {
    /// Elements `r..r + n`.
    ///
    /// # Safety
    /// The range must lie inside the slice the pointer came from and no
    /// other live reference may overlap it.
    #[allow(clippy::mut_from_ref)]
    unsafe fn row(&self, r: usize, n: usize) -> &mut [T] {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(r), n) }
    }
}

/// `e^x` for `x ≤ 0` (scores minus their row max), vectorisable: Cephes'
/// `expf` range reduction `x = n·ln2 + r` and degree-6 polynomial (relative
/// error ~1e-7); inputs below -87 give ~1e-38 instead of underflowing.
#[inline(always)]
fn exp_nonpos(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const MAGIC: f32 = 12_582_912.0; // 1.5·2^23: adding it rounds to an integer
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    let x = x.max(-87.0);
    let n = (x * LOG2E + MAGIC) - MAGIC;
    let r = x - n * C1 - n * C2;
    let z = r * r;
    let p = ((((1.987_569_1e-4 * r + 1.398_2e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 0.5;
    let y = p * z + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// Everything one [`sdpa`] task needs.
struct Job<'a, T> {
    layout: Layout,
    mask: Mask<'a, T>,
    softcap: f32,
    scale: f32,
    q: &'a [T],
    k: &'a [T],
    v: &'a [T],
    out: OutPtr<T>,
    s: usize,
    kv_s: usize,
    len: usize,
    heads: usize,
    kv_heads: usize,
    d: usize,
    group: usize,
    parts: usize,
    per: usize,
}

impl<T: Elem> Job<'_, T> {
    /// Row offset of query (and output) `(bi, i, h)`.
    #[inline(always)]
    fn q_row(&self, bi: usize, i: usize, h: usize) -> usize {
        match self.layout {
            Layout::Bshd => ((bi * self.s + i) * self.heads + h) * self.d,
            Layout::Bhsd => ((bi * self.heads + h) * self.s + i) * self.d,
        }
    }

    /// Row offset of key / value `(bi, g, j)`.
    #[inline(always)]
    fn key_row(&self, bi: usize, g: usize, j: usize) -> usize {
        match self.layout {
            Layout::Bshd => ((bi * self.kv_s + j) * self.kv_heads + g) * self.d,
            Layout::Bhsd => ((bi * self.kv_heads + g) * self.kv_s + j) * self.d,
        }
    }

    /// Task `item`: one (batch, query position, KV head, head subset).
    #[inline(always)]
    fn run(&self, item: usize, sc: &mut Scratch) {
        let (d, s, parts) = (self.d, self.s, self.parts);
        let p = item % parts;
        let g = (item / parts) % self.kv_heads;
        let i = (item / (parts * self.kv_heads)) % s;
        let bi = item / (parts * self.kv_heads * s);
        let h0 = g * self.group + p * self.per;
        let gs = self.per.min((g + 1) * self.group - h0);
        let len = self.len;
        let abs = len as isize - s as isize + i as isize;
        let (lo, hi) = match self.mask {
            Mask::Causal => (0, (abs + 1).clamp(0, len as isize) as usize),
            Mask::SlidingWindow(w) => {
                let hi = (abs + 1).clamp(0, len as isize) as usize;
                let lo = (abs - w.min(isize::MAX as usize) as isize).clamp(0, hi as isize) as usize;
                (lo, hi)
            }
            _ => (0, len),
        };
        let n = hi - lo;
        let Scratch {
            qf,
            krow,
            scores,
            acc,
        } = sc;
        qf.clear();
        for h in h0..h0 + gs {
            let r = self.q_row(bi, i, h);
            qf.extend(self.q[r..r + d].iter().map(|x| x.to_f32()));
        }
        krow.resize(d, 0.0);
        scores.resize(n * gs, 0.0);
        // pass 1: every visible key row is read once for all gs heads
        for (jj, j) in (lo..hi).enumerate() {
            let kr = self.key_row(bi, g, j);
            krow.iter_mut()
                .zip(&self.k[kr..kr + d])
                .for_each(|(o, x)| *o = x.to_f32());
            for t in 0..gs {
                let mut x = dot(krow, &qf[t * d..t * d + d]) * self.scale;
                if self.softcap > 0.0 {
                    x = self.softcap * (x / self.softcap).tanh();
                }
                match self.mask {
                    Mask::Custom(m) if m[(bi * s + i) * self.kv_s + j].to_f32() == 0.0 => {
                        x = f32::NEG_INFINITY
                    }
                    Mask::Bias(m) => {
                        x += m[((bi * self.heads + h0 + t) * s + i) * self.kv_s + j].to_f32()
                    }
                    _ => {}
                }
                scores[t * n + jj] = x;
            }
        }
        // softmax numerators per head, in place: -1 marks a masked key
        // (never read below); NaN / +inf poison the head's row
        acc.clear();
        acc.resize(gs * d, 0.0);
        for t in 0..gs {
            let row = &mut scores[t * n..(t + 1) * n];
            let bad = row.iter().any(|x| x.is_nan() || *x == f32::INFINITY);
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let r = self.q_row(bi, i, h0 + t);
            if bad || max == f32::NEG_INFINITY {
                let fill = T::from_f32(if bad { f32::NAN } else { 0.0 });
                // SAFETY: row `r` (d elements, in bounds: q_len was checked
                // against `out`) belongs to exactly this task.
                unsafe { self.out.row(r, d) }.fill(fill);
                row.fill(-1.0);
                continue;
            }
            for x in row.iter_mut() {
                let e = exp_nonpos(*x - max);
                *x = if *x == f32::NEG_INFINITY { -1.0 } else { e };
            }
        }
        // pass 2: every visible value row is read once
        let mut sums = [0f32; 64];
        for c0 in (0..gs).step_by(64) {
            let cn = (gs - c0).min(64);
            sums[..cn].fill(0.0);
            for (jj, j) in (lo..hi).enumerate() {
                let vr = self.key_row(bi, g, j);
                let mut widened = false;
                for t in 0..cn {
                    let pw = scores[(c0 + t) * n + jj];
                    if pw < 0.0 {
                        continue; // masked: its value is never read
                    }
                    if !widened {
                        krow.iter_mut()
                            .zip(&self.v[vr..vr + d])
                            .for_each(|(o, x)| *o = x.to_f32());
                        widened = true;
                    }
                    sums[t] += pw;
                    let a = &mut acc[(c0 + t) * d..(c0 + t) * d + d];
                    a.iter_mut()
                        .zip(krow.iter())
                        .for_each(|(a, x)| *a += pw * x);
                }
            }
            for t in 0..cn {
                if sums[t] == 0.0
                    && scores[(c0 + t) * n..(c0 + t + 1) * n]
                        .iter()
                        .all(|&x| x < 0.0)
                {
                    continue; // written above (no visible key or a poisoned row)
                }
                let r = self.q_row(bi, i, h0 + c0 + t);
                let inv = 1.0 / sums[t];
                let a = &acc[(c0 + t) * d..(c0 + t) * d + d];
                // SAFETY: as above.
                let o = unsafe { self.out.row(r, d) };
                o.iter_mut()
                    .zip(a)
                    .for_each(|(o, a)| *o = T::from_f32(a * inv));
            }
        }
    }
}

/// [`Job::run`] compiled for AVX2 + FMA (8-wide dot products, exp and
/// accumulation).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn run_avx2<T: Elem>(job: &Job<'_, T>, item: usize, sc: &mut Scratch) {
    job.run(item, sc)
}

/// One task on this thread's scratch, through the widest build the CPU has.
fn run_item<T: Elem>(job: &Job<'_, T>, item: usize, avx2: bool) {
    SCRATCH.with(|cell| {
        let mut sc = cell.borrow_mut();
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            // SAFETY: `avx2` is only true when the CPU reported AVX2 and FMA.
            return unsafe { run_avx2(job, item, &mut sc) };
        }
        let _ = avx2;
        job.run(item, &mut sc)
    })
}

/// Scaled dot-product attention `out = softmax(mask(cap(q·kᵀ·scale)))·v`.
/// Needs `q, out >= b·s·heads·d`, `k, v >= b·kv_s·kv_heads·d`, a custom
/// mask `>= b·s·kv_s` and a bias `>= b·heads·s·kv_s`. A query row with no
/// visible key is written as zeros. A key whose final score is `-inf`
/// (masked) is skipped, so a NaN in its value does not leak; a NaN (or
/// `+inf`) score makes the whole row NaN, as IEEE softmax would.
///
/// With `opts.kv_len = Some(L)` only keys `0..L` take part (`1 ≤ L ≤ kv_s`,
/// else an error) and query `i` sits at absolute position `L - s + i`;
/// masks keep their `kv_s` stride.
///
/// Work is split per (batch, query position, KV head, subset of that KV
/// head's query heads): each task streams its visible K rows once for all
/// its query heads, then its V rows once. Subsets are only split below a
/// whole GQA group when there are too few tasks to keep every thread busy
/// (decode). On x86-64 with AVX2 + FMA the task body is compiled 8-wide.
#[allow(clippy::too_many_arguments)]
pub fn sdpa<T: Elem>(
    dims: &AttnDims,
    layout: Layout,
    mask: Mask<'_, T>,
    opts: AttnOpts,
    q: &[T],
    k: &[T],
    v: &[T],
    out: &mut [T],
) -> Result<()> {
    const K: &str = "sdpa";
    let AttnDims {
        batch,
        seq: s,
        kv_seq: kv_s,
        heads,
        kv_heads,
        head_dim: d,
    } = *dims;
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(invalid(
            K,
            format!("{heads} heads not divisible by {kv_heads} kv heads"),
        ));
    }
    let q_len = numel(K, &[batch, s, heads, d])?;
    let kv_total = numel(K, &[batch, kv_s, kv_heads, d])?;
    check_len(K, "q", q.len(), q_len)?;
    check_len(K, "out", out.len(), q_len)?;
    check_len(K, "k", k.len(), kv_total)?;
    check_len(K, "v", v.len(), kv_total)?;
    match mask {
        Mask::Custom(m) => check_len(K, "mask", m.len(), numel(K, &[batch, s, kv_s])?)?,
        Mask::Bias(m) => check_len(K, "bias", m.len(), numel(K, &[batch, heads, s, kv_s])?)?,
        _ => {}
    }
    let len = match opts.kv_len {
        None => kv_s,
        Some(l) if l >= 1 && (l as u64) <= kv_s as u64 => l as usize,
        Some(l) => {
            return Err(invalid(
                K,
                format!("kv_len {l} out of range 1..={kv_s} (the key/value capacity)"),
            ))
        }
    };
    if q_len == 0 {
        return Ok(());
    }
    let scale = if opts.scale == 0.0 {
        1.0 / (d as f32).sqrt()
    } else {
        opts.scale
    };
    let group = heads / kv_heads;
    let base = batch * s * kv_heads;
    let threads = rayon::current_num_threads().max(1);
    // split GQA groups only when whole groups leave threads idle
    let parts = if base >= 2 * threads {
        1
    } else {
        (2 * threads).div_ceil(base).min(group)
    };
    let per = group.div_ceil(parts);
    let parts = group.div_ceil(per);
    let items = base * parts;
    let work = (per * len * d).max(1);
    let min_items = (PAR_MIN / work).max(1);
    let job = Job {
        layout,
        mask,
        softcap: opts.softcap,
        scale,
        q,
        k,
        v,
        out: OutPtr(out.as_mut_ptr()),
        s,
        kv_s,
        len,
        heads,
        kv_heads,
        d,
        group,
        parts,
        per,
    };
    #[cfg(target_arch = "x86_64")]
    let avx2 = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    let avx2 = false;
    if items <= min_items {
        (0..items).for_each(|it| run_item(&job, it, avx2));
    } else {
        (0..items)
            .into_par_iter()
            .with_min_len(min_items)
            .for_each(|it| run_item(&job, it, avx2));
    }
    Ok(())
}

/// [`sdpa`] with one run-time key length per batch entry (`lens[b]`, each
/// `1 ≤ L ≤ kv_s`): several sequences of one fixed-capacity cache decoded
/// in one step. Entry `b` is an independent SDPA over its own q / k / v /
/// mask rows with `kv_len = lens[b]`, so each row equals the same sequence
/// run alone.
#[allow(clippy::too_many_arguments)]
pub fn sdpa_per_batch<T: Elem>(
    dims: &AttnDims,
    layout: Layout,
    mask: Mask<'_, T>,
    scale: f32,
    softcap: f32,
    lens: &[i32],
    q: &[T],
    k: &[T],
    v: &[T],
    out: &mut [T],
) -> Result<()> {
    const K: &str = "sdpa";
    let b = dims.batch;
    check_len(K, "kv_len", lens.len(), b)?;
    let one = AttnDims { batch: 1, ..*dims };
    let qn = numel(K, &[dims.seq, dims.heads, dims.head_dim])?;
    let kn = numel(K, &[dims.kv_seq, dims.kv_heads, dims.head_dim])?;
    check_len(K, "q", q.len(), numel(K, &[b, qn])?)?;
    check_len(K, "out", out.len(), numel(K, &[b, qn])?)?;
    check_len(K, "k", k.len(), numel(K, &[b, kn])?)?;
    check_len(K, "v", v.len(), numel(K, &[b, kn])?)?;
    let mn = match mask {
        Mask::Custom(_) => numel(K, &[dims.seq, dims.kv_seq])?,
        Mask::Bias(_) => numel(K, &[dims.heads, dims.seq, dims.kv_seq])?,
        _ => 0,
    };
    for (i, &len) in lens.iter().enumerate() {
        let m = match mask {
            Mask::Custom(m) => Mask::Custom(m.get(i * mn..(i + 1) * mn).unwrap_or(&[])),
            Mask::Bias(m) => Mask::Bias(m.get(i * mn..(i + 1) * mn).unwrap_or(&[])),
            other => other,
        };
        let opts = AttnOpts {
            scale,
            softcap,
            kv_len: Some(i64::from(len)),
        };
        sdpa(
            &one,
            layout,
            m,
            opts,
            &q[i * qn..(i + 1) * qn],
            &k[i * kn..(i + 1) * kn],
            &v[i * kn..(i + 1) * kn],
            &mut out[i * qn..(i + 1) * qn],
        )?;
    }
    Ok(())
}

/// Rotary embedding geometry.
#[derive(Debug, Clone, Copy)]
pub struct RopeDims {
    /// Batch size.
    pub batch: usize,
    /// Positions per sequence.
    pub seq: usize,
    /// Elements per token row written to `out` (`heads · head_dim`).
    pub hidden: usize,
    /// Elements between consecutive token rows of `x` (≥ `hidden` when `x`
    /// is a slice of a wider fused projection).
    pub src_row_stride: usize,
    /// Head dim; `hidden` is a multiple of it.
    pub head_dim: usize,
    /// Leading dims of each head that rotate (even, ≤ `head_dim`).
    pub n_rot: usize,
    /// NeoX pairs `(i, i + n_rot/2)`; otherwise interleaved `(2i, 2i+1)`.
    pub neox: bool,
    /// `cos`/`sin` are per token `[b·s, n_rot/2]` instead of `[s, n_rot/2]`.
    pub per_token: bool,
}

/// Rotary position embedding of `x` into dense `out [b·s, hidden]`:
/// for each pair `(a, b)` with angle row `t`, `out_a = a·cos − b·sin`,
/// `out_b = a·sin + b·cos`; dims past `n_rot` are copied. Needs
/// `x >= (b·s − 1)·src_row_stride + hidden`, `out >= b·s·hidden`,
/// `cos, sin >= rows·n_rot/2` (rows = `s`, or `b·s` per token).
pub fn rope<T: Elem, C: Elem>(
    p: &RopeDims,
    x: &[T],
    cos: &[C],
    sin: &[C],
    out: &mut [T],
) -> Result<()> {
    const K: &str = "rope";
    let RopeDims {
        batch,
        seq,
        hidden,
        src_row_stride,
        head_dim,
        n_rot,
        neox,
        per_token,
    } = *p;
    if head_dim == 0 || hidden % head_dim != 0 {
        return Err(invalid(
            K,
            format!("hidden {hidden} is not a multiple of head_dim {head_dim}"),
        ));
    }
    if n_rot % 2 != 0 || n_rot > head_dim {
        return Err(invalid(
            K,
            format!("n_rot {n_rot} must be even and <= head_dim {head_dim}"),
        ));
    }
    let tokens = numel(K, &[batch, seq])?;
    let total = numel(K, &[tokens, hidden])?;
    check_len(K, "out", out.len(), total)?;
    if total == 0 {
        return Ok(());
    }
    check_len(
        K,
        "x",
        x.len(),
        numel(K, &[tokens - 1, src_row_stride])? + hidden,
    )?;
    let half = n_rot / 2;
    let trows = if per_token { tokens } else { seq };
    check_len(K, "cos", cos.len(), trows * half)?;
    check_len(K, "sin", sin.len(), trows * half)?;
    let min_rows = (PAR_MIN / hidden).max(1);
    out[..total]
        .par_chunks_mut(hidden)
        .enumerate()
        .with_min_len(min_rows)
        .for_each(|(t, orow)| {
            let xrow = &x[t * src_row_stride..t * src_row_stride + hidden];
            let tr = if per_token { t } else { t % seq };
            let (c, sn) = (
                &cos[tr * half..tr * half + half],
                &sin[tr * half..tr * half + half],
            );
            for (oh, xh) in orow
                .chunks_exact_mut(head_dim)
                .zip(xrow.chunks_exact(head_dim))
            {
                if neox {
                    let (xa, xrest) = xh.split_at(half);
                    let (oa, orest) = oh.split_at_mut(half);
                    let (xb, xtail) = xrest.split_at(half);
                    let (ob, otail) = orest.split_at_mut(half);
                    for (((((oa, ob), a), b), c), s) in oa
                        .iter_mut()
                        .zip(ob.iter_mut())
                        .zip(xa)
                        .zip(xb)
                        .zip(c)
                        .zip(sn)
                    {
                        let (a, b, c, s) = (a.to_f32(), b.to_f32(), c.to_f32(), s.to_f32());
                        *oa = T::from_f32(a * c - b * s);
                        *ob = T::from_f32(a * s + b * c);
                    }
                    otail.copy_from_slice(xtail);
                } else {
                    let (xr, xtail) = xh.split_at(n_rot);
                    let (or, otail) = oh.split_at_mut(n_rot);
                    for (((o2, x2), c), s) in or
                        .chunks_exact_mut(2)
                        .zip(xr.chunks_exact(2))
                        .zip(c)
                        .zip(sn)
                    {
                        let (a, b, c, s) = (x2[0].to_f32(), x2[1].to_f32(), c.to_f32(), s.to_f32());
                        o2[0] = T::from_f32(a * c - b * s);
                        o2[1] = T::from_f32(a * s + b * c);
                    }
                    otail.copy_from_slice(xtail);
                }
            }
        });
    Ok(())
}

#[cfg(test)]
#[path = "attention_tests.rs"]
mod tests;
