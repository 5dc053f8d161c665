//! Attention kernels: scaled dot-product attention (BSHD and BHSD layouts,
//! grouped-query heads, five mask kinds, logit soft-capping) and rotary
//! position embedding.
//!
//! SDPA works one *unit* (batch, query position, KV head) at a time, for
//! all the query heads of that KV head's GQA group, with a two-pass
//! softmax in f32: scores for the visible key range, their max, then
//! `exp(s - max)` weights accumulated against V (see `attention_core`).
//! Causal and sliding-window masks shrink the key range instead of masking
//! scores. GQA maps query head `h` to KV head `h / (heads / kv_heads)` by
//! index — K and V are never repeated.
//!
//! Prefill (more than [`DECODE_ROWS`] query rows) takes the blocked path
//! (`attention_block`): per (batch, query head, block of up to 64 query
//! rows), `S = Q·Kᵀ` and `O = P·V` are two GEMMs of the `gemm` crate
//! (strided operands, so neither layout is transposed and GQA reads the
//! shared KV head in place), with the scale, soft-cap, mask and row
//! softmax in between — the same semantics as the per-row path. It keeps
//! the per-row path when a block would see more than 4096 keys (no online
//! softmax over key chunks) or a visible value row is not finite (a masked
//! key's zero weight would turn its NaN into a NaN output).
//!
//! The per-row path splits the units across rayon's pool. Decode
//! (at most [`DECODE_ROWS`] query rows per call) has only a few units, so
//! each unit's key range is also cut into pieces (flash decoding) that the
//! spinning decode [`team`] runs — the same threads as the decode GEMVs, so
//! no second pool competes for the cores — and the pieces' partial softmax
//! states are combined on the caller.

use std::cell::RefCell;

use rayon::prelude::*;

use super::{check_len, invalid, numel, Elem, Result, PAR_MIN};
use crate::host::team;

#[path = "attention_block.rs"]
mod sdpa_block;
#[path = "attention_core.rs"]
mod sdpa_core;
#[path = "attention_simd.rs"]
mod sdpa_simd;
pub(crate) use self::sdpa_core::exp_nonpos;
use self::sdpa_core::{finish, Job, Scratch};

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

/// Query rows (`batch · s`) up to which a call takes the decode path.
pub const DECODE_ROWS: usize = 4;

/// Fewest keys worth a piece of their own on the decode path.
const MIN_PIECE_KEYS: usize = 64;

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
    /// The decode path's pieces, on the calling thread.
    static PARTS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// A buffer shared by parallel tasks, each of which writes its own
/// disjoint range.
#[derive(Clone, Copy)]
struct SharedPtr<T>(*mut T);
// SAFETY: tasks write pairwise-disjoint ranges (one unit or piece each),
// so sharing the pointer across threads is race-free.
unsafe impl<T: Send> Send for SharedPtr<T> {}
unsafe impl<T: Send> Sync for SharedPtr<T> {}

impl<T> SharedPtr<T> {
    /// Elements `r..r + n`.
    ///
    /// # Safety
    /// The range must lie inside the slice the pointer came from and no
    /// other live reference may overlap it.
    #[allow(clippy::mut_from_ref)]
    unsafe fn range(&self, r: usize, n: usize) -> &mut [T] {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(r), n) }
    }
}

/// [`Job::partial`] compiled for AVX2 + FMA (8-wide dot products, exp and
/// accumulation; f16 K / V widened in registers with F16C).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn partial_avx2<T: Elem, U: Elem>(
    job: &Job<'_, T, U>,
    unit: usize,
    c: usize,
    sc: &mut Scratch,
    part: &mut [f32],
) {
    job.partial::<true>(unit, c, sc, part)
}

/// Piece `c` of `unit` on this thread's scratch, through the widest build
/// the CPU has.
fn partial<T: Elem, U: Elem>(
    job: &Job<'_, T, U>,
    unit: usize,
    c: usize,
    part: &mut [f32],
    avx2: bool,
) {
    SCRATCH.with(|cell| {
        let mut sc = cell.borrow_mut();
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            // SAFETY: `avx2` is only true when the CPU reported AVX2, FMA and F16C.
            return unsafe { partial_avx2(job, unit, c, &mut sc, part) };
        }
        let _ = avx2;
        job.partial::<false>(unit, c, &mut sc, part)
    })
}

/// Prefill path: `unit` whole, its output rows written at once.
fn run_unit<T: Elem, U: Elem>(job: &Job<'_, T, U>, unit: usize, out: SharedPtr<T>, avx2: bool) {
    let (bi, i, g) = job.unit_coords(unit);
    let (d, st) = (job.d, job.part_len());
    let mut part = SCRATCH.with(|cell| std::mem::take(&mut cell.borrow_mut().part));
    part.resize(st, 0.0);
    partial(job, unit, 0, &mut part, avx2);
    for t in 0..job.group {
        let r = job.q_row(bi, i, g * job.group + t);
        // SAFETY: row `r` (d elements, in bounds: q_len was checked against
        // `out`) belongs to exactly this unit.
        finish(&mut part, st, 1, t, d, unsafe { out.range(r, d) });
    }
    SCRATCH.with(|cell| cell.borrow_mut().part = part);
}

/// Decode path: every unit cut into `job.splits` pieces run on the team,
/// then combined here.
fn run_split<T: Elem, U: Elem>(
    job: &Job<'_, T, U>,
    units: usize,
    parallel: bool,
    out: SharedPtr<T>,
    avx2: bool,
) {
    let (d, st, splits) = (job.d, job.part_len(), job.splits);
    let mut parts = PARTS.with(|p| std::mem::take(&mut *p.borrow_mut()));
    parts.resize(units * splits * st, 0.0);
    let shared = SharedPtr(parts.as_mut_ptr());
    let task = |it: usize| {
        // SAFETY: task `it` owns floats it·st..(it+1)·st of `parts`, which
        // holds units·splits·st and outlives the call.
        let part = unsafe { shared.range(it * st, st) };
        partial(job, it / splits, it % splits, part, avx2);
    };
    if !parallel {
        (0..units * splits).for_each(task);
    } else {
        team::for_each(units * splits, &task);
    }
    for unit in 0..units {
        let (bi, i, g) = job.unit_coords(unit);
        let mine = &mut parts[unit * splits * st..(unit + 1) * splits * st];
        for t in 0..job.group {
            let r = job.q_row(bi, i, g * job.group + t);
            // SAFETY: row `r` is in bounds (q_len was checked against
            // `out`) and no task runs any more.
            finish(mine, st, splits, t, d, unsafe { out.range(r, d) });
        }
    }
    PARTS.with(|p| *p.borrow_mut() = parts);
}

/// Scaled dot-product attention `out = softmax(mask(cap(q·kᵀ·scale)))·v`.
/// K and V may have their own element type `U` (an f16 KV cache under f32
/// queries): they are widened to f32 block by block as they are read
/// (F16C on x86-64), and scores, softmax and accumulation are f32.
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
/// Prefill (more than [`DECODE_ROWS`] query rows) runs as two GEMMs per
/// (batch, query head, block of query rows) — see the module doc for
/// when it falls back. Otherwise work is split per (batch, query
/// position, KV head): each task streams
/// its visible K rows once for all the query heads of the GQA group, then
/// its V rows once. With at most [`DECODE_ROWS`] query rows the visible
/// keys are also cut into pieces run on the decode team and combined
/// (flash decoding), so two threads help even with one KV head. On x86-64
/// with AVX2 + FMA the task body is compiled 8-wide.
#[allow(clippy::too_many_arguments)]
pub fn sdpa<T: Elem, U: Elem>(
    dims: &AttnDims,
    layout: Layout,
    mask: Mask<'_, T>,
    opts: AttnOpts,
    q: &[T],
    k: &[U],
    v: &[U],
    out: &mut [T],
) -> Result<()> {
    sdpa_checked(dims, layout, mask, opts, q, k, v, out, None)
}

/// [`sdpa`] with the decode path's pieces per unit forced to `splits`
/// (tests: the result must not depend on the split).
#[allow(clippy::too_many_arguments)]
fn sdpa_checked<T: Elem, U: Elem>(
    dims: &AttnDims,
    layout: Layout,
    mask: Mask<'_, T>,
    opts: AttnOpts,
    q: &[T],
    k: &[U],
    v: &[U],
    out: &mut [T],
    splits: Option<usize>,
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
    sdpa_split(
        dims,
        layout,
        mask,
        scale,
        opts.softcap,
        len,
        q,
        k,
        v,
        out,
        splits,
    );
    Ok(())
}

/// The body of [`sdpa`] after its checks; `splits` forces the decode path
/// with that many pieces per unit.
#[allow(clippy::too_many_arguments)]
fn sdpa_split<T: Elem, U: Elem>(
    dims: &AttnDims,
    layout: Layout,
    mask: Mask<'_, T>,
    scale: f32,
    softcap: f32,
    len: usize,
    q: &[T],
    k: &[U],
    v: &[U],
    out: &mut [T],
    splits: Option<usize>,
) {
    let AttnDims {
        batch,
        seq: s,
        kv_seq: kv_s,
        heads,
        kv_heads,
        head_dim: d,
    } = *dims;
    let group = heads / kv_heads;
    let units = batch * s * kv_heads;
    let work = (group * len * d).max(1);
    let decode = batch * s <= DECODE_ROWS;
    let splits = splits.unwrap_or_else(|| {
        let threads = team::threads();
        if !decode || threads == 1 || units * work < PAR_MIN {
            1
        } else {
            // a few pieces per thread so a slow core takes fewer, and a
            // whole number of tasks per thread (9 tasks on 2 threads would
            // leave one thread a fifth of the work alone at the end)
            let most = (len / MIN_PIECE_KEYS).max(1);
            let mut splits = (4 * threads).div_ceil(units).min(most);
            while (units * splits) % threads != 0 && splits < most {
                splits += 1;
            }
            splits
        }
    });
    #[cfg(target_arch = "x86_64")]
    let f16c = std::is_x86_feature_detected!("f16c") && std::is_x86_feature_detected!("avx");
    #[cfg(not(target_arch = "x86_64"))]
    let f16c = false;
    let job = Job {
        layout,
        mask,
        softcap,
        scale,
        q,
        k,
        v,
        s,
        kv_s,
        len,
        heads,
        kv_heads,
        d,
        group,
        splits: splits.max(1),
        f16c,
    };
    #[cfg(target_arch = "x86_64")]
    let avx2 = std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c");
    #[cfg(not(target_arch = "x86_64"))]
    let avx2 = false;
    let out = SharedPtr(out.as_mut_ptr());
    if !decode
        && splits == 1
        && sdpa_block::shape_fits(&job)
        && sdpa_block::values_finite(&job, batch)
    {
        return sdpa_block::run(&job, batch, out);
    }
    if decode || splits > 1 {
        let parallel = units * splits > 1 && units * work >= PAR_MIN;
        return run_split(&job, units, parallel, out, avx2);
    }
    let min_units = (PAR_MIN / work).max(1);
    if units <= min_units {
        (0..units).for_each(|u| run_unit(&job, u, out, avx2));
    } else {
        (0..units)
            .into_par_iter()
            .with_min_len(min_units)
            .for_each(|u| run_unit(&job, u, out, avx2));
    }
}

/// [`sdpa`] with one run-time key length per batch entry (`lens[b]`, each
/// `1 ≤ L ≤ kv_s`): several sequences of one fixed-capacity cache decoded
/// in one step. Entry `b` is an independent SDPA over its own q / k / v /
/// mask rows with `kv_len = lens[b]`, so each row equals the same sequence
/// run alone.
#[allow(clippy::too_many_arguments)]
pub fn sdpa_per_batch<T: Elem, U: Elem>(
    dims: &AttnDims,
    layout: Layout,
    mask: Mask<'_, T>,
    scale: f32,
    softcap: f32,
    lens: &[i32],
    q: &[T],
    k: &[U],
    v: &[U],
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
    let entry = |i: usize, out: &mut [T]| {
        let m = match mask {
            Mask::Custom(m) => Mask::Custom(m.get(i * mn..(i + 1) * mn).unwrap_or(&[])),
            Mask::Bias(m) => Mask::Bias(m.get(i * mn..(i + 1) * mn).unwrap_or(&[])),
            other => other,
        };
        let opts = AttnOpts {
            scale,
            softcap,
            kv_len: Some(i64::from(lens[i])),
        };
        sdpa(
            &one,
            layout,
            m,
            opts,
            &q[i * qn..(i + 1) * qn],
            &k[i * kn..(i + 1) * kn],
            &v[i * kn..(i + 1) * kn],
            out,
        )
    };
    // entries each too small for `sdpa` to split (short sequences) run side
    // by side on the team, one entry per task (an `sdpa` inside a team job
    // runs serially; its result does not depend on the split); longer
    // ones one after another, each split across the team
    let work = |len: i32| {
        let len = usize::try_from(len).unwrap_or(0).min(dims.kv_seq);
        (dims.seq * dims.heads * dims.head_dim).saturating_mul(len)
    };
    let small = lens.iter().all(|&l| work(l) < PAR_MIN);
    let total = lens.iter().fold(0usize, |t, &l| t.saturating_add(work(l)));
    if b > 1 && small && total >= PAR_MIN && team::threads() > 1 {
        let shared = SharedPtr(out.as_mut_ptr());
        let first_err = std::sync::Mutex::new(None);
        team::for_each(b, &|i| {
            // SAFETY: entry `i` owns rows `i·qn..(i + 1)·qn` of `out`
            // (checked above), disjoint from every other task's.
            let o = unsafe { shared.range(i * qn, qn) };
            if let Err(e) = entry(i, o) {
                first_err
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(e);
            }
        });
        return match first_err.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        };
    }
    for i in 0..b {
        entry(i, &mut out[i * qn..(i + 1) * qn])?;
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

#[cfg(test)]
#[path = "attention_kv16_tests.rs"]
mod kv16_tests;

#[cfg(test)]
#[path = "attention_block_tests.rs"]
mod block_tests;
