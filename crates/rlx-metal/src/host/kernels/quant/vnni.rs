//! Integer-dot quantised matmuls for CPUs with AVX-512 VNNI (+ VL, BW):
//! the activations are quantised once per call to 8-bit blocks and every
//! 32-element run of a weight block is dotted with them by `vpdpbusd`
//! (unsigned weight codes × signed activation codes, four products summed
//! into each i32 lane, no saturation).
//!
//! Numerics. Each row of `x` is cut into blocks of 32; block `b` gets
//! `dx_b = max|x| / 127` and codes `qx = round(x / dx_b)` in `−127..=127`,
//! so `|x − dx_b·qx| ≤ dx_b / 2` per element. Every supported weight format
//! is written per 16-element half `h` of a run as `w = a_h·q + c_h` with
//! an integer code `q`, so `Σ w·x ≈ Σ_h dx·(a_h·Σ q·qx + c_h·Σ qx)`.
//! Formats with a min (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) use unsigned codes
//! and the `c_h·Σ qx` term; the symmetric ones (Q4_0, Q5_0, Q8_0, Q3_K,
//! Q6_K) recentre their codes to signed bytes (`c_h = 0`) and feed
//! `vpdpbusd` with `|q|` and `sign(q)·qx`. The integer sums are exact,
//! the scale products and the accumulation are f32. The only approximation
//! beyond f32 rounding is the activation rounding, bounded per output `j`
//! by `½ Σ_e |w_je|·dx_b(e)` — about 0.5 % of the output scale for
//! Gaussian-like activations (the tests check the exact bound). A block of
//! `x` holding a non-finite value gives `dx = NaN`, so the affected outputs
//! are NaN rather than silently wrong.
//!
//! The activations are by default rounded on two levels
//! ([`super::set_int8_activation_levels`]): the residual `x − dx·qx` is
//! coded again as `qx2` with the step `dx/256`, and each run's integer dot
//! becomes `256·Σ q·qx + Σ q·qx2` (one shift and one more `vpdpbusd`),
//! scaled by `dx/256`: the bound above shrinks 128-fold (`dx/256` per
//! element, `dx/512` but where `qx2` clamps at 127), close to f32
//! activations (top-1 of the accuracy passage decoded one token at a time:
//! 1.000 on SmolLM2 / Gemma3 / Qwen2.5, against 0.969 / 0.956 / 0.983 with
//! one level).
//!
//! The formats used by real models (Q4_0 … Q8_0, Q4_K, Q5_K, Q6_K) run on
//! the 512-bit tiles of [`zmm`] (same activation codes and integer dots,
//! 64 codes per instruction, another f32 accumulation order); Q2_K and
//! Q3_K on the 256-bit kernels below.
//!
//! Work split: one task per chunk of weight rows (a few per thread), on
//! the spinning [`team`] (a decode step, batched or not, runs a few hundred
//! of these, too short for rayon's wake and join); each task walks its rows
//! for groups of up to four activation rows, so a block's codes are
//! unpacked once per group and its bytes stay in L1 while the group's rows
//! are dotted with it (the 512-bit tiles take two weight rows at a time
//! for a group of two, four for a single row). A single activation row
//! (decode) walks four weight rows at once with software prefetch ahead of
//! them, and stays on the calling thread for matrices under 32 KiB of
//! packed weights. Every output is the same sequence of operations
//! whatever the tile, so a row's result does not depend on `m` or on the
//! rows batched with it (continuous batching serves each stream the
//! tokens it gets alone).

// The AVX-512 intrinsics and `target_feature` names used here are stable
// since Rust 1.89; the workspace's declared `rust-version` (1.80) predates
// them, so building this module needs a ≥ 1.89 toolchain.
#![allow(clippy::incompatible_msrv)]

use std::arch::x86_64::*;

use std::cell::RefCell;

use crate::host::team;
use rlx_ir::GgmlType;
use std::sync::atomic::{AtomicBool, Ordering};

use super::super::Elem;
use super::Out;

/// Most activation rows the integer-dot path takes; larger `m` (prefill)
/// goes to the panel + GEMM path, which is faster there.
pub(super) const MAX_M: usize = 8;

/// Whether the int8-activation paths may run ([`super::set_int8_activations`]).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Whether the calls here (m ≤ 8: decode, batched decode, short prompts)
/// add the second, residual code level
/// ([`super::set_int8_activation_levels`]).
static RESIDUAL: AtomicBool = AtomicBool::new(true);

/// Sets whether the calls here quantise the activations on two levels
/// (the default) or one (every `m` alike, so that a row's result does not
/// depend on the rows batched with it); returns the previous setting.
pub(super) fn set_residual(on: bool) -> bool {
    RESIDUAL.swap(on, Ordering::Relaxed)
}

/// Whether the formats with a 512-bit tile ([`zmm`]) use it.
static WIDE: AtomicBool = AtomicBool::new(true);

/// Sets whether the formats that have one use the 512-bit tiles (the
/// default) rather than the 256-bit kernels; returns the previous setting.
pub(super) fn set_wide(on: bool) -> bool {
    WIDE.swap(on, Ordering::Relaxed)
}

/// True when the 512-bit tiles are selected.
fn wide() -> bool {
    WIDE.load(Ordering::Relaxed)
}

/// Turns the kernels here on or off for the process; returns the previous
/// setting.
pub(super) fn set_enabled(on: bool) -> bool {
    ENABLED.swap(on, Ordering::Relaxed)
}

/// Whether the integer-dot GEMV should also take the decode rows of the
/// grouped (MoE) matmul: [`available`] on a CPU that is not AMD's. On the
/// Intel Xeons (AVX-512 VNNI, AMX) rlx is benchmarked on, it streams a
/// Mixtral-style Q8_0 step's experts about twice as fast as the f32 row
/// dots; on AMD's Zen 4 EPYC it was about 1.5× slower (its `vpgatherdd`
/// is slow), so there the f32 row dots keep the decode rows.
pub(super) fn decode_rows_pay() -> bool {
    static NOT_AMD: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    available()
        && *NOT_AMD.get_or_init(|| {
            // CPUID leaf 0: the vendor string in EBX, EDX, ECX
            let l0 = std::arch::x86_64::__cpuid(0);
            let vendor = [l0.ebx, l0.edx, l0.ecx].map(u32::to_le_bytes).concat();
            vendor != b"AuthenticAMD"
        })
}

/// True when the kernels here are enabled and this CPU can run them.
pub(super) fn available() -> bool {
    ENABLED.load(Ordering::Relaxed)
        && std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vl")
        && std::is_x86_feature_detected!("avx512vnni")
        && std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma")
        && std::is_x86_feature_detected!("f16c")
}

thread_local! {
    static QACT: RefCell<QAct> = RefCell::new(QAct::default());
}

/// Runs `f` with this thread's activation buffers (fresh ones when they
/// are already borrowed by a re-entrant call).
fn with_qact<R>(f: impl FnOnce(&mut QAct) -> R) -> R {
    QACT.with(|c| match c.try_borrow_mut() {
        Ok(mut q) => f(&mut q),
        Err(_) => f(&mut QAct::default()),
    })
}

/// Evaluates `$body` with `$V` bound to the [`VFmt`] of `$ty`, or `$none`
/// when the format has no integer-dot kernel.
macro_rules! with_vfmt {
    ($ty:expr, $V:ident => $body:expr, _ => $none:expr) => {{
        use GgmlType as G;
        match $ty {
            G::Q4_0 => {
                type $V = VQ4_0;
                $body
            }
            G::Q4_1 => {
                type $V = VQ4_1;
                $body
            }
            G::Q5_0 => {
                type $V = VQ5_0;
                $body
            }
            G::Q5_1 => {
                type $V = VQ5_1;
                $body
            }
            G::Q8_0 => {
                type $V = VQ8_0;
                $body
            }
            G::Q2K => {
                type $V = VQ2K;
                $body
            }
            G::Q3K => {
                type $V = VQ3K;
                $body
            }
            G::Q4K => {
                type $V = VQ4K;
                $body
            }
            G::Q5K => {
                type $V = VQ5K;
                $body
            }
            G::Q6K => {
                type $V = VQ6K;
                $body
            }
            _ => $none,
        }
    }};
}

pub(super) use with_vfmt;

/// Evaluates `$body` with `$Z` bound to the [`zmm::ZFmt`] of `$ty`, or
/// `$none` when the format has no 512-bit tile.
macro_rules! with_zfmt {
    ($ty:expr, $Z:ident => $body:expr, _ => $none:expr) => {{
        use GgmlType as G;
        match $ty {
            G::Q4_0 => {
                type $Z = zmm::ZQ4_0;
                $body
            }
            G::Q4_1 => {
                type $Z = zmm::ZQ4_1;
                $body
            }
            G::Q5_0 => {
                type $Z = zmm::ZQ5_0;
                $body
            }
            G::Q5_1 => {
                type $Z = zmm::ZQ5_1;
                $body
            }
            G::Q8_0 => {
                type $Z = zmm::ZQ8_0;
                $body
            }
            G::Q4K => {
                type $Z = zmm::ZQ4K;
                $body
            }
            G::Q5K => {
                type $Z = zmm::ZQ5K;
                $body
            }
            G::Q6K => {
                type $Z = zmm::ZQ6K;
                $body
            }
            _ => $none,
        }
    }};
}

#[path = "vnni_zmm.rs"]
mod zmm;

/// Runs the integer-dot matmul when this CPU has the features and `ty` a
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
    if !available() || !k.is_multiple_of(32) {
        return false;
    }
    // `run` with the chunk function `$f::<$V, T, TWO>` for each output type
    // and level count
    macro_rules! go {
        ($($f:ident)::+, $V:ty) => {
            with_qact(|qa| match (out, RESIDUAL.load(Ordering::Relaxed)) {
                (Out::F32(o), false) => run(qa, x, rb, o, m, k, n, tasks, false, &|qa, d, j0, r| {
                    // SAFETY: `available()` holds; `run` passes in-bounds chunks.
                    unsafe { $($f)::+::<$V, f32, false>(w, rb, qa, d, m, j0, r) }
                }),
                (Out::F16(o), false) => run(qa, x, rb, o, m, k, n, tasks, false, &|qa, d, j0, r| {
                    // SAFETY: as above.
                    unsafe { $($f)::+::<$V, half::f16, false>(w, rb, qa, d, m, j0, r) }
                }),
                (Out::F32(o), true) => run(qa, x, rb, o, m, k, n, tasks, true, &|qa, d, j0, r| {
                    // SAFETY: as above.
                    unsafe { $($f)::+::<$V, f32, true>(w, rb, qa, d, m, j0, r) }
                }),
                (Out::F16(o), true) => run(qa, x, rb, o, m, k, n, tasks, true, &|qa, d, j0, r| {
                    // SAFETY: as above.
                    unsafe { $($f)::+::<$V, half::f16, true>(w, rb, qa, d, m, j0, r) }
                }),
            })
        };
    }
    if wide() {
        with_zfmt!(ty, Z => {
            go!(zmm::chunk, Z);
            return true;
        }, _ => ());
    }
    with_vfmt!(ty, V => {
        go!(chunk, V);
        true
    }, _ => false)
}

#[path = "vnni_fused.rs"]
mod fused;
pub(super) use fused::try_fused;

/// Activations quantised per block of 32: codes, block scales and the
/// scaled code sums of each 16-element half (`dx · Σ qx`); with two
/// levels also the residual codes `q2`, the scale `d` then being that of
/// the combined code `256·q + q2`.
#[derive(Default)]
pub(super) struct QAct {
    q: Vec<i8>,
    q2: Vec<i8>,
    d: Vec<f32>,
    s: Vec<f32>,
    /// Per-block sums `s[2b] + s[2b + 1]` (the 512-bit tiles' offsets).
    sr: Vec<f32>,
    /// Per-half scales `dh[2b + h] = d[b]` (the 512-bit tiles' Q6_K).
    dh: Vec<f32>,
    /// The bits of the `x` last quantised, with its `(m, k, two)`: the
    /// q / k / v and gate / up GEMVs of a layer read the same activations,
    /// which are then quantised once.
    last: Vec<u32>,
    last_key: Option<(usize, usize, bool)>,
}

impl QAct {
    /// Quantises `x [m, k]` (`k` a multiple of 32) on one level, or two
    /// when `two`, reusing the buffers (and their codes, when `x` holds the
    /// same bits as in the previous call).
    fn fill(&mut self, x: &[f32], m: usize, k: usize, two: bool) {
        let x = &x[..m * k];
        // SAFETY: f32 and u32 have the same size and alignment, and every
        // bit pattern is a valid u32.
        let bits = unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u32>(), x.len()) };
        if self.last_key == Some((m, k, two)) && self.last[..] == *bits {
            return;
        }
        self.last_key = None;
        self.last.clear();
        self.last.extend_from_slice(bits);
        let nb = m * k / 32;
        self.q.resize(m * k, 0);
        self.q2.resize(if two { m * k } else { 0 }, 0);
        self.d.resize(nb, 0.0);
        self.s.resize(2 * nb, 0.0);
        let q2 = two.then_some(&mut self.q2[..]);
        // SAFETY: `available()` was checked by the callers (`run`, `try_fused`).
        unsafe { quantize(x, &mut self.q, q2, &mut self.d, &mut self.s) }
        self.sr.clear();
        self.sr.extend(self.s.chunks_exact(2).map(|h| h[0] + h[1]));
        self.dh.clear();
        self.dh.extend(self.d.iter().flat_map(|&d| [d, d]));
        self.last_key = Some((m, k, two));
    }
}

#[path = "vnni_quantize.rs"]
pub(super) mod quantizer;
use quantizer::quantize;

#[path = "vnni_formats.rs"]
mod formats;
pub(super) use formats::{VFmt, VQ2K, VQ3K, VQ4K, VQ4_0, VQ4_1, VQ5K, VQ5_0, VQ5_1, VQ6K, VQ8_0};

/// Horizontal sum of 8 lanes.
#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    // SAFETY: AVX present.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
    }
}

/// Dots of one packed weight row (`nb` blocks at `w`) with `M` quantised
/// activation rows starting at block `x0[i]` of `qa`.
#[inline(always)]
unsafe fn dot_rows<V: VFmt, const M: usize, const TWO: bool>(
    w: *const u8,
    nb: usize,
    qa: &QAct,
    x0: [usize; M],
) -> [f32; M] {
    let mut bacc = [0f32; M];
    let (mut a, mut c) = ([0f32; 16], [0f32; 16]);
    // SAFETY: the caller guarantees `nb` blocks at `w` and `nb·RUNS` blocks
    // of 32 in `qa` from each `x0[i]`, and the CPU features.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); M];
        let (q, d, s) = (qa.q.as_ptr(), qa.d.as_ptr(), qa.s.as_ptr());
        let q2 = qa.q2.as_ptr();
        for blk in 0..nb {
            let p = w.add(blk * V::BB);
            V::scales(p, &mut a, &mut c);
            for r in 0..V::RUNS {
                let codes = V::codes(p, r);
                let mag = if V::SIGNED {
                    _mm256_abs_epi8(codes)
                } else {
                    codes
                };
                let av = if V::UNIFORM {
                    _mm256_set1_ps(a[2 * r])
                } else {
                    _mm256_setr_m128(_mm_set1_ps(a[2 * r]), _mm_set1_ps(a[2 * r + 1]))
                };
                for i in 0..M {
                    let xb = x0[i] + blk * V::RUNS + r;
                    let xq = _mm256_loadu_si256(q.add(32 * xb).cast());
                    let xq = if V::SIGNED {
                        _mm256_sign_epi8(xq, codes)
                    } else {
                        xq
                    };
                    let mut dp = _mm256_dpbusd_epi32(_mm256_setzero_si256(), mag, xq);
                    if TWO {
                        // the residual level, exactly as in `dot_wrows`, so
                        // that a row's result does not depend on `m`
                        let xr = _mm256_loadu_si256(q2.add(32 * xb).cast());
                        let xr = if V::SIGNED {
                            _mm256_sign_epi8(xr, codes)
                        } else {
                            xr
                        };
                        dp = _mm256_dpbusd_epi32(_mm256_slli_epi32::<8>(dp), mag, xr);
                    }
                    let sc = _mm256_mul_ps(av, _mm256_set1_ps(*d.add(xb)));
                    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dp), sc, acc[i]);
                    if V::SIGNED {
                        continue;
                    }
                    let (s0, s1) = (*s.add(2 * xb), *s.add(2 * xb + 1));
                    bacc[i] += if V::UNIFORM {
                        c[2 * r] * (s0 + s1)
                    } else {
                        c[2 * r] * s0 + c[2 * r + 1] * s1
                    };
                }
            }
        }
        let mut out = [0f32; M];
        for i in 0..M {
            out[i] = hsum(acc[i]) + bacc[i];
        }
        out
    }
}

/// Weight rows dotted together by the single-activation-row kernel: their
/// independent accumulator chains and loads overlap, and each activation
/// block is loaded once for all of them.
const WROWS: usize = 4;

/// How far ahead (in bytes, from the current block of each row) the
/// single-row kernel prefetches packed weights; in decode the weights
/// mostly stream from L3 or DRAM, where the hardware prefetcher alone
/// leaves the loop waiting.
const PF_AHEAD: usize = 4096;

/// Packed weight bytes below which a single-activation-row call runs on
/// the calling thread. Larger ones split across the spinning
/// [`team`](crate::host::team), whose hand-off costs a microsecond or two
/// (rayon's wake and join cost tens, more than a 0.5 MB GEMV gains).
const PAR_MIN_BYTES_M1: usize = 32 << 10;

/// Dots of `R` consecutive packed weight rows (`nb` blocks each, stride
/// `rb`, starting at `w`) with the one quantised activation row of `qa`
/// (on two code levels when `TWO`: `qa` then holds `q2`, and each run's
/// integer dot is `256·Σ q·qx + Σ q·qx2`, at most 2²⁵ in magnitude).
#[inline(always)]
unsafe fn dot_wrows<V: VFmt, const R: usize, const TWO: bool>(
    w: *const u8,
    rb: usize,
    nb: usize,
    qa: &QAct,
) -> [f32; R] {
    let mut bacc = [0f32; R];
    let (mut a, mut c) = ([[0f32; 16]; R], [[0f32; 16]; R]);
    // SAFETY: the caller guarantees `R` rows of `nb` blocks at `w` (stride
    // `rb`), `nb·RUNS` blocks of 32 in `qa`, and the CPU features;
    // prefetches never fault.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); R];
        let (q, d, s) = (qa.q.as_ptr(), qa.d.as_ptr(), qa.s.as_ptr());
        let q2 = qa.q2.as_ptr();
        for blk in 0..nb {
            for t in 0..R {
                let p = w.add(t * rb + blk * V::BB);
                _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PF_AHEAD).cast());
                V::scales(p, &mut a[t], &mut c[t]);
            }
            for r in 0..V::RUNS {
                let xb = blk * V::RUNS + r;
                let xq0 = _mm256_loadu_si256(q.add(32 * xb).cast());
                let xr0 = if TWO {
                    _mm256_loadu_si256(q2.add(32 * xb).cast())
                } else {
                    xq0
                };
                let dx = _mm256_set1_ps(*d.add(xb));
                let (s0, s1) = (*s.add(2 * xb), *s.add(2 * xb + 1));
                for t in 0..R {
                    let codes = V::codes(w.add(t * rb + blk * V::BB), r);
                    let (mag, xq, xr) = if V::SIGNED {
                        let mag = _mm256_abs_epi8(codes);
                        let xr = if TWO {
                            _mm256_sign_epi8(xr0, codes)
                        } else {
                            xr0
                        };
                        (mag, _mm256_sign_epi8(xq0, codes), xr)
                    } else {
                        (codes, xq0, xr0)
                    };
                    let av = if V::UNIFORM {
                        _mm256_set1_ps(a[t][2 * r])
                    } else {
                        _mm256_setr_m128(_mm_set1_ps(a[t][2 * r]), _mm_set1_ps(a[t][2 * r + 1]))
                    };
                    let mut dp = _mm256_dpbusd_epi32(_mm256_setzero_si256(), mag, xq);
                    if TWO {
                        dp = _mm256_dpbusd_epi32(_mm256_slli_epi32::<8>(dp), mag, xr);
                    }
                    let sc = _mm256_mul_ps(av, dx);
                    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dp), sc, acc[t]);
                    if V::SIGNED {
                        continue;
                    }
                    bacc[t] += if V::UNIFORM {
                        c[t][2 * r] * (s0 + s1)
                    } else {
                        c[t][2 * r] * s0 + c[t][2 * r + 1] * s1
                    };
                }
            }
        }
        let mut out = [0f32; R];
        for t in 0..R {
            out[t] = hsum(acc[t]) + bacc[t];
        }
        out
    }
}

/// Single-activation-row dots of `out.len()` consecutive packed rows
/// (stride `rb`, `nb` blocks each) starting at `w`, `WROWS` rows at a time.
#[inline(always)]
unsafe fn gemv_rows<V: VFmt, T: Elem, const TWO: bool>(
    w: *const u8,
    rb: usize,
    nb: usize,
    qa: &QAct,
    out: &mut [T],
) {
    let rows = out.len();
    let mut j = 0;
    // SAFETY: the caller guarantees `rows` rows of `nb` blocks at `w`,
    // one activation row of `nb·RUNS` blocks in `qa`, and the features.
    unsafe {
        while j + WROWS <= rows {
            let r = dot_wrows::<V, WROWS, TWO>(w.add(j * rb), rb, nb, qa);
            for (o, v) in out[j..j + WROWS].iter_mut().zip(r) {
                *o = T::from_f32(v);
            }
            j += WROWS;
        }
        while j < rows {
            let [v] = dot_wrows::<V, 1, TWO>(w.add(j * rb), rb, nb, qa);
            out[j] = T::from_f32(v);
            j += 1;
        }
    }
}

/// Output elements written by parallel row-chunk tasks.
struct Dst<T> {
    ptr: *mut T,
    n: usize,
}

// SAFETY: tasks write disjoint column ranges of one exclusively borrowed
// `[m, n]` buffer; `T` values are plain data.
unsafe impl<T: Send> Sync for Dst<T> {}

/// Rows `j0..j0 + rows` of the output for every activation row (`TWO`:
/// `qa` holds two code levels).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn chunk<V: VFmt, T: Elem, const TWO: bool>(
    w: &[u8],
    rb: usize,
    qa: &QAct,
    dst: &Dst<T>,
    m: usize,
    j0: usize,
    rows: usize,
) {
    let nb = rb / V::BB;
    let xb = nb * V::RUNS;
    let mut i = 0;
    // SAFETY: the caller checked `w ≥ (j0 + rows)·rb`, `qa` holds `m` rows
    // of `nb·RUNS` blocks, and the output `m·n` with `j0 + rows ≤ n`.
    unsafe {
        macro_rules! group {
            ($g:literal) => {{
                let x0: [usize; $g] = std::array::from_fn(|t| (i + t) * xb);
                for j in j0..j0 + rows {
                    let r = dot_rows::<V, $g, TWO>(w.as_ptr().add(j * rb), nb, qa, x0);
                    for (t, v) in r.into_iter().enumerate() {
                        *dst.ptr.add((i + t) * dst.n + j) = T::from_f32(v);
                    }
                }
            }};
        }
        if m == 1 {
            let out = std::slice::from_raw_parts_mut(dst.ptr.add(j0), rows);
            return gemv_rows::<V, T, TWO>(w.as_ptr().add(j0 * rb), rb, nb, qa, out);
        }
        while i < m {
            let g = (m - i).min(4);
            match g {
                4 => group!(4),
                3 => group!(3),
                2 => group!(2),
                _ => group!(1),
            }
            i += g;
        }
    }
}

/// A chunk of output rows: `chunk(qa, dst, j0, rows)`.
type Chunk<'a, T> = dyn Fn(&QAct, &Dst<T>, usize, usize) + Sync + 'a;

/// `out[m, n] = x[m, k] @ dequant(w)ᵀ` by `chunk` (lengths checked by the
/// caller, `k` a whole number of blocks, `m, n, k > 0`); `tasks` is how
/// many threads to use; `two`: activations on two code levels.
#[allow(clippy::too_many_arguments)]
fn run<T: Elem>(
    qa: &mut QAct,
    x: &[f32],
    rb: usize,
    out: &mut [T],
    m: usize,
    k: usize,
    n: usize,
    tasks: usize,
    two: bool,
    chunk: &Chunk<'_, T>,
) {
    qa.fill(x, m, k, two);
    let qa = &*qa;
    let dst = Dst {
        ptr: out.as_mut_ptr(),
        n,
    };
    // a few chunks per thread (work stealing evens out noisy cores), and
    // for several row groups at most ~32 KiB of packed rows per chunk so
    // they stay in L1/L2 while every group passes over them
    let tasks = if m == 1 {
        if n.saturating_mul(rb) < PAR_MIN_BYTES_M1 {
            1
        } else {
            team::threads()
        }
    } else {
        tasks.min(team::threads())
    };
    let mut rows = n.div_ceil(tasks * 4).max(1);
    if m > 4 {
        rows = rows.min((32 * 1024 / rb.max(1)).max(4));
    }
    let one = |c: usize| {
        let j0 = c * rows;
        let r = rows.min(n - j0);
        // j0 + r ≤ n; chunks own disjoint columns
        chunk(qa, &dst, j0, r)
    };
    let chunks = n.div_ceil(rows);
    if tasks <= 1 {
        (0..chunks).for_each(one);
    } else {
        // decode and batched decode (m ≤ 8) alike: a step runs a few
        // hundred of these, too short for rayon's wake and join
        team::for_each(chunks, &one);
    }
}
