//! Gated DeltaNet (Yang, Kautz & Hatamizadeh, arXiv 2412.06464):
//! `S_t = α_t (S_{t−1} − β_t (S_{t−1} k_t) k_tᵀ) + β_t v_t k_tᵀ`,
//! `o_t = S_t q_t`, `α_t = exp(g_t)`; `S[i, j]` row = value dim, column =
//! key dim. f32 or f16 operands, f32 arithmetic, one task per
//! (batch, head) with its state held in f32 for the whole sequence.
//!
//! Two forms, which agree to rounding:
//! * **recurrent**: one rank-1 update per token (decode, short runs);
//! * **chunked** (chunks of [`CHUNK`] tokens, the last one partial): the
//!   WY / UT-transform form. With `G_t` the within-chunk cumulative sum of
//!   `g`, `γ_t = exp(G_t)` and the chunk's start state `S_0`, the per-token
//!   corrections `δ_t = β_t (v_t − α_t S_{t−1} k_t)` solve the unit lower
//!   triangular system `(I + A) Δ = βV − βγ K S_0ᵀ` with
//!   `A[t, r] = β_t e^{G_t − G_r} (k_t·k_r)` for `r < t`; then
//!   `o_t = γ_t S_0 q_t + Σ_{r ≤ t} e^{G_t − G_r} (q_t·k_r) δ_r` and
//!   `S_L = γ_L S_0 + Σ_r e^{G_L − G_r} δ_r k_rᵀ`. Every `n²` term is a
//!   small GEMM; the solve is forward substitution.
//!
//! [`gated_delta_net`] runs the chunked form when `seq ≥` [`CHUNKED_FROM`],
//! else the recurrent one.

use super::sequence::{dot, gemm_f32, ScanForm};
use super::{check_len, numel, Elem, Result};
use rayon::prelude::*;

/// Tokens per chunk of the chunked form.
pub const CHUNK: usize = 64;

/// Sequence length from which [`gated_delta_net`] uses the chunked form.
pub const CHUNKED_FROM: usize = super::sequence::CHUNKED_FROM;

/// Dims of a Gated DeltaNet scan.
#[derive(Clone, Copy, Debug)]
pub struct GdnDims {
    /// Batch.
    pub batch: usize,
    /// Sequence length.
    pub seq: usize,
    /// Heads.
    pub heads: usize,
    /// Key / value dim per head.
    pub n: usize,
}

/// Gated DeltaNet over q, k, v, o `[batch, seq, heads·n]`, g, beta
/// `[batch, seq, heads]`, `state [batch, heads, n, n]` (read, then written
/// with the final state).
#[allow(clippy::too_many_arguments)]
pub fn gated_delta_net<T: Elem>(
    q: &[T],
    k: &[T],
    v: &[T],
    g: &[T],
    beta: &[T],
    state: &mut [T],
    o: &mut [T],
    d: GdnDims,
    form: ScanForm,
) -> Result<()> {
    const K: &str = "gated_delta_net";
    let GdnDims {
        batch,
        seq,
        heads,
        n,
    } = d;
    let qs = numel(K, &[batch, seq, heads, n])?;
    let gs = numel(K, &[batch, seq, heads])?;
    let ss = numel(K, &[batch, heads, n, n])?;
    for (name, len) in [("q", q.len()), ("k", k.len()), ("v", v.len())] {
        check_len(K, name, len, qs)?;
    }
    check_len(K, "g", g.len(), gs)?;
    check_len(K, "beta", beta.len(), gs)?;
    check_len(K, "state", state.len(), ss)?;
    check_len(K, "o", o.len(), qs)?;
    if qs == 0 || n == 0 {
        return Ok(());
    }
    let chunked = match form {
        ScanForm::Auto => seq >= CHUNKED_FROM,
        ScanForm::Recurrent => false,
        ScanForm::Chunked => true,
    };
    let mut scr = vec![0f32; qs];
    let ops = Ops {
        q,
        k,
        v,
        g,
        beta,
        d,
    };
    let work = qs.saturating_mul(n);
    let body = |(task, (st, out)): (usize, (&mut [T], &mut [f32]))| {
        let (bi, hd) = (task / heads, task % heads);
        let mut s: Vec<f32> = st.iter().map(|x| x.to_f32()).collect();
        if chunked {
            ops.chunked(bi, hd, &mut s, out);
        } else {
            ops.recurrent(bi, hd, &mut s, out);
        }
        st.iter_mut()
            .zip(&s)
            .for_each(|(d, &x)| *d = T::from_f32(x));
    };
    if work < super::PAR_MIN || batch * heads < 2 {
        state[..ss]
            .chunks_mut(n * n)
            .zip(scr.chunks_mut(seq * n))
            .enumerate()
            .for_each(body);
    } else {
        state[..ss]
            .par_chunks_mut(n * n)
            .zip(scr.par_chunks_mut(seq * n))
            .enumerate()
            .for_each(body);
    }
    // [batch, heads, seq, n] → [batch, seq, heads, n]
    for bi in 0..batch {
        for hd in 0..heads {
            for t in 0..seq {
                let src = &scr[((bi * heads + hd) * seq + t) * n..][..n];
                let dst = &mut o[((bi * seq + t) * heads + hd) * n..][..n];
                dst.iter_mut()
                    .zip(src)
                    .for_each(|(d, &x)| *d = T::from_f32(x));
            }
        }
    }
    Ok(())
}

/// The operands of one call.
struct Ops<'a, T> {
    q: &'a [T],
    k: &'a [T],
    v: &'a [T],
    g: &'a [T],
    beta: &'a [T],
    d: GdnDims,
}

impl<T: Elem> Ops<'_, T> {
    /// Row `(bi, t, hd)` of a `[b, s, heads·n]` operand into `dst`.
    fn row(&self, src: &[T], bi: usize, t: usize, hd: usize, dst: &mut [f32]) {
        let GdnDims { seq, heads, n, .. } = self.d;
        let r = &src[((bi * seq + t) * heads + hd) * n..][..n];
        dst.iter_mut().zip(r).for_each(|(d, x)| *d = x.to_f32());
    }

    /// `(g, β)` of token `t`.
    fn gates(&self, bi: usize, t: usize, hd: usize) -> (f32, f32) {
        let GdnDims { seq, heads, .. } = self.d;
        let i = (bi * seq + t) * heads + hd;
        (self.g[i].to_f32(), self.beta[i].to_f32())
    }

    /// Token by token; `out [seq, n]`.
    fn recurrent(&self, bi: usize, hd: usize, s: &mut [f32], out: &mut [f32]) {
        let GdnDims { seq, n, .. } = self.d;
        let mut buf = vec![0f32; 3 * n];
        let (qt, rest) = buf.split_at_mut(n);
        let (kt, vt) = rest.split_at_mut(n);
        for t in 0..seq {
            self.row(self.q, bi, t, hd, qt);
            self.row(self.k, bi, t, hd, kt);
            self.row(self.v, bi, t, hd, vt);
            let (g, be) = self.gates(bi, t, hd);
            let al = g.exp();
            let ot = &mut out[t * n..][..n];
            for ((srow, &vi), oi) in s.chunks_exact_mut(n).zip(vt.iter()).zip(ot) {
                let u = be * (vi - al * dot(srow, kt));
                for (sv, &kv) in srow.iter_mut().zip(kt.iter()) {
                    *sv = al * *sv + u * kv;
                }
                *oi = dot(srow, qt);
            }
        }
    }

    /// Chunk by chunk (module docs); `out [seq, n]`.
    fn chunked(&self, bi: usize, hd: usize, s: &mut [f32], out: &mut [f32]) {
        let GdnDims { seq, n, .. } = self.d;
        let c = CHUNK.min(seq);
        let mut buf = vec![0f32; 4 * c * n + 2 * c * c + 3 * c];
        let (kc, rest) = buf.split_at_mut(c * n);
        let (qc, rest) = rest.split_at_mut(c * n);
        let (u, rest) = rest.split_at_mut(c * n);
        let (w, rest) = rest.split_at_mut(c * n);
        let (a, rest) = rest.split_at_mut(c * c);
        let (p, rest) = rest.split_at_mut(c * c);
        let (cum, rest) = rest.split_at_mut(c);
        let (bet, gam) = rest.split_at_mut(c);
        let mut t0 = 0;
        while t0 < seq {
            let l = c.min(seq - t0);
            // load the chunk; cumulative log-decay, β, γ
            let mut acc = 0f32;
            for i in 0..l {
                let t = t0 + i;
                self.row(self.k, bi, t, hd, &mut kc[i * n..][..n]);
                self.row(self.q, bi, t, hd, &mut qc[i * n..][..n]);
                self.row(self.v, bi, t, hd, &mut u[i * n..][..n]);
                let (g, be) = self.gates(bi, t, hd);
                acc += g;
                cum[i] = acc;
                bet[i] = be;
                gam[i] = acc.exp();
            }
            // A[t, r] = β_t e^{G_t − G_r} (k_t·k_r), r < t
            gemm_f32(l, l, n, (kc, n, 1), (kc, 1, n), (a, l), (0.0, 1.0));
            for i in 0..l {
                for r in 0..l {
                    a[i * l + r] = if r < i {
                        bet[i] * (cum[i] - cum[r]).exp() * a[i * l + r]
                    } else {
                        0.0
                    };
                }
            }
            // right-hand sides βV (in u) and βγK (in w), then solve
            for i in 0..l {
                let (bu, bw) = (bet[i], bet[i] * gam[i]);
                u[i * n..][..n].iter_mut().for_each(|x| *x *= bu);
                let (wr, kr) = (&mut w[i * n..][..n], &kc[i * n..][..n]);
                wr.iter_mut().zip(kr).for_each(|(d, &x)| *d = bw * x);
            }
            forward_subst(a, u, l, n);
            forward_subst(a, w, l, n);
            // Δ = U − W S_0ᵀ (into u)
            gemm_f32(l, n, n, (w, n, 1), (s, 1, n), (u, n), (1.0, -1.0));
            // P[t, r] = e^{G_t − G_r} (q_t·k_r), r ≤ t
            gemm_f32(l, l, n, (qc, n, 1), (kc, 1, n), (p, l), (0.0, 1.0));
            for i in 0..l {
                for r in 0..l {
                    let x = &mut p[i * l + r];
                    *x = if r <= i {
                        (cum[i] - cum[r]).exp() * *x
                    } else {
                        0.0
                    };
                }
            }
            // O = diag(γ) Q S_0ᵀ + P Δ
            let oc = &mut out[t0 * n..][..l * n];
            gemm_f32(l, n, n, (qc, n, 1), (s, 1, n), (oc, n), (0.0, 1.0));
            for i in 0..l {
                oc[i * n..][..n].iter_mut().for_each(|x| *x *= gam[i]);
            }
            gemm_f32(l, n, l, (p, l, 1), (u, n, 1), (oc, n), (1.0, 1.0));
            // S = γ_L S_0 + Δᵀ diag(e^{G_L − G_r}) K
            let last = cum[l - 1];
            for i in 0..l {
                let f = (last - cum[i]).exp();
                kc[i * n..][..n].iter_mut().for_each(|x| *x *= f);
            }
            let gl = gam[l - 1];
            s.iter_mut().for_each(|x| *x *= gl);
            gemm_f32(n, n, l, (u, 1, n), (kc, n, 1), (s, n), (1.0, 1.0));
            t0 += l;
        }
    }
}

/// Solve `(I + A) X = R` in place (`x` holds R, `[l, n]`), A strictly lower
/// triangular `[l, l]`.
fn forward_subst(a: &[f32], x: &mut [f32], l: usize, n: usize) {
    for i in 1..l {
        let (done, rest) = x.split_at_mut(i * n);
        let xi = &mut rest[..n];
        for (r, &ar) in a[i * l..i * l + i].iter().enumerate() {
            if ar != 0.0 {
                xi.iter_mut()
                    .zip(&done[r * n..][..n])
                    .for_each(|(d, &y)| *d -= ar * y);
            }
        }
    }
}
