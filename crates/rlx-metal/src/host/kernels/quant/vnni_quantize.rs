//! The activation quantiser of the integer-dot kernels (see the parent
//! module's docs for the numerics): per block of 32 elements the step
//! `dx = max|x| / 127`, codes `qx = round(x / dx)`, with two levels the
//! residual codes `qx2 = round((x − dx·qx) · 256 / dx)`, and the scaled
//! code sums of each 16-element half.
//!
//! Blocks of finite values run 16 lanes at a time with the same f32
//! operations in the same order as the scalar form (multiply, round half
//! to even, clamp, and for the residual a separate multiply and subtract,
//! never a fused multiply-add), so the codes are bit for bit those of
//! [`quantize_block`]; a block holding a non-finite value takes the scalar
//! form (its step is NaN either way). With `m` activation rows of a batched
//! decode step this runs once per row for every matmul, so it is a few per
//! cent of the step when scalar.

use std::arch::x86_64::*;

/// Per-block activation quantisation of `x` (a whole number of blocks of
/// 32) into codes `q`, residual codes `q2` (with two levels), steps `d`
/// and half sums `s`.
///
/// # Safety
/// AVX-512 F/BW/VL present; `q` (and `q2`) as long as `x`, `d` one entry
/// and `s` two per block.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn quantize(
    x: &[f32],
    q: &mut [i8],
    mut q2: Option<&mut [i8]>,
    d: &mut [f32],
    s: &mut [f32],
) {
    let blocks = x.chunks_exact(32).zip(q.chunks_exact_mut(32));
    for (bi, (((xb, qb), db), sb)) in blocks
        .zip(d.iter_mut())
        .zip(s.chunks_exact_mut(2))
        .enumerate()
    {
        let rb = q2.as_deref_mut().map(|q2| &mut q2[32 * bi..32 * bi + 32]);
        // SAFETY: `xb` and `qb` hold 32 elements, `rb` 32 when present;
        // the features are the caller's.
        let (dx, sums) = unsafe { block_avx512(xb, qb, rb) }.unwrap_or_else(|| {
            let rb = q2.as_deref_mut().map(|q2| &mut q2[32 * bi..32 * bi + 32]);
            quantize_block(xb, qb, rb)
        });
        *db = dx;
        sb[0] = dx * sums[0] as f32;
        sb[1] = dx * sums[1] as f32;
    }
}

/// One block of 32 by 16-lane vectors: the step and the two halves' code
/// sums, or `None` (nothing written) when the block holds a non-finite
/// value.
#[inline(always)]
unsafe fn block_avx512(
    xb: &[f32],
    qb: &mut [i8],
    rb: Option<&mut [i8]>,
) -> Option<(f32, [i32; 2])> {
    // SAFETY: 32 elements at `xb`, `qb` and `rb` (see `quantize`).
    unsafe {
        let v = [
            _mm512_loadu_ps(xb.as_ptr()),
            _mm512_loadu_ps(xb.as_ptr().add(16)),
        ];
        // (macros, not closures: a closure would not inherit the features)
        let amaxv = _mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1]));
        // a non-finite lane (inf or NaN) has its exponent bits all set
        let expo = _mm512_set1_epi32(0x7F80_0000);
        macro_rules! bad {
            ($x:expr) => {
                _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512($x), expo), expo)
            };
        }
        if bad!(v[0]) | bad!(v[1]) != 0 {
            return None;
        }
        let amax = _mm512_reduce_max_ps(amaxv);
        let dx = amax / 127.0;
        let inv = if dx > 0.0 { 1.0 / dx } else { 0.0 };
        let (lo, hi) = (_mm512_set1_ps(-127.0), _mm512_set1_ps(127.0));
        // round half to even, clamp to ±127; the codes as i32 and as f32
        macro_rules! code {
            ($x:expr, $scale:expr) => {{
                let r = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                    _mm512_mul_ps($x, $scale),
                );
                let r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
                (_mm512_cvtps_epi32(r), r)
            }};
        }
        let invv = _mm512_set1_ps(inv);
        let mut sums = [0i32; 2];
        let mut cf = [_mm512_setzero_ps(); 2];
        for h in 0..2 {
            let (ci, f) = code!(v[h], invv);
            _mm_storeu_si128(
                qb.as_mut_ptr().add(16 * h).cast(),
                _mm512_cvtsepi32_epi8(ci),
            );
            sums[h] = _mm512_reduce_add_epi32(ci);
            cf[h] = f;
        }
        let mut dx = dx;
        if let Some(rb) = rb {
            let (dxv, inv2) = (_mm512_set1_ps(dx), _mm512_set1_ps(inv * 256.0));
            for h in 0..2 {
                let res = _mm512_sub_ps(v[h], _mm512_mul_ps(dxv, cf[h]));
                let (ci, _) = code!(res, inv2);
                _mm_storeu_si128(
                    rb.as_mut_ptr().add(16 * h).cast(),
                    _mm512_cvtsepi32_epi8(ci),
                );
                sums[h] = sums[h] * 256 + _mm512_reduce_add_epi32(ci);
            }
            dx /= 256.0;
        }
        Some((dx, sums))
    }
}

/// The scalar form of one block (the definition the vector form matches;
/// taken for blocks holding a non-finite value): the step (NaN for such a
/// block) and the two halves' code sums.
pub(in crate::host::kernels::quant) fn quantize_block(
    xb: &[f32],
    qb: &mut [i8],
    rb: Option<&mut [i8]>,
) -> (f32, [i32; 2]) {
    let mut amax = 0f32;
    let mut finite = true;
    for &v in xb {
        amax = amax.max(v.abs());
        finite &= v.is_finite();
    }
    let dx = amax / 127.0;
    let inv = if dx > 0.0 { 1.0 / dx } else { 0.0 };
    let mut sums = [0i32; 2];
    for (h, (xh, qh)) in xb.chunks_exact(16).zip(qb.chunks_exact_mut(16)).enumerate() {
        let mut t = 0i32;
        for (o, &v) in qh.iter_mut().zip(xh) {
            let c = (v * inv).round_ties_even().clamp(-127.0, 127.0) as i8;
            *o = c;
            t += i32::from(c);
        }
        sums[h] = t;
    }
    let mut dx = dx;
    if let Some(rb) = rb {
        let inv2 = inv * 256.0;
        for (h, ((xh, qh), rh)) in xb
            .chunks_exact(16)
            .zip(qb.chunks_exact(16))
            .zip(rb.chunks_exact_mut(16))
            .enumerate()
        {
            let mut t = sums[h] * 256;
            for ((o, &v), &c) in rh.iter_mut().zip(xh).zip(qh) {
                let r = (v - dx * f32::from(c)) * inv2;
                let c2 = r.round_ties_even().clamp(-127.0, 127.0) as i8;
                *o = c2;
                t += i32::from(c2);
            }
            sums[h] = t;
        }
        dx /= 256.0;
    }
    (if finite { dx } else { f32::NAN }, sums)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector blocks give the scalar form's codes, steps and sums bit
    /// for bit, on values that hit ties, the clamp, zeros and a
    /// non-finite block.
    #[test]
    fn vector_blocks_equal_the_scalar_form() {
        if !(std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl")
            && std::is_x86_feature_detected!("fma"))
        {
            return;
        }
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        let blocks = 40;
        let mut x: Vec<f32> = (0..32 * blocks).map(|_| next() * 6.0).collect();
        // exact half-steps (ties) in block 1: amax 127 makes dx = 1
        for (i, v) in x[32..64].iter_mut().enumerate() {
            *v = (i as f32 - 16.0) + 0.5;
        }
        x[63] = 127.0;
        x[64..96].fill(0.0); // a zero block (dx = 0)
        x[100] = f32::INFINITY;
        x[140] = f32::NAN;
        x[200] = 1e30; // the rest of that block rounds to 0
        for two in [false, true] {
            let n = x.len();
            let (mut q, mut q2) = (vec![0i8; n], vec![0i8; if two { n } else { 0 }]);
            let (mut d, mut s) = (vec![0f32; blocks], vec![0f32; 2 * blocks]);
            // SAFETY: features checked above; lengths as required.
            unsafe { quantize(&x, &mut q, two.then_some(&mut q2[..]), &mut d, &mut s) };
            for b in 0..blocks {
                let (mut qe, mut re) = ([0i8; 32], [0i8; 32]);
                let xb = &x[32 * b..32 * b + 32];
                let (dx, sums) = quantize_block(xb, &mut qe, two.then_some(&mut re[..]));
                assert_eq!(q[32 * b..32 * b + 32], qe, "block {b} two {two}");
                if two {
                    assert_eq!(q2[32 * b..32 * b + 32], re, "block {b}");
                }
                assert_eq!(d[b].to_bits(), dx.to_bits(), "block {b}");
                for h in 0..2 {
                    assert_eq!(s[2 * b + h].to_bits(), (dx * sums[h] as f32).to_bits());
                }
            }
        }
    }
}
