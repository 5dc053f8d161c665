//! The per-token state update of the state-space scans, vectorised: one
//! time step of a block of state rows sharing a decay and the B / C rows,
//!
//! ```text
//! h_r ← decay·h_r + u_r·B,    y_r = h_r·C        (each row r of n values)
//! ```
//!
//! the whole of Mamba-2's recurrent form (rows = one head's `p` rows) and
//! the hot loop of a decode step. The update runs in place on the caller's
//! state; the dot product keeps `LANES` independent partial sums, so the
//! loop vectorises (a sequential fold cannot: float addition does not
//! reassociate), and on x86-64 CPUs with AVX2 + FMA the same code is
//! compiled for those units and picked at run time.

/// Independent partial sums of the `h·C` dot product (two AVX2 vectors,
/// one AVX-512 vector).
const LANES: usize = 16;

/// `a·b + c`, fused when `FMA`.
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// [`step_rows`]'s body, generic over fused multiply-add.
#[inline(always)]
fn rows_body<const FMA: bool>(
    state: &mut [f32],
    u: &[f32],
    decay: f32,
    b: &[f32],
    c: &[f32],
    out: &mut [f32],
) {
    let n = b.len();
    for ((h, &ur), o) in state.chunks_exact_mut(n).zip(u).zip(out.iter_mut()) {
        let mut acc = [0f32; LANES];
        let mut hc = h.chunks_exact_mut(LANES);
        let (mut bc, mut cc) = (b.chunks_exact(LANES), c.chunks_exact(LANES));
        for ((hv, bv), cv) in (&mut hc).zip(&mut bc).zip(&mut cc) {
            for l in 0..LANES {
                let v = madd::<FMA>(decay, hv[l], ur * bv[l]);
                hv[l] = v;
                acc[l] = madd::<FMA>(v, cv[l], acc[l]);
            }
        }
        let mut tail = 0f32;
        for ((hv, &bv), &cv) in hc
            .into_remainder()
            .iter_mut()
            .zip(bc.remainder())
            .zip(cc.remainder())
        {
            *hv = madd::<FMA>(decay, *hv, ur * bv);
            tail = madd::<FMA>(*hv, cv, tail);
        }
        // pairwise: lanes 0..8 + 8..16, then down to one
        let mut w = LANES / 2;
        while w > 0 {
            for l in 0..w {
                acc[l] += acc[l + w];
            }
            w /= 2;
        }
        *o = acc[0] + tail;
    }
}

#[cfg(target_arch = "x86_64")]
/// [`rows_body`] compiled for AVX2 + FMA.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
unsafe fn rows_avx2(
    state: &mut [f32],
    u: &[f32],
    decay: f32,
    b: &[f32],
    c: &[f32],
    out: &mut [f32],
) {
    rows_body::<true>(state, u, decay, b, c, out)
}

/// Whether this CPU runs the AVX2 + FMA build of [`step_rows`] (checked once).
fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| {
            std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// One time step of `out.len()` state rows of `n = b.len()` values each
/// (`state [rows, n]`, updated in place): row `r` becomes
/// `decay·h_r + u[r]·b` and `out[r]` its dot product with `c` (0 when
/// `n = 0`).
///
/// # Panics
/// When `state`, `u` or `c` do not match `out.len()` rows of `b.len()`.
pub fn step_rows(state: &mut [f32], u: &[f32], decay: f32, b: &[f32], c: &[f32], out: &mut [f32]) {
    let rows = out.len();
    assert!(
        b.len() == c.len() && u.len() == rows && Some(state.len()) == rows.checked_mul(b.len()),
        "step_rows operands disagree"
    );
    if b.is_empty() {
        out.fill(0.0);
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: avx2() checked the CPU features.
        return unsafe { rows_avx2(state, u, decay, b, c, out) };
    }
    rows_body::<false>(state, u, decay, b, c, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::kernels::testutil::rand_vec;

    #[test]
    fn step_rows_matches_f64_on_odd_and_vector_sizes() {
        for (rows, n) in [(3, 1), (5, 7), (4, 16), (3, 37), (64, 128), (2, 130)] {
            let mut st = rand_vec(rows * n, 1);
            let u = rand_vec(rows, 2);
            let (b, c) = (rand_vec(n, 3), rand_vec(n, 4));
            let decay = 0.83f32;
            let want: Vec<(Vec<f64>, f64)> = st
                .chunks_exact(n)
                .zip(&u)
                .map(|(h, &ur)| {
                    let h: Vec<f64> = h
                        .iter()
                        .zip(&b)
                        .map(|(&hv, &bv)| decay as f64 * hv as f64 + ur as f64 * bv as f64)
                        .collect();
                    let y = h.iter().zip(&c).map(|(&hv, &cv)| hv * cv as f64).sum();
                    (h, y)
                })
                .collect();
            let mut out = vec![0f32; rows];
            step_rows(&mut st, &u, decay, &b, &c, &mut out);
            for (r, (h, y)) in want.iter().enumerate() {
                for (j, &hv) in h.iter().enumerate() {
                    let got = st[r * n + j] as f64;
                    assert!((got - hv).abs() <= 1e-6 * (1.0 + hv.abs()), "{rows}x{n} h");
                }
                let got = out[r] as f64;
                assert!(
                    (got - y).abs() <= 1e-5 * (1.0 + y.abs()),
                    "{rows}x{n}: {got} vs {y}"
                );
            }
        }
    }

    #[test]
    #[should_panic(expected = "step_rows operands disagree")]
    fn step_rows_rejects_a_short_state() {
        let mut st = vec![0f32; 7];
        step_rows(
            &mut st,
            &[1.0, 1.0],
            0.5,
            &[1.0; 4],
            &[1.0; 4],
            &mut [0.0; 2],
        );
    }
}
