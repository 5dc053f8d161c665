//! 512-bit integer-dot tiles for the common formats (Q4_0, Q4_1, Q5_0,
//! Q5_1, Q8_0, Q4_K, Q5_K, Q6_K): the decode GEMVs and the m ≤ 8 calls.
//!
//! The weights are read in groups of 256 elements (one k-quant block or
//! eight 32-element blocks) and dotted 64 codes at a time: one `vpdpbusd`
//! per 64 codes and code level covers two 32-element runs, whose i32 lanes
//! are scaled by a vector that holds each run's (or each 16-element half's)
//! `a·dx`, picked out of the group's scales by one lane permute. The
//! group's scales, offsets and activation sums are computed once per group
//! as vectors (the legacy blocks' f16 scales by one gather). Formats whose
//! codes are centred (Q4_0, Q5_0, Q6_K) run on the unsigned codes with the
//! offset as an additive term (`w = a·q + c`, `c = −8a`, `−16a`, `−32a`),
//! exactly like the formats with mins; only Q8_0 keeps signed codes
//! (`|q| · (sign(q)·qx)`, its unsigned form would round in the i32 → f32
//! conversion).
//!
//! Numerics: the activations are rounded exactly as in [`super`] (same
//! codes, scales and sums), the integer dot of every 32-element run is
//! exact, and every lane's conversion to f32 is exact (|lane| < 2²⁴: four
//! products of a code of at most 63, or 128 for Q8_0's `|q|`, with a
//! combined two-level activation code of at most 127·257). What differs
//! from the 256-bit kernels is only the order of the f32 accumulation, and
//! the offset of the centred formats folded in as `c · Σx`, which costs one
//! f32 rounding of `c·Σx` (at most 2⁻²⁴ of `32·|a|·Σ|x|`, far inside the
//! activation-rounding bound). Every call with m ≤ 8 runs the same code per
//! (weight row, activation row) pair, so a row's result does not depend on
//! the batch or on how many weight rows are dotted together.

#![allow(clippy::incompatible_msrv)]

use std::arch::x86_64::*;

use super::QAct;
use crate::host::kernels::Elem;

/// f16 at `p` (unaligned) widened with F16C.
#[inline(always)]
unsafe fn h2f(p: *const u8) -> f32 {
    // SAFETY: the caller guarantees 2 readable bytes and F16C.
    unsafe {
        let bits = i32::from(p.cast::<u16>().read_unaligned());
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits)))
    }
}

/// A format as groups of 256 elements read 64 codes ("a unit") at a time.
pub(super) trait ZFmt: 'static {
    /// Bytes per 32-element block for the legacy formats (a group is eight
    /// of them; the last group of a row may hold fewer), 0 for k-quants
    /// (a group is one block of `GB` bytes).
    const BB: usize;
    /// Bytes per full group.
    const GB: usize;
    /// Scales per 16-element half (16 per group) instead of per run (8).
    const PER_HALF: bool;
    /// Signed byte codes (`c = 0`, dotted as `|q|·(sign(q)·qx)`).
    const SIGNED: bool = false;
    /// Scales `a` and offsets `c` of the group at `p` (`nblk` of its
    /// legacy blocks present, 8 for a full group): lane `r` (run) or `h`
    /// (half) as [`ZFmt::PER_HALF`] says; lanes past the data are zero.
    ///
    /// # Safety
    /// The group's bytes readable at `p`; AVX-512 F/BW/VL, F16C present.
    unsafe fn scales(p: *const u8, nblk: usize) -> (__m512, __m512);
    /// The 64 codes of unit `u` (runs `2u`, `2u + 1`) of the group at `p`;
    /// with `half`, only run `2u` exists (a legacy row's odd last block)
    /// and the upper 32 codes are zero.
    ///
    /// # Safety
    /// As [`ZFmt::scales`], and the unit within the group.
    unsafe fn codes(p: *const u8, u: usize, half: bool) -> __m512i;
}

/// Gather of the first dword of each of the `nblk` (≤ 8) blocks of `BB`
/// bytes at `p`; zero lanes past them.
#[inline(always)]
unsafe fn gather_heads<const BB: usize>(p: *const u8, nblk: usize) -> __m256i {
    // SAFETY: the caller guarantees `nblk` blocks of ≥ 4 bytes at `p`.
    unsafe {
        let bb = BB as i32;
        let idx = _mm256_setr_epi32(0, bb, 2 * bb, 3 * bb, 4 * bb, 5 * bb, 6 * bb, 7 * bb);
        let mask = ((1u32 << nblk) - 1) as u8;
        _mm256_mmask_i32gather_epi32::<1>(_mm256_setzero_si256(), mask, idx, p.cast())
    }
}

/// Low (`SHIFT = 0`) or high (`16`) f16 of each dword, widened.
#[inline(always)]
unsafe fn f16_lanes<const SHIFT: i32>(g: __m256i) -> __m256 {
    // SAFETY: AVX-512 F/VL, F16C present.
    unsafe { _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32::<SHIFT>(g))) }
}

#[inline(always)]
unsafe fn zext(v: __m256) -> __m512 {
    // SAFETY: AVX-512 F present.
    unsafe { _mm512_zextps256_ps512(v) }
}

/// Scales of a legacy group: `a = d`, `c = m` (with a min at byte 2) or
/// `c = −off·d`.
#[inline(always)]
unsafe fn legacy_scales<const BB: usize, const MIN: bool>(
    p: *const u8,
    nblk: usize,
    off: f32,
) -> (__m512, __m512) {
    // SAFETY: forwarded.
    unsafe {
        let g = gather_heads::<BB>(p, nblk);
        let d = f16_lanes::<0>(g);
        let c = if MIN {
            f16_lanes::<16>(g)
        } else {
            _mm256_mul_ps(d, _mm256_set1_ps(-off))
        };
        (zext(d), zext(c))
    }
}

/// 16 nibble bytes of blocks `2u` and `2u + 1` (`QS` bytes into blocks of
/// `BB`) as 64 codes in the activation order: block A's low then high
/// nibbles, then block B's.
#[inline(always)]
unsafe fn legacy_nibbles<const BB: usize, const QS: usize>(
    p: *const u8,
    u: usize,
    half: bool,
) -> __m512i {
    // SAFETY: the caller guarantees the blocks (only A when `half`).
    unsafe {
        let a = _mm_loadu_si128(p.add(2 * u * BB + QS).cast());
        let b = if half {
            _mm_setzero_si128()
        } else {
            _mm_loadu_si128(p.add((2 * u + 1) * BB + QS).cast())
        };
        let t = _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(a), b);
        let s = _mm256_srli_epi16::<4>(t);
        let idx = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
        let z =
            _mm512_permutex2var_epi64(_mm512_castsi256_si512(t), idx, _mm512_castsi256_si512(s));
        _mm512_and_si512(z, _mm512_set1_epi8(0x0F))
    }
}

/// Adds 16 to the codes whose fifth bit (the u32 at `QH` in blocks `2u`,
/// `2u + 1`) is set.
#[inline(always)]
unsafe fn legacy_bit5<const BB: usize, const QH: usize>(
    p: *const u8,
    u: usize,
    half: bool,
    z: __m512i,
) -> __m512i {
    // SAFETY: forwarded.
    unsafe {
        let a = u64::from(p.add(2 * u * BB + QH).cast::<u32>().read_unaligned());
        let b = if half {
            0
        } else {
            u64::from(p.add((2 * u + 1) * BB + QH).cast::<u32>().read_unaligned())
        };
        _mm512_mask_add_epi8(z, a | (b << 32), z, _mm512_set1_epi8(16))
    }
}

/// Q4_0 (`w = d·q − 8d`).
pub(super) struct ZQ4_0;
/// Q4_1 (`w = d·q + m`).
pub(super) struct ZQ4_1;
/// Q5_0 (`w = d·q − 16d`).
pub(super) struct ZQ5_0;
/// Q5_1 (`w = d·q + m`).
pub(super) struct ZQ5_1;
/// Q8_0 (`w = d·q`, signed).
pub(super) struct ZQ8_0;
/// Q4_K (`w = d·s·q − dmin·m` per run).
pub(super) struct ZQ4K;
/// Q5_K (as Q4_K with a fifth bit).
pub(super) struct ZQ5K;
/// Q6_K (`w = d·s·q − 32·d·s` per half).
pub(super) struct ZQ6K;

impl ZFmt for ZQ4_0 {
    const BB: usize = 18;
    const GB: usize = 8 * 18;
    const PER_HALF: bool = false;
    #[inline(always)]
    unsafe fn scales(p: *const u8, nblk: usize) -> (__m512, __m512) {
        // SAFETY: forwarded.
        unsafe { legacy_scales::<18, false>(p, nblk, 8.0) }
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, u: usize, half: bool) -> __m512i {
        // SAFETY: forwarded.
        unsafe { legacy_nibbles::<18, 2>(p, u, half) }
    }
}

impl ZFmt for ZQ4_1 {
    const BB: usize = 20;
    const GB: usize = 8 * 20;
    const PER_HALF: bool = false;
    #[inline(always)]
    unsafe fn scales(p: *const u8, nblk: usize) -> (__m512, __m512) {
        // SAFETY: forwarded.
        unsafe { legacy_scales::<20, true>(p, nblk, 0.0) }
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, u: usize, half: bool) -> __m512i {
        // SAFETY: forwarded.
        unsafe { legacy_nibbles::<20, 4>(p, u, half) }
    }
}

impl ZFmt for ZQ5_0 {
    const BB: usize = 22;
    const GB: usize = 8 * 22;
    const PER_HALF: bool = false;
    #[inline(always)]
    unsafe fn scales(p: *const u8, nblk: usize) -> (__m512, __m512) {
        // SAFETY: forwarded.
        unsafe { legacy_scales::<22, false>(p, nblk, 16.0) }
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, u: usize, half: bool) -> __m512i {
        // SAFETY: forwarded.
        unsafe { legacy_bit5::<22, 2>(p, u, half, legacy_nibbles::<22, 6>(p, u, half)) }
    }
}

impl ZFmt for ZQ5_1 {
    const BB: usize = 24;
    const GB: usize = 8 * 24;
    const PER_HALF: bool = false;
    #[inline(always)]
    unsafe fn scales(p: *const u8, nblk: usize) -> (__m512, __m512) {
        // SAFETY: forwarded.
        unsafe { legacy_scales::<24, true>(p, nblk, 0.0) }
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, u: usize, half: bool) -> __m512i {
        // SAFETY: forwarded.
        unsafe { legacy_bit5::<24, 4>(p, u, half, legacy_nibbles::<24, 8>(p, u, half)) }
    }
}

impl ZFmt for ZQ8_0 {
    const BB: usize = 34;
    const GB: usize = 8 * 34;
    const PER_HALF: bool = false;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn scales(p: *const u8, nblk: usize) -> (__m512, __m512) {
        // SAFETY: forwarded.
        unsafe {
            let d = f16_lanes::<0>(gather_heads::<34>(p, nblk));
            (zext(d), _mm512_setzero_ps())
        }
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, u: usize, half: bool) -> __m512i {
        // SAFETY: forwarded.
        unsafe {
            let a = _mm256_loadu_si256(p.add(2 * u * 34 + 2).cast());
            let b = if half {
                _mm256_setzero_si256()
            } else {
                _mm256_loadu_si256(p.add((2 * u + 1) * 34 + 2).cast())
            };
            _mm512_inserti64x4::<1>(_mm512_castsi256_si512(a), b)
        }
    }
}

/// Q4_K / Q5_K scales: `a = d·s_r`, `c = −dmin·m_r` per run, the six-bit
/// pairs unpacked from their 12 bytes with word operations.
#[inline(always)]
unsafe fn k4_scales(p: *const u8) -> (__m512, __m512) {
    // SAFETY: 16 readable bytes at `p`; AVX-512 F/VL, F16C present.
    unsafe {
        let (d, dmin) = (h2f(p), h2f(p.add(2)));
        let w = |i: usize| p.add(4 + 4 * i).cast::<u32>().read_unaligned();
        let (u0, u1, u2) = (w(0), w(1), w(2));
        let s_lo = u0 & 0x3F3F_3F3F;
        let m_lo = u1 & 0x3F3F_3F3F;
        let s_hi = (u2 & 0x0F0F_0F0F) | (((u0 >> 6) & 0x0303_0303) << 4);
        let m_hi = ((u2 >> 4) & 0x0F0F_0F0F) | (((u1 >> 6) & 0x0303_0303) << 4);
        let s = u64::from(s_lo) | (u64::from(s_hi) << 32);
        let m = u64::from(m_lo) | (u64::from(m_hi) << 32);
        let sf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(s as i64)));
        let mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(m as i64)));
        let a = _mm256_mul_ps(_mm256_set1_ps(d), sf);
        let c = _mm256_mul_ps(_mm256_set1_ps(-dmin), mf);
        (zext(a), zext(c))
    }
}

/// Q4_K / Q5_K nibbles of unit `u` (runs `2u`, `2u + 1`: the low then the
/// high nibbles of 32 bytes at `qs + 32u`).
#[inline(always)]
unsafe fn k4_nibbles(qs: *const u8, u: usize) -> __m512i {
    // SAFETY: 128 readable bytes at `qs`; AVX-512 F/BW present.
    unsafe {
        let v = _mm256_loadu_si256(qs.add(32 * u).cast());
        let z = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(v), _mm256_srli_epi16::<4>(v));
        _mm512_and_si512(z, _mm512_set1_epi8(0x0F))
    }
}

impl ZFmt for ZQ4K {
    const BB: usize = 0;
    const GB: usize = 144;
    const PER_HALF: bool = false;
    #[inline(always)]
    unsafe fn scales(p: *const u8, _nblk: usize) -> (__m512, __m512) {
        // SAFETY: forwarded.
        unsafe { k4_scales(p) }
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, u: usize, _half: bool) -> __m512i {
        // SAFETY: forwarded.
        unsafe { k4_nibbles(p.add(16), u) }
    }
}

impl ZFmt for ZQ5K {
    const BB: usize = 0;
    const GB: usize = 176;
    const PER_HALF: bool = false;
    #[inline(always)]
    unsafe fn scales(p: *const u8, _nblk: usize) -> (__m512, __m512) {
        // SAFETY: forwarded.
        unsafe { k4_scales(p) }
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, u: usize, _half: bool) -> __m512i {
        // SAFETY: forwarded (qh at 16, qs at 48): bit `r` of `qh[l]` is the
        // fifth bit of element `l` of run `r`.
        unsafe {
            let z = k4_nibbles(p.add(48), u);
            let qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(p.add(16).cast()));
            let lo = _mm256_set1_epi8(1 << (2 * u));
            let hi = _mm256_set1_epi8(1 << (2 * u + 1));
            let bits = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
            let on = _mm512_test_epi8_mask(qh, bits);
            _mm512_mask_add_epi8(z, on, z, _mm512_set1_epi8(16))
        }
    }
}

impl ZFmt for ZQ6K {
    const BB: usize = 0;
    const GB: usize = 210;
    const PER_HALF: bool = true;
    #[inline(always)]
    unsafe fn scales(p: *const u8, _nblk: usize) -> (__m512, __m512) {
        // SAFETY: forwarded (int8 scales at 192, d at 208).
        unsafe {
            let d = _mm512_set1_ps(h2f(p.add(208)));
            let s = _mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(192).cast()));
            let a = _mm512_mul_ps(d, _mm512_cvtepi32_ps(s));
            (a, _mm512_mul_ps(a, _mm512_set1_ps(-32.0)))
        }
    }
    #[inline(always)]
    unsafe fn codes(p: *const u8, u: usize, _half: bool) -> __m512i {
        // SAFETY: forwarded (ql at 0, qh at 128). Unit `u` is runs 2u, 2u+1:
        // the low (u even) or high nibbles of ql[64n..64n + 64], n = u / 2,
        // and the bit pairs 2rr of qh[32n..32n + 32], rr = 2(u % 2) + 0 / 1.
        unsafe {
            let (n, hi) = (u / 2, u % 2);
            let l = _mm512_loadu_si512(p.add(64 * n).cast());
            let l = if hi == 0 {
                l
            } else {
                _mm512_srli_epi16::<4>(l)
            };
            let low = _mm512_and_si512(l, _mm512_set1_epi8(0x0F));
            let h = _mm512_broadcast_i64x4(_mm256_loadu_si256(p.add(128 + 32 * n).cast()));
            let (c0, c1) = (4 * hi as i16, 4 * hi as i16 + 2);
            let cnt = _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(_mm256_set1_epi16(c0)),
                _mm256_set1_epi16(c1),
            );
            let high = _mm512_slli_epi16::<4>(_mm512_srlv_epi16(h, cnt));
            let high = _mm512_and_si512(high, _mm512_set1_epi8(0x30));
            _mm512_or_si512(low, high)
        }
    }
}

/// How far ahead (bytes, from each row's current group) the tiles
/// prefetch packed weights.
const PF_AHEAD: usize = 4096;

/// Dots of `R` packed weight rows (stride `rb`, `nb` legacy blocks or
/// k-quant blocks each, at `w`) with `M` quantised activation rows of `qa`
/// starting at its 32-element blocks `x0[i]` (`TWO`: two code levels):
/// `out[t][i]`.
///
/// # Safety
/// The rows and the activation blocks must be in bounds; AVX-512
/// F/BW/VL/VNNI, AVX2, FMA and F16C present.
#[inline(always)]
pub(super) unsafe fn dot_tile<Z: ZFmt, const R: usize, const M: usize, const TWO: bool>(
    w: *const u8,
    rb: usize,
    nb: usize,
    qa: &QAct,
    x0: [usize; M],
) -> [[f32; M]; R] {
    // SAFETY: see the function's contract; prefetches never fault.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); M]; R];
        let mut bacc = [[_mm512_setzero_ps(); M]; R];
        let (q, q2) = (qa.q.as_ptr(), qa.q2.as_ptr());
        let (d, s, sr, dh) = (qa.d.as_ptr(), qa.s.as_ptr(), qa.sr.as_ptr(), qa.dh.as_ptr());
        // runs (32-element blocks of x) per group and groups per row
        let groups = if Z::BB > 0 { nb.div_ceil(8) } else { nb };
        let lines = Z::GB.div_ceil(64);
        // lane permutes picking each unit's run (or half) scales
        let idxs: [__m512i; 4] = std::array::from_fn(|u| {
            let lane = |l: i32| {
                if Z::PER_HALF {
                    4 * u as i32 + l / 4
                } else {
                    2 * u as i32 + l / 8
                }
            };
            _mm512_setr_epi32(
                lane(0),
                lane(1),
                lane(2),
                lane(3),
                lane(4),
                lane(5),
                lane(6),
                lane(7),
                lane(8),
                lane(9),
                lane(10),
                lane(11),
                lane(12),
                lane(13),
                lane(14),
                lane(15),
            )
        });
        for g in 0..groups {
            let nblk = if Z::BB > 0 { (nb - 8 * g).min(8) } else { 8 };
            let units = nblk.div_ceil(2);
            let full = nblk == 8;
            let gp = |t: usize| w.add(t * rb + g * Z::GB);
            let mut a = [_mm512_setzero_ps(); R];
            let mut c = [_mm512_setzero_ps(); R];
            for t in 0..R {
                let p = gp(t);
                for l in 0..lines {
                    _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PF_AHEAD + 64 * l).cast());
                }
                (a[t], c[t]) = Z::scales(p, nblk);
            }
            // per (t, i): the scale vector of the group and the offset term
            let mut sc = [[_mm512_setzero_ps(); M]; R];
            for i in 0..M {
                let xb = x0[i] + 8 * g;
                let rmask: u16 = if full { 0xFF } else { (1u16 << nblk) - 1 };
                let (dxv, sumv) = if Z::PER_HALF {
                    (
                        _mm512_loadu_ps(dh.add(2 * xb)),
                        _mm512_loadu_ps(s.add(2 * xb)),
                    )
                } else {
                    (
                        _mm512_maskz_loadu_ps(rmask, d.add(xb)),
                        _mm512_maskz_loadu_ps(rmask, sr.add(xb)),
                    )
                };
                for t in 0..R {
                    sc[t][i] = _mm512_mul_ps(a[t], dxv);
                    if !Z::SIGNED {
                        bacc[t][i] = _mm512_fmadd_ps(c[t], sumv, bacc[t][i]);
                    }
                }
            }
            for (u, &idx) in idxs.iter().enumerate().take(units) {
                let half = !full && 2 * u + 1 == nblk;
                let mut codes = [_mm512_setzero_si512(); R];
                let mut neg = [0u64; R];
                for t in 0..R {
                    let z = Z::codes(gp(t), u, half);
                    if Z::SIGNED {
                        neg[t] = _mm512_movepi8_mask(z);
                        codes[t] = _mm512_abs_epi8(z);
                    } else {
                        codes[t] = z;
                    }
                }
                let xmask: u64 = if half { u64::from(u32::MAX) } else { u64::MAX };
                for i in 0..M {
                    let at = 32 * (x0[i] + 8 * g + 2 * u);
                    let xq = _mm512_maskz_loadu_epi8(xmask, q.add(at).cast());
                    let xr = if TWO {
                        _mm512_maskz_loadu_epi8(xmask, q2.add(at).cast())
                    } else {
                        xq
                    };
                    for t in 0..R {
                        let (xq, xr) = if Z::SIGNED {
                            let z = _mm512_setzero_si512();
                            let xq = _mm512_mask_sub_epi8(xq, neg[t], z, xq);
                            let xr = if TWO {
                                _mm512_mask_sub_epi8(xr, neg[t], z, xr)
                            } else {
                                xr
                            };
                            (xq, xr)
                        } else {
                            (xq, xr)
                        };
                        let mut dp = _mm512_dpbusd_epi32(_mm512_setzero_si512(), codes[t], xq);
                        if TWO {
                            dp = _mm512_dpbusd_epi32(_mm512_slli_epi32::<8>(dp), codes[t], xr);
                        }
                        let scale = _mm512_permutexvar_ps(idx, sc[t][i]);
                        acc[t][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp), scale, acc[t][i]);
                    }
                }
            }
        }
        // each output's two accumulators summed lane-wise, then reduced
        // four at a time (the same additions for every output, whatever
        // `R` and `M`: a row's result does not depend on the tile)
        let mut all = [_mm512_setzero_ps(); 16];
        for t in 0..R {
            for i in 0..M {
                all[t * M + i] = _mm512_add_ps(acc[t][i], bacc[t][i]);
            }
        }
        let mut sums = [0f32; 16];
        for c in 0..(R * M).div_ceil(4) {
            let q = reduce4([all[4 * c], all[4 * c + 1], all[4 * c + 2], all[4 * c + 3]]);
            _mm_storeu_ps(sums.as_mut_ptr().add(4 * c), q);
        }
        let mut out = [[0f32; M]; R];
        for t in 0..R {
            for i in 0..M {
                out[t][i] = sums[t * M + i];
            }
        }
        out
    }
}

/// The lane sums of four vectors: lanes `l` and `l + 8` added, then
/// adjacent pairs twice (horizontal adds), then the two 128-bit halves.
/// Every sum takes the same additions in the same order, whichever slot
/// its vector is in.
///
/// # Safety
/// AVX-512 F and AVX present.
#[inline(always)]
unsafe fn reduce4(v: [__m512; 4]) -> __m128 {
    // SAFETY: the caller's features.
    unsafe {
        // (no closures here: they would not inherit the caller's features)
        let mut y = [_mm256_setzero_ps(); 4];
        for (y, &x) in y.iter_mut().zip(&v) {
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(x)));
            *y = _mm256_add_ps(_mm512_castps512_ps256(x), hi);
        }
        let h01 = _mm256_hadd_ps(y[0], y[1]);
        let h23 = _mm256_hadd_ps(y[2], y[3]);
        let h = _mm256_hadd_ps(h01, h23);
        _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h))
    }
}

/// Blocks per row as [`dot_tile`] counts them.
#[inline(always)]
fn blocks_per_row<Z: ZFmt>(rb: usize) -> usize {
    rb / if Z::BB > 0 { Z::BB } else { Z::GB }
}

/// Single-activation-row dots of `out.len()` consecutive packed rows
/// (stride `rb`) at `w`, four rows at a time (`TWO`: two code levels).
///
/// # Safety
/// `out.len()` rows at `w`, one activation row of `qa` matching `rb`, and
/// the CPU features of [`dot_tile`].
#[inline(always)]
pub(super) unsafe fn rows_m1<Z: ZFmt, T: Elem, const TWO: bool>(
    w: *const u8,
    rb: usize,
    qa: &QAct,
    out: &mut [T],
) {
    let nb = blocks_per_row::<Z>(rb);
    let rows = out.len();
    let mut j = 0;
    // SAFETY: forwarded.
    unsafe {
        while j + 4 <= rows {
            let r = dot_tile::<Z, 4, 1, TWO>(w.add(j * rb), rb, nb, qa, [0]);
            for (o, [v]) in out[j..j + 4].iter_mut().zip(r) {
                *o = T::from_f32(v);
            }
            j += 4;
        }
        while j < rows {
            let [[v]] = dot_tile::<Z, 1, 1, TWO>(w.add(j * rb), rb, nb, qa, [0]);
            out[j] = T::from_f32(v);
            j += 1;
        }
    }
}

/// Rows `j0..j0 + rows` of the output for every activation row (the
/// [`super::Dst`] of `m` rows of `n`).
///
/// # Safety
/// `w ≥ (j0 + rows)·rb` bytes, `qa` holds `m` activation rows matching
/// `rb`, the output `m·n` with `j0 + rows ≤ n`; the CPU features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn chunk<Z: ZFmt, T: Elem, const TWO: bool>(
    w: &[u8],
    rb: usize,
    qa: &QAct,
    dst: &super::Dst<T>,
    m: usize,
    j0: usize,
    rows: usize,
) {
    let nb = blocks_per_row::<Z>(rb);
    let xb = qa.d.len() / m.max(1);
    // SAFETY: forwarded.
    unsafe {
        if m == 1 {
            let out = std::slice::from_raw_parts_mut(dst.ptr.add(j0), rows);
            return rows_m1::<Z, T, TWO>(w.as_ptr().add(j0 * rb), rb, qa, out);
        }
        let mut i = 0;
        // `$g` activation rows against `$r` weight rows at a time (one
        // reduction per four outputs), the last rows one at a time
        macro_rules! group {
            ($g:literal, $r:literal) => {{
                let x0: [usize; $g] = std::array::from_fn(|t| (i + t) * xb);
                let (end, tiled) = (j0 + rows, j0 + rows / $r * $r);
                let mut j = j0;
                while j < tiled {
                    let r = dot_tile::<Z, $r, $g, TWO>(w.as_ptr().add(j * rb), rb, nb, qa, x0);
                    for (u, row) in r.into_iter().enumerate() {
                        for (t, v) in row.into_iter().enumerate() {
                            *dst.ptr.add((i + t) * dst.n + j + u) = T::from_f32(v);
                        }
                    }
                    j += $r;
                }
                while j < end {
                    let [r] = dot_tile::<Z, 1, $g, TWO>(w.as_ptr().add(j * rb), rb, nb, qa, x0);
                    for (t, v) in r.into_iter().enumerate() {
                        *dst.ptr.add((i + t) * dst.n + j) = T::from_f32(v);
                    }
                    j += 1;
                }
            }};
        }
        while i < m {
            let g = (m - i).min(4);
            match g {
                4 => group!(4, 1),
                3 => group!(3, 1),
                2 => group!(2, 2),
                _ => group!(1, 4),
            }
            i += g;
        }
    }
}

/// [`rows_m1`] into f32 over whole rows of `w` (at least `out.len()`), for
/// the fused decode GEMVs.
///
/// # Safety
/// `qa` holds one activation row matching `rb`; the CPU features.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn dots_m1<Z: ZFmt, const TWO: bool>(
    w: &[u8],
    rb: usize,
    qa: &QAct,
    out: &mut [f32],
) {
    let rows = out.len().min(w.len() / rb.max(1));
    // SAFETY: `rows` whole rows are in `w`; forwarded.
    unsafe { rows_m1::<Z, f32, TWO>(w.as_ptr(), rb, qa, &mut out[..rows]) }
}
