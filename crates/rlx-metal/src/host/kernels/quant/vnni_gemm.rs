//! Register-blocked integer-dot GEMM for prefill (`m > 8`) on CPUs with
//! AVX-512 VNNI: `out[m, n] = x[m, k] @ dequant(W)[n, k]ᵀ` for Q4_0, Q4_1,
//! Q5_0, Q5_1, Q8_0 and Q2_K … Q6_K, reading the packed GGUF rows as they
//! are stored (no repacking at load).
//!
//! Scheme. The activations are quantised once per call exactly as the
//! `m ≤ 8` kernels do on two levels (see [`super::vnni`]): per block of 32,
//! `dx = max|x| / 127`, `qx = round(x / dx)`, and the residual coded again
//! as `qx2 = round((x − dx·qx) · 256 / dx)`, so `x ≈ (dx/256)·(256·qx +
//! qx2)`. Each task then decodes a panel of weight rows once into unsigned
//! byte codes `u` (a signed format's codes shifted by its offset `o`:
//! Q4_0 8, Q5_0 16, Q8_0 128, Q3_K 4, Q6_K 32) with per-16-element scales
//! `a` and offsets `c` (`w = a·u + c`, `c = −o·a` for the signed formats),
//! and multiplies all of `x` against it in tiles of 4 activation rows × 4
//! weight rows: 16 accumulators of 16 f32 lanes, each 64-element step
//! loading every weight row's codes and every activation row's codes once
//! for the 16 pairs. A pair's step is two `vpdpbusd` (`256·Σ u·qx + Σ
//! u·qx2`, at most 2²⁵ in magnitude, exact in i32), one conversion and one
//! multiply-add by `a·dx/256`; the offsets enter once per 16 elements as
//! `c · (dx/256)·Σ(256·qx + qx2)`.
//!
//! Error bound. The integer sums are exact; beyond f32 rounding (the
//! accumulation, the conversion of sums above 2²⁴ and the offset term) the
//! only approximation is the activation rounding: per output `(i, j)`,
//! `|err| ≤ Σ_e |w_je| · dx_b(e) / 256 · (½ + ε)` where the residual code
//! rounds to `dx/512` except where it clamps at ±127 (it never does:
//! `|x − dx·qx| ≤ dx/2` gives `|qx2| ≤ 128` only at the exact half, and the
//! clamp costs at most `dx/256`), so the tests check `Σ|w|·dx/256` plus an
//! f32 slack. That is the `m ≤ 8` two-level bound, 128 times below
//! llama.cpp's single int8 level. A non-finite value in an activation
//! block makes that block's `dx` NaN, so exactly the outputs of that
//! activation row are NaN; a non-finite weight scale poisons its column.
//!
//! Speed (measured on a Xeon with AVX-512 VNNI, 2.6 GHz, one thread, GFLOP
//! per CPU-second, `tests::gemm_timing_probe`): against the f32 panels the
//! tiles range from 0.45× to 1.27× (Q8_0 and Q5_0 with n = 4864 ahead,
//! the n = 640 K-quant shapes behind), about 40–80 GFLOP/s either way.
//! The reason is the port budget: a pair's 64-element step costs two
//! `vpdpbusd`, one shift and one conversion, all on port 0 for 512-bit
//! operands, so the tiles top out near 16 multiply-adds per cycle, half
//! the 32 of f32 FMAs on ports 0 and 5. A second activation level needs
//! either this shift or a 16-bit combined code (`vpdpwssd` on weights
//! widened to 16 bits, 3 port-0 operations per step: the next thing to
//! try); one level (llama.cpp's) would be 2.
//!
//! Work split: panels of up to [`PANEL`] weight rows in parallel (rayon),
//! each decoded once per call into a thread-local buffer (2 bytes per
//! element: codes and expanded scales), the activation rows quantised in
//! parallel beforehand into a caller-thread buffer padded to whole tiles.

#![allow(clippy::incompatible_msrv)]

use std::arch::x86_64::*;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

use rayon::prelude::*;
use rlx_ir::GgmlType;

use super::super::Elem;
use super::vnni::{
    with_vfmt, VFmt, VQ2K, VQ3K, VQ4K, VQ4_0, VQ4_1, VQ5K, VQ5_0, VQ5_1, VQ6K, VQ8_0,
};
use super::Out;

/// Activation rows per tile.
const MT: usize = 4;
/// Weight rows per tile.
const NT: usize = 4;
/// Most weight rows per decoded panel (a multiple of [`NT`]).
const PANEL: usize = 64;

/// A [`VFmt`] with the offset that makes its codes unsigned.
pub(super) trait GFmt: VFmt {
    /// Added to a signed format's codes (unused for unsigned ones).
    const OFF: i8 = 0;
}

impl GFmt for VQ4_0 {
    const OFF: i8 = 8;
}
impl GFmt for VQ4_1 {}
impl GFmt for VQ5_0 {
    const OFF: i8 = 16;
}
impl GFmt for VQ5_1 {}
impl GFmt for VQ8_0 {
    // q + 128 wraps to the unsigned byte q ^ 0x80
    const OFF: i8 = -128;
}
impl GFmt for VQ2K {}
impl GFmt for VQ3K {
    const OFF: i8 = 4;
}
impl GFmt for VQ4K {}
impl GFmt for VQ5K {}
impl GFmt for VQ6K {
    const OFF: i8 = 32;
}

/// The offset `o` as the unsigned shift it stands for.
const fn off_f32(o: i8) -> f32 {
    (o as u8) as f32
}

/// Element counts of one call: `k` padded to whole 64-element steps and
/// the 16-element halves padded to whole 16-lane vectors.
#[derive(Clone, Copy)]
pub(super) struct Dims {
    pub(super) kp: usize,
    pub(super) hp: usize,
}

impl Dims {
    pub(super) fn new(k: usize) -> Self {
        let kp = k.div_ceil(64) * 64;
        Dims {
            kp,
            hp: (kp / 16).div_ceil(16) * 16,
        }
    }
}

/// Quantised activations, `mp` rows (padded with zero rows to whole tiles):
/// level-1 and level-2 codes (`kp` each per row), the step `dx/256` of
/// every block of 32 repeated over its 8 lanes (`kp/4` per row) and the
/// scaled code sums of every 16-element half (`hp` per row).
#[derive(Default)]
struct XBuf {
    q: Vec<i8>,
    q2: Vec<i8>,
    dx: Vec<f32>,
    s: Vec<f32>,
}

/// A decoded panel: per weight row `kp` unsigned codes, `kp/4` expanded
/// half scales and `hp` half offsets.
#[derive(Default)]
struct Panel {
    u: Vec<u8>,
    a: Vec<f32>,
    c: Vec<f32>,
}

/// Whether [`try_run`] may run ([`super::set_int8_prefill_gemm`]).
static ENABLED: AtomicBool = AtomicBool::new(DEFAULT_ON);

/// The default of [`ENABLED`] (see the module docs for the measurements
/// behind it).
pub(super) const DEFAULT_ON: bool = true;

/// Turns the GEMM here on or off for the process; returns the previous
/// setting.
pub(super) fn set_enabled(on: bool) -> bool {
    ENABLED.swap(on, Ordering::Relaxed)
}

thread_local! {
    static XB: RefCell<XBuf> = RefCell::new(XBuf::default());
    static PB: RefCell<Panel> = RefCell::new(Panel::default());
}

/// Runs the integer-dot GEMM when this CPU has the features and `ty` a
/// kernel here (returns `false` otherwise, having done nothing). Lengths
/// are checked by the caller; `m, n, k > 0`, `k` whole blocks.
#[allow(clippy::too_many_arguments)]
pub(super) fn try_run(
    ty: GgmlType,
    x: &[f32],
    w: &[u8],
    rb: usize,
    out: &mut Out<'_>,
    m: usize,
    k: usize,
    n: usize,
    tasks: usize,
) -> bool {
    enabled() && run_typed(ty, x, w, rb, out, m, k, n, tasks)
}

/// Whether [`try_run`] is switched on (it still needs the CPU features).
pub(super) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// [`try_run`] whatever [`enabled`] says.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_typed(
    ty: GgmlType,
    x: &[f32],
    w: &[u8],
    rb: usize,
    out: &mut Out<'_>,
    m: usize,
    k: usize,
    n: usize,
    tasks: usize,
) -> bool {
    if !super::vnni::available() || !k.is_multiple_of(32) {
        return false;
    }
    with_vfmt!(ty, V => {
        match out {
            Out::F32(o) => run::<V, f32>(x, w, rb, o, m, k, n, tasks),
            Out::F16(o) => run::<V, half::f16>(x, w, rb, o, m, k, n, tasks),
        }
        true
    }, _ => false)
}

/// Quantises one activation row (`k` elements, a multiple of 32) into its
/// slices of an [`XBuf`]: per block the two-level codes of
/// [`super::vnni::quantizer::quantize_block`] (the one scalar definition), the
/// step repeated over the block's 8 `dxv` words and `step · sum` per half.
/// The scalar statement of what [`quantize_row_simd`] computes, checked
/// against it by the tests.
#[cfg(test)]
fn quantize_row(x: &[f32], q: &mut [i8], q2: &mut [i8], dxv: &mut [f32], s: &mut [f32]) {
    q.fill(0);
    q2.fill(0);
    dxv.fill(0.0);
    s.fill(0.0);
    for (b, xb) in x.chunks_exact(32).enumerate() {
        let (qb, rb) = (&mut q[32 * b..32 * b + 32], &mut q2[32 * b..32 * b + 32]);
        let (d, sums) = super::vnni::quantizer::quantize_block(xb, qb, Some(&mut *rb));
        for (h, t) in sums.iter().enumerate() {
            s[2 * b + h] = d * *t as f32;
        }
        dxv[8 * b..8 * b + 8].fill(d);
        if d.is_nan() {
            // the block's outputs are NaN whatever its codes; zero them
            qb.fill(0);
            rb.fill(0);
        }
    }
}

/// [`quantize_row`] with AVX-512, 32 elements at a time: the same f32
/// operations (round to nearest even, no fused multiply-add), so the same
/// codes, scales and sums.
///
/// # Safety
/// AVX-512 F/BW/VL present; the slices as for [`quantize_row`].
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn quantize_row_simd(
    x: &[f32],
    q: &mut [i8],
    q2: &mut [i8],
    dxv: &mut [f32],
    s: &mut [f32],
) {
    const RN: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    q.fill(0);
    q2.fill(0);
    dxv.fill(0.0);
    s.fill(0.0);
    let (lo, hi) = (_mm512_set1_ps(-127.0), _mm512_set1_ps(127.0));
    for (b, xb) in x.chunks_exact(32).enumerate() {
        // SAFETY: 32 elements at `xb`, 32 codes from 32·b in `q` / `q2`.
        unsafe {
            let v = [
                _mm512_loadu_ps(xb.as_ptr()),
                _mm512_loadu_ps(xb.as_ptr().add(16)),
            ];
            let amax =
                _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
            let zero = _mm512_add_ps(
                _mm512_mul_ps(v[0], _mm512_setzero_ps()),
                _mm512_mul_ps(v[1], _mm512_setzero_ps()),
            );
            let finite = _mm512_reduce_add_ps(zero) == 0.0;
            let dx = amax / 127.0;
            let inv = if dx > 0.0 { 1.0 / dx } else { 0.0 };
            let (dxb, invb, inv2b) = (
                _mm512_set1_ps(dx),
                _mm512_set1_ps(inv),
                _mm512_set1_ps(inv * 256.0),
            );
            let d = if finite { dx / 256.0 } else { f32::NAN };
            for (h, &vh) in v.iter().enumerate() {
                let y = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(vh, invb), lo), hi);
                let c = _mm512_cvt_roundps_epi32::<RN>(y);
                let r = _mm512_mul_ps(
                    _mm512_sub_ps(vh, _mm512_mul_ps(dxb, _mm512_cvtepi32_ps(c))),
                    inv2b,
                );
                let r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
                let c2 = _mm512_cvt_roundps_epi32::<RN>(r);
                let (c, c2) = if finite {
                    (c, c2)
                } else {
                    (_mm512_setzero_si512(), _mm512_setzero_si512())
                };
                let at = 32 * b + 16 * h;
                _mm_storeu_si128(q.as_mut_ptr().add(at).cast(), _mm512_cvtsepi32_epi8(c));
                _mm_storeu_si128(q2.as_mut_ptr().add(at).cast(), _mm512_cvtsepi32_epi8(c2));
                let t = 256 * _mm512_reduce_add_epi32(c) + _mm512_reduce_add_epi32(c2);
                s[2 * b + h] = d * t as f32;
            }
            dxv[8 * b..8 * b + 8].fill(d);
        }
    }
}

/// Decodes `rows` packed rows (stride `rb`, `nb` blocks each) into `p`,
/// padded with zero rows to `rows_p`.
///
/// # Safety
/// `rows` rows of `nb` blocks at `w`; AVX-512 F/BW/VL, AVX2, F16C present.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn decode_panel<V: GFmt>(
    w: &[u8],
    rb: usize,
    nb: usize,
    rows: usize,
    rows_p: usize,
    dm: Dims,
    p: &mut Panel,
) {
    let (kp, hp) = (dm.kp, dm.hp);
    p.u.resize(rows_p * kp, 0);
    p.a.resize(rows_p * kp / 4, 0.0);
    p.c.resize(rows_p * hp, 0.0);
    let (mut a, mut c) = ([0f32; 16], [0f32; 16]);
    let off = off_f32(V::OFF);
    for j in 0..rows_p {
        let u = &mut p.u[j * kp..(j + 1) * kp];
        let av = &mut p.a[j * kp / 4..(j + 1) * kp / 4];
        let cv = &mut p.c[j * hp..(j + 1) * hp];
        u.fill(0);
        av.fill(0.0);
        cv.fill(0.0);
        if j >= rows {
            continue;
        }
        for blk in 0..nb {
            // SAFETY: block `blk` of row `j` lies in `w` (caller), and the
            // run's 32 codes land inside `u` (run < kp / 32).
            unsafe {
                let bp = w.as_ptr().add(j * rb + blk * V::BB);
                V::scales(bp, &mut a, &mut c);
                for r in 0..V::RUNS {
                    let run = blk * V::RUNS + r;
                    let mut q = V::codes(bp, r);
                    if V::SIGNED {
                        q = _mm256_add_epi8(q, _mm256_set1_epi8(V::OFF));
                    }
                    _mm256_storeu_si256(u.as_mut_ptr().add(32 * run).cast(), q);
                    let (a0, a1) = if V::UNIFORM {
                        (a[2 * r], a[2 * r])
                    } else {
                        (a[2 * r], a[2 * r + 1])
                    };
                    let (c0, c1) = if V::SIGNED {
                        (-off * a0, -off * a1)
                    } else if V::UNIFORM {
                        (c[2 * r], c[2 * r])
                    } else {
                        (c[2 * r], c[2 * r + 1])
                    };
                    av[8 * run..8 * run + 4].fill(a0);
                    av[8 * run + 4..8 * run + 8].fill(a1);
                    cv[2 * run] = c0;
                    cv[2 * run + 1] = c1;
                }
            }
        }
    }
}

/// One 4 × 4 tile: activation rows `i0..i0 + 4` of `xb` against panel
/// rows `j0..j0 + 4`; returns `out[ii][jj]`.
///
/// # Safety
/// The rows exist in both (padded) buffers; AVX-512 F/BW/VNNI present.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile(xb: &XBuf, i0: usize, p: &Panel, j0: usize, dm: Dims) -> [[f32; NT]; MT] {
    let (kp, hp) = (dm.kp, dm.hp);
    // SAFETY: every offset below stays inside the rows named above.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); NT]; MT];
        let xq: [*const i8; MT] = std::array::from_fn(|t| xb.q.as_ptr().add((i0 + t) * kp));
        let xr: [*const i8; MT] = std::array::from_fn(|t| xb.q2.as_ptr().add((i0 + t) * kp));
        let xd: [*const f32; MT] = std::array::from_fn(|t| xb.dx.as_ptr().add((i0 + t) * kp / 4));
        let wu: [*const u8; NT] = std::array::from_fn(|t| p.u.as_ptr().add((j0 + t) * kp));
        let wa: [*const f32; NT] = std::array::from_fn(|t| p.a.as_ptr().add((j0 + t) * kp / 4));
        for st in 0..kp / 64 {
            let wv: [__m512i; NT] =
                std::array::from_fn(|t| _mm512_loadu_si512(wu[t].add(64 * st).cast()));
            let av: [__m512; NT] = std::array::from_fn(|t| _mm512_loadu_ps(wa[t].add(16 * st)));
            for ii in 0..MT {
                let q1 = _mm512_loadu_si512(xq[ii].add(64 * st).cast());
                let q2 = _mm512_loadu_si512(xr[ii].add(64 * st).cast());
                let d = _mm512_loadu_ps(xd[ii].add(16 * st));
                for jj in 0..NT {
                    let dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[jj], q1);
                    let dp = _mm512_dpbusd_epi32(_mm512_slli_epi32::<8>(dp), wv[jj], q2);
                    let sc = _mm512_mul_ps(av[jj], d);
                    acc[ii][jj] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), sc, acc[ii][jj]);
                }
            }
        }
        // the 4 × 4 tile indexed as in the products above (the register
        // tile is the unit here, not an iterator over `acc`)
        #[allow(clippy::needless_range_loop)]
        for st in 0..hp / 16 {
            for jj in 0..NT {
                let c = _mm512_loadu_ps(p.c.as_ptr().add((j0 + jj) * hp + 16 * st));
                for ii in 0..MT {
                    let s = _mm512_loadu_ps(xb.s.as_ptr().add((i0 + ii) * hp + 16 * st));
                    acc[ii][jj] = _mm512_fmadd_ps(c, s, acc[ii][jj]);
                }
            }
        }
        let mut out = [[0f32; NT]; MT];
        for ii in 0..MT {
            for jj in 0..NT {
                out[ii][jj] = _mm512_reduce_add_ps(acc[ii][jj]);
            }
        }
        out
    }
}

/// The output, shared by panels that write disjoint columns.
pub(super) struct Dst<T> {
    pub(super) ptr: *mut T,
    pub(super) m: usize,
    pub(super) n: usize,
}

// SAFETY: panels write disjoint column ranges of one exclusively borrowed
// `[m, n]` buffer; `T` values are plain data.
unsafe impl<T: Send> Sync for Dst<T> {}

impl<T: Elem> Dst<T> {
    /// Stores `v` at `(i, j)`.
    ///
    /// # Safety
    /// `i < m`, `j < n`, and no concurrent call writes column `j`.
    pub(super) unsafe fn put(&self, i: usize, j: usize, v: f32) {
        // SAFETY: the index is < m·n (caller), the buffer exclusively ours.
        unsafe { *self.ptr.add(i * self.n + j) = T::from_f32(v) };
    }
}

/// One activation row's slices of an [`XBuf`], with its index.
type QRow<'a> = (
    usize,
    (((&'a mut [i8], &'a mut [i8]), &'a mut [f32]), &'a mut [f32]),
);

/// Weight rows per panel: [`PANEL`] at most, fewer so that every thread
/// gets a few panels; a multiple of [`NT`].
fn panel_rows(n: usize, tasks: usize) -> usize {
    let by_tasks = n.div_ceil(tasks.max(1) * 3);
    by_tasks.clamp(NT, PANEL).div_ceil(NT) * NT
}

/// `out[m, n] = x[m, k] @ dequant(w)ᵀ` for the format `V` on `tasks`
/// threads (lengths checked by the caller, `k` a multiple of 32, `m, n, k
/// > 0`).
#[allow(clippy::too_many_arguments)]
fn run<V: GFmt, T: Elem>(
    x: &[f32],
    w: &[u8],
    rb: usize,
    out: &mut [T],
    m: usize,
    k: usize,
    n: usize,
    tasks: usize,
) {
    let dm = Dims::new(k);
    let mp = m.div_ceil(MT) * MT;
    let nb = rb / V::BB;
    XB.with(|cell| {
        let mut fresh = XBuf::default();
        let mut guard = cell.try_borrow_mut();
        let xb: &mut XBuf = match guard.as_deref_mut() {
            Ok(b) => b,
            Err(_) => &mut fresh,
        };
        let (kp, hp) = (dm.kp, dm.hp);
        xb.q.resize(mp * kp, 0);
        xb.q2.resize(mp * kp, 0);
        xb.dx.resize(mp * kp / 4, 0.0);
        xb.s.resize(mp * hp, 0.0);
        let quant = |(i, (((q, q2), d), s)): QRow<'_>| {
            if i < m {
                // SAFETY: `available()` was checked by `try_run`.
                unsafe { quantize_row_simd(&x[i * k..(i + 1) * k], q, q2, d, s) };
            } else {
                q.fill(0);
                q2.fill(0);
                d.fill(0.0);
                s.fill(0.0);
            }
        };
        if tasks > 1 {
            xb.q.par_chunks_mut(kp)
                .zip(xb.q2.par_chunks_mut(kp))
                .zip(xb.dx.par_chunks_mut(kp / 4))
                .zip(xb.s.par_chunks_mut(hp))
                .enumerate()
                .for_each(quant);
        } else {
            xb.q.chunks_mut(kp)
                .zip(xb.q2.chunks_mut(kp))
                .zip(xb.dx.chunks_mut(kp / 4))
                .zip(xb.s.chunks_mut(hp))
                .enumerate()
                .for_each(quant);
        }
        let xb = &*xb;
        let pr = panel_rows(n, tasks);
        let dst = Dst {
            ptr: out.as_mut_ptr(),
            m,
            n,
        };
        let one = |pi: usize| {
            let j0 = pi * pr;
            let rows = pr.min(n - j0);
            let rows_p = rows.div_ceil(NT) * NT;
            PB.with(|pc| {
                let mut fresh = Panel::default();
                let mut g = pc.try_borrow_mut();
                let p: &mut Panel = match g.as_deref_mut() {
                    Ok(b) => b,
                    Err(_) => &mut fresh,
                };
                // SAFETY: rows j0..j0 + rows of `w` exist (n·rb checked by
                // the caller); `available()` was checked by `try_run`.
                unsafe { decode_panel::<V>(&w[j0 * rb..], rb, nb, rows, rows_p, dm, p) };
                let p = &*p;
                for i0 in (0..mp).step_by(MT) {
                    for jt in (0..rows_p).step_by(NT) {
                        // SAFETY: as above; i0 + MT ≤ mp, jt + NT ≤ rows_p.
                        let r = unsafe { tile(xb, i0, p, jt, dm) };
                        for (ii, rr) in r.iter().enumerate() {
                            let i = i0 + ii;
                            if i >= dst.m {
                                break;
                            }
                            for (jj, &v) in rr.iter().enumerate() {
                                let j = j0 + jt + jj;
                                if jt + jj < rows {
                                    // SAFETY: i < m, j < n; this panel owns
                                    // columns j0..j0 + rows.
                                    unsafe { dst.put(i, j, v) };
                                }
                            }
                        }
                    }
                }
            });
        };
        let panels = n.div_ceil(pr);
        if tasks > 1 {
            (0..panels).into_par_iter().for_each(one);
        } else {
            (0..panels).for_each(one);
        }
    });
}

#[cfg(test)]
#[path = "vnni_gemm_tests.rs"]
mod tests;
