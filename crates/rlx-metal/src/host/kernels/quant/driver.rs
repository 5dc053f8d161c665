//! GEMV / GEMM drivers over a [`RowFmt`]: threading, panels, scratch
//! buffers and the AVX2 instantiation of the hot loops.
//!
//! The per-format code is written once, generically, and marked
//! `#[inline(always)]`; on x86-64 each driver loop is additionally compiled
//! inside a `#[target_feature(enable = "avx2,fma,f16c")]` wrapper chosen at
//! run time, so the 32-wide decode and dot loops vectorise to 8 lanes
//! without requiring a `-C target-cpu` build.

use std::cell::RefCell;

use crate::host::team;
use gemm::Parallelism;
use rayon::prelude::*;

use super::super::{Elem, PAR_MIN};
use super::{Act, RowFmt};

/// Scratch owned by one thread: widened activations, x sums, a decoded
/// panel and an output tile. Grows to the largest call, then is reused.
#[derive(Default)]
struct Scratch {
    x: Vec<f32>,
    xsum: Vec<f32>,
    panel: Vec<f32>,
    tile: Vec<f32>,
}

thread_local! {
    static CALLER: RefCell<Scratch> = RefCell::new(Scratch::default());
    static WORKER: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs `f` with this thread's scratch from `key` (a fresh one if it is
/// already borrowed, e.g. by a re-entrant call).
fn with_scratch<R>(
    key: &'static std::thread::LocalKey<RefCell<Scratch>>,
    f: impl FnOnce(&mut Scratch) -> R,
) -> R {
    key.with(|c| match c.try_borrow_mut() {
        Ok(mut s) => f(&mut s),
        Err(_) => f(&mut Scratch::default()),
    })
}

/// Runs `f` on `x` as f32 (`xn` elements), widening f16 once.
pub(super) fn with_x<R>(x: Act<'_>, xn: usize, f: impl FnOnce(&[f32]) -> R) -> R {
    match x {
        Act::F32(v) => f(&v[..xn]),
        Act::F16(v) => with_scratch(&CALLER, |s| {
            let mut buf = std::mem::take(&mut s.x);
            buf.clear();
            buf.extend(v[..xn].iter().map(|h| h.to_f32()));
            let r = f(&buf);
            s.x = buf;
            r
        }),
    }
}

/// True when the AVX2 + FMA + F16C instantiation can run here.
#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
}

/// Defines `$name` calling `$generic` through the AVX2 wrapper when the
/// CPU has it.
macro_rules! simd_dispatch {
    ($name:ident, $avx:ident, $generic:ident, <$($g:ident : $b:path),*>, ($($a:ident : $t:ty),*)) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn $avx<$($g: $b),*>($($a: $t),*) {
            $generic::<$($g),*>($($a),*)
        }

        fn $name<$($g: $b),*>($($a: $t),*) {
            #[cfg(target_arch = "x86_64")]
            if has_avx2() {
                // SAFETY: the CPU supports every feature the wrapper enables.
                return unsafe { $avx::<$($g),*>($($a),*) };
            }
            $generic::<$($g),*>($($a),*)
        }
    };
}

/// One chunk of GEMV output rows: `out[j] = dot(row j, x)`.
#[inline(always)]
fn gemv_rows_generic<F: RowFmt, T: Elem>(
    w: &[u8],
    rb: usize,
    x: &[f32],
    xsum: &[f32],
    out: &mut [T],
) {
    for (o, row) in out.iter_mut().zip(w.chunks_exact(rb)) {
        *o = T::from_f32(F::dot_row(row, x, xsum));
    }
}

/// [`gemv_rows_generic`] with the AVX2 block kernels.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gemv_rows_avx2<F: RowFmt, T: Elem>(
    w: &[u8],
    rb: usize,
    x: &[f32],
    xsum: &[f32],
    out: &mut [T],
) {
    for (o, row) in out.iter_mut().zip(w.chunks_exact(rb)) {
        // SAFETY: this function only runs on CPUs with the features above.
        *o = T::from_f32(unsafe { F::dot_row_avx2(row, x, xsum) });
    }
}

/// One chunk of GEMV rows, through the AVX2 kernels when the CPU has them.
fn gemv_rows<F: RowFmt, T: Elem>(w: &[u8], rb: usize, x: &[f32], xsum: &[f32], out: &mut [T]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports every feature the wrapper enables.
        return unsafe { gemv_rows_avx2::<F, T>(w, rb, x, xsum, out) };
    }
    gemv_rows_generic::<F, T>(w, rb, x, xsum, out)
}

/// Decodes `rows` packed rows (`rb` bytes each) into `panel` (`k` each).
#[inline(always)]
fn decode_rows_generic<F: RowFmt>(w: &[u8], rb: usize, k: usize, panel: &mut [f32]) {
    for (row, o) in w.chunks_exact(rb).zip(panel.chunks_exact_mut(k)) {
        F::decode_row(row, o);
    }
}

simd_dispatch!(decode_rows, decode_rows_avx2, decode_rows_generic, <F: RowFmt>,
    (w: &[u8], rb: usize, k: usize, panel: &mut [f32]));

/// Sums of `x` over consecutive groups of `sub` elements.
fn group_sums(x: &[f32], sub: usize, out: &mut Vec<f32>) {
    out.clear();
    if sub > 0 {
        out.extend(x.chunks_exact(sub).map(|c| c.iter().sum::<f32>()));
    }
}

/// `out[m, n] = x[m, k] @ dequant(w)ᵀ` (lengths checked by the caller).
pub(super) fn run<F: RowFmt, T: Elem>(
    x: &[f32],
    w: &[u8],
    rb: usize,
    out: &mut [T],
    m: usize,
    k: usize,
    n: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    let out = &mut out[..m * n];
    if k == 0 {
        out.fill(T::from_f32(0.0));
        return;
    }
    if m == 1 {
        gemv::<F, T>(&x[..k], w, rb, out, k, n);
    } else {
        gemm_panels::<F, T>(&x[..m * k], w, rb, out, m, k, n);
    }
}

/// Threads worth using for `work` multiply-adds.
pub(super) fn tasks_for(work: usize) -> usize {
    if work < PAR_MIN {
        1
    } else {
        rayon::current_num_threads().max(1)
    }
}

/// Threads for a decode GEMV of `work` multiply-adds: the spinning
/// [`team`]'s, whose hand-off is cheap enough for per-layer matrices.
fn m1_tasks(work: usize) -> usize {
    if work < PAR_MIN {
        1
    } else {
        team::threads()
    }
}

/// Decode GEMV: chunks of output rows in parallel.
fn gemv<F: RowFmt, T: Elem>(x: &[f32], w: &[u8], rb: usize, out: &mut [T], k: usize, n: usize) {
    with_scratch(&CALLER, |s| {
        group_sums(x, F::SUB, &mut s.xsum);
        let xsum = &s.xsum[..];
        let tasks = m1_tasks(n.saturating_mul(k));
        if tasks == 1 {
            return gemv_rows::<F, T>(w, rb, x, xsum, out);
        }
        // a few chunks per thread so a slow core takes fewer of them
        let rows = n.div_ceil(tasks * 8).max(1);
        let chunks = n.div_ceil(rows);
        let dst = SharedOut(out.as_mut_ptr());
        team::for_each(chunks, &|c| {
            let j0 = c * rows;
            let r = rows.min(n - j0);
            // SAFETY: chunk `c` owns rows j0..j0+r of `out` (disjoint
            // across chunks; j0 + r ≤ n = out.len()), and `out` outlives
            // the call.
            let o = unsafe { std::slice::from_raw_parts_mut(dst.get().add(j0), r) };
            gemv_rows::<F, T>(&w[j0 * rb..(j0 + r) * rb], rb, x, xsum, o);
        });
    })
}

/// The output of a GEMV, shared by chunks that write disjoint rows.
struct SharedOut<T>(*mut T);

impl<T> SharedOut<T> {
    fn get(&self) -> *mut T {
        self.0
    }
}

// SAFETY: chunks write disjoint row ranges of one exclusively borrowed
// buffer; `T` values are plain data.
unsafe impl<T: Send> Sync for SharedOut<T> {}

/// The epilogue of a fused decode GEMV: `epi(j0, a, b, out)` stores
/// output rows `j0..j0 + out.len()` from the dots `a` of the first matrix's
/// rows and `b` of the second's (empty with one matrix).
pub(super) type Epilogue<'a, T> = dyn Fn(usize, &[f32], &[f32], &mut [T]) + Sync + 'a;

/// Row dots of a fused decode GEMV: `dots(w, out)` writes the dot of each
/// of the first `out.len()` packed rows of `w` with the call's activation.
pub(super) type RowDots<'a> = dyn Fn(&[u8], &mut [f32]) + Sync + 'a;

/// Output rows per epilogue call (the dots live on the stack).
const TILE: usize = 128;

/// Fused decode GEMV over one or two matrices of `n` packed rows (`rb`
/// bytes each, lengths checked by the caller) against the same activation:
/// the driver's row split (a few chunks per task, in parallel when
/// `tasks > 1`), each chunk dotting the same rows of every matrix, tile by
/// tile, and handing them to `epi`.
pub(super) fn gemv_fused<T: Elem>(
    mats: &[&[u8]],
    rb: usize,
    n: usize,
    out: &mut [T],
    tasks: usize,
    dots: &RowDots<'_>,
    epi: &Epilogue<'_, T>,
) {
    let out = &mut out[..n];
    let rows = if tasks <= 1 {
        n.max(1)
    } else {
        n.div_ceil(tasks * 4).max(1)
    };
    let chunks = n.div_ceil(rows);
    let dst = SharedOut(out.as_mut_ptr());
    let one = |c: usize| {
        let j0 = c * rows;
        // SAFETY: chunk `c` owns rows j0..j0 + r of `out` (disjoint across
        // chunks, j0 + r ≤ n = out.len()); `out` outlives the call.
        let o = unsafe { std::slice::from_raw_parts_mut(dst.get().add(j0), rows.min(n - j0)) };
        let (mut a, mut b) = ([0f32; TILE], [0f32; TILE]);
        for (t, ot) in o.chunks_mut(TILE).enumerate() {
            let (s, r) = (c * rows + t * TILE, ot.len());
            let span = s * rb..(s + r) * rb;
            dots(&mats[0][span.clone()], &mut a[..r]);
            let b: &[f32] = match mats.get(1) {
                Some(m) => {
                    dots(&m[span], &mut b[..r]);
                    &b[..r]
                }
                None => &[],
            };
            epi(s, &a[..r], b, ot);
        }
    };
    if tasks <= 1 {
        (0..chunks).for_each(one);
    } else {
        team::for_each(chunks, &one);
    }
}

/// [`gemv_fused`] on the f32 dot kernels of `F` (AVX2 where the CPU has
/// it): the path of every format without an integer-dot kernel.
pub(super) fn gemv_fused_fmt<F: RowFmt, T: Elem>(
    x: &[f32],
    mats: &[&[u8]],
    rb: usize,
    out: &mut [T],
    k: usize,
    n: usize,
    epi: &Epilogue<'_, T>,
) {
    with_scratch(&CALLER, |s| {
        group_sums(&x[..k], F::SUB, &mut s.xsum);
        let xsum = &s.xsum[..];
        let tasks = m1_tasks(n.saturating_mul(k).saturating_mul(mats.len()));
        let dots = |w: &[u8], o: &mut [f32]| gemv_rows::<F, f32>(w, rb, &x[..k], xsum, o);
        gemv_fused(mats, rb, n, out, tasks, &dots, epi);
    })
}

/// Output columns written by parallel panel tasks.
struct ColWriter<T> {
    ptr: *mut T,
    m: usize,
    n: usize,
}

// SAFETY: tasks write disjoint column ranges of one exclusively borrowed
// `[m, n]` buffer (see `put`); `T` values are plain data.
unsafe impl<T: Send> Sync for ColWriter<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for ColWriter<T> {}

impl<T: Elem> ColWriter<T> {
    /// Writes the `[m, r]` tile as columns `j0..j0 + r`.
    ///
    /// # Safety
    /// `j0 + r <= n`, the buffer behind `ptr` has `m·n` elements and stays
    /// exclusively borrowed, and no two concurrent calls share a column.
    unsafe fn put(&self, j0: usize, r: usize, tile: &[f32]) {
        for (i, trow) in tile.chunks_exact(r).take(self.m).enumerate() {
            for (c, &v) in trow.iter().enumerate() {
                // SAFETY: i < m and j0 + c < n, so the index is < m·n.
                unsafe { *self.ptr.add(i * self.n + j0 + c) = T::from_f32(v) };
            }
        }
    }
}

/// Rows of W per decoded panel: about 256 KiB of f32, a multiple of 8,
/// and small enough that every thread gets a few panels.
fn panel_rows(k: usize, n: usize) -> usize {
    let by_cache = ((64 * 1024) / k.max(1)).clamp(8, 128);
    let by_threads = n.div_ceil(rayon::current_num_threads().max(1) * 2);
    (by_cache.min(by_threads.max(8)) / 8 * 8).max(8)
}

/// Prefill GEMM: panels of W rows decoded once each, multiplied against
/// all of `x` with `gemm`, panels in parallel.
fn gemm_panels<F: RowFmt, T: Elem>(
    x: &[f32],
    w: &[u8],
    rb: usize,
    out: &mut [T],
    m: usize,
    k: usize,
    n: usize,
) {
    let decode = |j0: usize, rows: usize, panel: &mut [f32]| {
        decode_rows::<F>(&w[j0 * rb..(j0 + rows) * rb], rb, k, panel)
    };
    gemm_decoded(x, out, m, k, n, &decode);
}

/// Decodes rows `j0..j0 + rows` of a weight matrix into `panel`
/// (`rows · k` f32, row-major).
pub(super) type DecodeRows<'a> = dyn Fn(usize, usize, &mut [f32]) + Sync + 'a;

/// `out[m, n] = x[m, k] @ Wᵀ` with W's rows produced a panel at a time by
/// `decode` (never the whole matrix): panels in parallel, each multiplied
/// against all of `x` with `gemm`. Dims must be non-zero and the slices
/// long enough (checked by the callers).
pub(super) fn gemm_decoded<T: Elem>(
    x: &[f32],
    out: &mut [T],
    m: usize,
    k: usize,
    n: usize,
    decode: &DecodeRows<'_>,
) {
    let r = panel_rows(k, n);
    let panels = n.div_ceil(r);
    let writer = ColWriter {
        ptr: out.as_mut_ptr(),
        m,
        n,
    };
    let one = |p: usize| {
        let j0 = p * r;
        let rows = r.min(n - j0);
        with_scratch(&WORKER, |s| {
            s.panel.resize(rows * k, 0.0);
            s.tile.resize(m * rows, 0.0);
            decode(j0, rows, &mut s.panel[..rows * k]);
            // SAFETY: x holds m·k elements (row stride k), the panel rows·k
            // (rhs element (p, j) at j·k + p), the tile m·rows (row stride
            // rows); all dims are non-zero.
            unsafe {
                gemm::gemm(
                    m,
                    rows,
                    k,
                    s.tile.as_mut_ptr(),
                    1,
                    rows as isize,
                    false,
                    x.as_ptr(),
                    1,
                    k as isize,
                    s.panel.as_ptr(),
                    k as isize,
                    1,
                    0.0f32,
                    1.0f32,
                    false,
                    false,
                    false,
                    Parallelism::None,
                );
            }
            // SAFETY: j0 + rows <= n, `out` (m·n) is borrowed for this whole
            // call, and panel p owns columns j0..j0 + rows alone.
            unsafe { writer.put(j0, rows, &s.tile[..m * rows]) };
        });
    };
    if tasks_for(m.saturating_mul(n).saturating_mul(k)) == 1 {
        (0..panels).for_each(one);
    } else {
        (0..panels).into_par_iter().for_each(one);
    }
}

/// Grouped decode GEMVs: `out[i, :] = x[i, :] @ dequant(w[e])ᵀ` for every
/// `(i, e)` of `chosen` (distinct rows `i` of `x [.., k]`, experts `e` of
/// the packed stack `w [.., n, rb]`; lengths and ranges checked by the
/// caller, `k, n > 0`). One parallel region over (row, chunk of output
/// rows), so every thread streams packed rows even when a decode step
/// chose only two experts; each row's dots are those of [`gemv`].
#[allow(clippy::too_many_arguments)]
pub(super) fn grouped_gemv<F: RowFmt>(
    x: &[f32],
    w: &[u8],
    chosen: &[(usize, usize)],
    out: &mut [f32],
    rb: usize,
    k: usize,
    n: usize,
) {
    if chosen.is_empty() {
        return;
    }
    let sums: Vec<Vec<f32>> = chosen
        .iter()
        .map(|&(i, _)| {
            let mut v = Vec::new();
            group_sums(&x[i * k..(i + 1) * k], F::SUB, &mut v);
            v
        })
        .collect();
    let per = n * rb;
    let tasks = m1_tasks(n.saturating_mul(k).saturating_mul(chosen.len()));
    // a few chunks per thread over all rows together
    let per_row = (tasks * 8).div_ceil(chosen.len()).max(1);
    let rows = n.div_ceil(per_row).max(1);
    let cpr = n.div_ceil(rows);
    let dst = SharedOut(out.as_mut_ptr());
    let one = |c: usize| {
        let (r, j0) = (c / cpr, (c % cpr) * rows);
        let len = rows.min(n - j0);
        let (i, e) = chosen[r];
        let ws = &w[e * per + j0 * rb..e * per + (j0 + len) * rb];
        // SAFETY: task (r, chunk) owns out[i·n + j0 .. + len]: the rows `i`
        // of `chosen` are distinct, one row's chunks disjoint, j0 + len ≤ n,
        // and `out` (≥ (i + 1)·n) outlives the call.
        let o = unsafe { std::slice::from_raw_parts_mut(dst.get().add(i * n + j0), len) };
        gemv_rows::<F, f32>(ws, rb, &x[i * k..(i + 1) * k], &sums[r], o);
    };
    let chunks = chosen.len() * cpr;
    if tasks == 1 {
        (0..chunks).for_each(one);
    } else {
        team::for_each(chunks, &one);
    }
}

/// Decodes the whole blocks at bytes `b0..b1` of every packed row of `w`
/// (`rb` bytes each) into `panel`, `cols` values per row.
#[inline(always)]
fn decode_strip_generic<F: RowFmt>(
    w: &[u8],
    rb: usize,
    b0: usize,
    b1: usize,
    cols: usize,
    panel: &mut [f32],
) {
    for (row, o) in w.chunks_exact(rb).zip(panel.chunks_exact_mut(cols)) {
        F::decode_row(&row[b0..b1], o);
    }
}

simd_dispatch!(decode_strip, decode_strip_avx2, decode_strip_generic, <F: RowFmt>,
    (w: &[u8], rb: usize, b0: usize, b1: usize, cols: usize, panel: &mut [f32]));

/// Transposed product `out[m, k] = x[m, n] @ dequant(w)` (W `[n, k]`, rows
/// of `rb` bytes made of blocks of `bs` elements; `k` a multiple of `bs`,
/// lengths checked by the caller).
///
/// The output columns are split into strips of whole blocks, one task per
/// strip; a task walks W's rows a panel at a time, decodes just its strip
/// of each row into a thread-local buffer and accumulates
/// `x[:, rows] @ panel` into its `[m, strip]` tile with `gemm`. Every block
/// is decoded exactly once per call, and no dense copy of W is made.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_t<F: RowFmt>(
    x: &[f32],
    w: &[u8],
    rb: usize,
    bs: usize,
    out: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
) {
    let out = &mut out[..m * k];
    if m == 0 || k == 0 {
        return;
    }
    if n == 0 || bs == 0 {
        out.fill(0.0);
        return;
    }
    let blocks = k / bs;
    let bb = rb / blocks.max(1);
    let threads = rayon::current_num_threads().max(1);
    let strip_blocks = (128 / bs).max(1).min(blocks.div_ceil(threads * 4).max(1));
    let strips = blocks.div_ceil(strip_blocks);
    let writer = ColWriter {
        ptr: out.as_mut_ptr(),
        m,
        n: k,
    };
    let one = |s: usize| {
        let blk0 = s * strip_blocks;
        let nblk = strip_blocks.min(blocks - blk0);
        let (c0, cols) = (blk0 * bs, nblk * bs);
        let (b0, b1) = (blk0 * bb, (blk0 + nblk) * bb);
        let r = ((16 * 1024) / cols).clamp(8, 512).min(n);
        with_scratch(&WORKER, |sc| {
            sc.panel.resize(r * cols, 0.0);
            sc.tile.resize(m * cols, 0.0);
            let mut j0 = 0;
            while j0 < n {
                let rows = r.min(n - j0);
                let panel = &mut sc.panel[..rows * cols];
                decode_strip::<F>(&w[j0 * rb..(j0 + rows) * rb], rb, b0, b1, cols, panel);
                // SAFETY: x holds m·n elements (row stride n) and j0 + rows
                // <= n, so columns j0..j0 + rows of every row are in bounds;
                // the panel holds rows·cols (row stride cols), the tile m·cols
                // (row stride cols); all dims are non-zero.
                unsafe {
                    gemm::gemm(
                        m,
                        cols,
                        rows,
                        sc.tile.as_mut_ptr(),
                        1,
                        cols as isize,
                        j0 > 0,
                        x.as_ptr().add(j0),
                        1,
                        n as isize,
                        sc.panel.as_ptr(),
                        1,
                        cols as isize,
                        1.0f32,
                        1.0f32,
                        false,
                        false,
                        false,
                        Parallelism::None,
                    );
                }
                j0 += rows;
            }
            // SAFETY: c0 + cols <= k, `out` (m·k) is borrowed for this whole
            // call, and strip s owns columns c0..c0 + cols alone.
            unsafe { writer.put(c0, cols, &sc.tile[..m * cols]) };
        });
    };
    if tasks_for(m.saturating_mul(n).saturating_mul(k)) == 1 {
        (0..strips).for_each(one);
    } else {
        (0..strips).into_par_iter().for_each(one);
    }
}
