//! State-space scans: Mamba's selective scan and the Mamba-2 SSD scan, in
//! their recurrent form (see `rlx_ir::Op::SelectiveScan` / `Op::Mamba2` for
//! the equations). Gated DeltaNet is in [`super::sequence_gdn`], the
//! recurrent nets in [`super::sequence_rnn`].
//!
//! Work is split over independent recurrences (batch × channel blocks,
//! batch × heads); each task keeps its state in a contiguous row block and
//! writes its outputs into a task-local `[seq, width]` block of a scratch
//! buffer, scattered into the `[batch, seq, ..]` output afterwards. The
//! inner loops run over the state size `n`, contiguous in every operand.
//! Nothing is allocated per time step.

use super::sequence_step::step_rows;
use super::{check_len, invalid, numel, Result};
use crate::host::team;
use std::sync::Mutex;

/// Which form of a scan to run (Gated DeltaNet, Mamba-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanForm {
    /// Chunked when `seq ≥ CHUNKED_FROM`, else recurrent.
    Auto,
    /// One state update per token.
    Recurrent,
    /// Chunks of [`SSD_CHUNK`] (Mamba-2) / `sequence_gdn::CHUNK` (GDN) tokens.
    Chunked,
}

/// Sequence length from which [`ScanForm::Auto`] runs the chunked form.
pub const CHUNKED_FROM: usize = 16;

/// Tokens per chunk of the Mamba-2 chunked (SSD) form.
pub const SSD_CHUNK: usize = 64;

/// Channels per selective-scan task.
const CHANNEL_BLOCK: usize = 16;

/// Dims of a selective scan.
#[derive(Clone, Copy, Debug)]
pub struct ScanDims {
    /// Batch.
    pub batch: usize,
    /// Sequence length.
    pub seq: usize,
    /// Channels (selective scan) or heads (Mamba-2).
    pub width: usize,
    /// State size n.
    pub n: usize,
}

/// One task: a block of `cols` columns starting at `col0` of batch entry
/// `bi`, with its state rows and its output block.
struct Task<'a> {
    bi: usize,
    col0: usize,
    cols: usize,
    state: &'a mut [f32],
    out: &'a mut [f32],
}

#[allow(clippy::too_many_arguments)]
/// Split `state` (`[batch, width, per_col]`) and `out` (scratch laid out
/// `[batch, block][seq, cols·out_per_col]`) into per-block tasks.
fn tasks<'a>(
    state: &'a mut [f32],
    out: &'a mut [f32],
    batch: usize,
    width: usize,
    block: usize,
    per_col: usize,
    seq: usize,
    out_per_col: usize,
) -> Vec<Task<'a>> {
    let mut v = Vec::with_capacity(batch * width.div_ceil(block.max(1)));
    let (mut st, mut ot) = (state, out);
    for bi in 0..batch {
        let mut col0 = 0;
        while col0 < width {
            let cols = block.min(width - col0);
            let (s, rest) = std::mem::take(&mut st).split_at_mut(cols * per_col);
            st = rest;
            let (o, rest) = std::mem::take(&mut ot).split_at_mut(seq * cols * out_per_col);
            ot = rest;
            v.push(Task {
                bi,
                col0,
                cols,
                state: s,
                out: o,
            });
            col0 += cols;
        }
    }
    v
}

/// Copy the task blocks of `scr` into `y [batch, seq, width·per_col]`.
#[allow(clippy::too_many_arguments)]
fn scatter(
    scr: &[f32],
    y: &mut [f32],
    batch: usize,
    seq: usize,
    width: usize,
    block: usize,
    per_col: usize,
) {
    let row = width * per_col;
    let mut at = 0;
    for bi in 0..batch {
        let mut col0 = 0;
        while col0 < width {
            let cols = block.min(width - col0);
            let w = cols * per_col;
            for t in 0..seq {
                let dst = (bi * seq + t) * row + col0 * per_col;
                y[dst..dst + w].copy_from_slice(&scr[at..at + w]);
                at += w;
            }
            col0 += cols;
        }
    }
}

/// The caller's state (checked to hold `len` elements), or `len` zeros in
/// `zero` when there is none.
fn state_or_zero<'a>(
    k: &'static str,
    state: Option<&'a mut [f32]>,
    len: usize,
    zero: &'a mut Vec<f32>,
) -> Result<&'a mut [f32]> {
    match state {
        Some(s) => {
            check_len(k, "state", s.len(), len)?;
            Ok(&mut s[..len])
        }
        None => {
            zero.resize(len, 0.0);
            Ok(zero)
        }
    }
}

/// Run `f` over the tasks, in parallel when the work is worth it: on the
/// host's worker team ([`crate::host::team`]), the threads the decode
/// step's GEMVs run on, not rayon's pool, whose workers would wake up to
/// compete for the cores with the team's spinning ones (a decode step runs
/// one scan per layer between GEMVs).
fn run_tasks<'a>(tasks: Vec<Task<'a>>, work: usize, f: impl Fn(Task<'a>) + Sync + Send) {
    if work < super::PAR_MIN || tasks.len() < 2 {
        tasks.into_iter().for_each(f);
        return;
    }
    let cells: Vec<Mutex<Option<Task<'a>>>> =
        tasks.into_iter().map(|t| Mutex::new(Some(t))).collect();
    team::for_each(cells.len(), &|i| {
        // each index runs once: the lock is never contended
        let task = cells[i].lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = task {
            f(t);
        }
    });
}

/// Mamba selective scan: x, delta, y `[batch, seq, width]`, a `[width, n]`,
/// b, c `[batch, seq, n]`; `state [batch, width, n]` is the initial state
/// and receives the final one (zero start, discarded, when `None`).
#[allow(clippy::too_many_arguments)]
pub fn selective_scan(
    x: &[f32],
    delta: &[f32],
    a: &[f32],
    b: &[f32],
    c: &[f32],
    state: Option<&mut [f32]>,
    y: &mut [f32],
    d: ScanDims,
) -> Result<()> {
    const K: &str = "selective_scan";
    let ScanDims {
        batch,
        seq,
        width,
        n,
    } = d;
    let xs = numel(K, &[batch, seq, width])?;
    let bs = numel(K, &[batch, seq, n])?;
    let ss = numel(K, &[batch, width, n])?;
    check_len(K, "x", x.len(), xs)?;
    check_len(K, "delta", delta.len(), xs)?;
    check_len(K, "a", a.len(), numel(K, &[width, n])?)?;
    check_len(K, "b", b.len(), bs)?;
    check_len(K, "c", c.len(), bs)?;
    check_len(K, "y", y.len(), xs)?;
    let mut zero = Vec::new();
    let st = state_or_zero(K, state, ss, &mut zero)?;
    let mut scr = vec![0f32; xs];
    let ts = tasks(st, &mut scr, batch, width, CHANNEL_BLOCK, n, seq, 1);
    let work = xs.saturating_mul(n);
    run_tasks(ts, work, |tk| {
        let mut da = vec![0f32; n];
        for t in 0..seq {
            let row = (tk.bi * seq + t) * width;
            let bt = &b[(tk.bi * seq + t) * n..][..n];
            let ct = &c[(tk.bi * seq + t) * n..][..n];
            for j in 0..tk.cols {
                let ch = tk.col0 + j;
                let dt = delta[row + ch];
                let dx = dt * x[row + ch];
                let ar = &a[ch * n..][..n];
                let h = &mut tk.state[j * n..][..n];
                for (e, &av) in da.iter_mut().zip(ar) {
                    *e = (dt * av).exp();
                }
                let mut acc = 0f32;
                for (((hv, &e), &bv), &cv) in h.iter_mut().zip(&da).zip(bt).zip(ct) {
                    *hv = e * *hv + dx * bv;
                    acc += *hv * cv;
                }
                tk.out[t * tk.cols + j] = acc;
            }
        }
    });
    scatter(&scr, y, batch, seq, width, CHANNEL_BLOCK, 1);
    Ok(())
}

/// Mamba-2 SSD scan (one B/C group): x, y `[batch, seq, heads·p]`, dt
/// `[batch, seq, heads]`, a `[heads]`, b, c `[batch, seq, n]`; `state
/// [batch, heads, p, n]` as in [`selective_scan`]. `d.width` is the head
/// count.
///
/// Two forms that agree to rounding: the recurrent one (a rank-1 update
/// per token) and the chunked SSD form (chunks of [`SSD_CHUNK`] tokens,
/// the last one partial). With `G_t` the within-chunk cumulative sum of
/// `dt·a`, `γ_t = e^{G_t}` and the chunk's start state `h_0 [p, n]`:
/// `Y = diag(γ)·C h_0ᵀ + (L ⊙ C Bᵀ)·diag(dt) X` with
/// `L[t, r] = e^{G_t − G_r}` for `r ≤ t` (else 0), and
/// `h_L = γ_L h_0 + Xᵀ diag(dt ⊙ e^{G_L − G})·B` — four small GEMMs per
/// chunk. `form` picks one ([`ScanForm::Auto`]: chunked from
/// [`CHUNKED_FROM`] tokens).
#[allow(clippy::too_many_arguments)]
pub fn mamba2(
    x: &[f32],
    dt: &[f32],
    a: &[f32],
    b: &[f32],
    c: &[f32],
    state: Option<&mut [f32]>,
    y: &mut [f32],
    d: ScanDims,
    p: usize,
    form: ScanForm,
) -> Result<()> {
    const K: &str = "mamba2";
    let ScanDims {
        batch,
        seq,
        width: heads,
        n,
    } = d;
    if p == 0 {
        return Err(invalid(K, "head_dim must be >= 1"));
    }
    let xs = numel(K, &[batch, seq, heads, p])?;
    let bs = numel(K, &[batch, seq, n])?;
    let ss = numel(K, &[batch, heads, p, n])?;
    check_len(K, "x", x.len(), xs)?;
    check_len(K, "dt", dt.len(), numel(K, &[batch, seq, heads])?)?;
    check_len(K, "a", a.len(), heads)?;
    check_len(K, "b", b.len(), bs)?;
    check_len(K, "c", c.len(), bs)?;
    check_len(K, "y", y.len(), xs)?;
    let mut zero = Vec::new();
    let st = state_or_zero(K, state, ss, &mut zero)?;
    let mut scr = vec![0f32; xs];
    let ts = tasks(st, &mut scr, batch, heads, 1, p * n, seq, p);
    let chunked = match form {
        ScanForm::Auto => seq >= CHUNKED_FROM,
        ScanForm::Recurrent => false,
        ScanForm::Chunked => true,
    };
    let ops = M2 {
        x,
        dt,
        a,
        b,
        c,
        d,
        p,
    };
    run_tasks(ts, xs.saturating_mul(n), |tk| {
        if chunked {
            ops.chunked(tk);
            return;
        }
        let hd = tk.col0;
        let mut u = vec![0f32; p];
        for t in 0..seq {
            let row = tk.bi * seq + t;
            let step = dt[row * heads + hd];
            let xt = &x[(row * heads + hd) * p..][..p];
            u.iter_mut().zip(xt).for_each(|(u, &xv)| *u = step * xv);
            step_rows(
                tk.state,
                &u,
                (step * a[hd]).exp(),
                &b[row * n..][..n],
                &c[row * n..][..n],
                &mut tk.out[t * p..][..p],
            );
        }
    });
    scatter(&scr, y, batch, seq, heads, 1, p);
    Ok(())
}

/// The operands of one Mamba-2 call.
struct M2<'a> {
    x: &'a [f32],
    dt: &'a [f32],
    a: &'a [f32],
    b: &'a [f32],
    c: &'a [f32],
    d: ScanDims,
    p: usize,
}

impl M2<'_> {
    /// The chunked SSD form for one (batch, head) task (see [`mamba2`]).
    fn chunked(&self, tk: Task<'_>) {
        let ScanDims {
            seq,
            width: heads,
            n,
            ..
        } = self.d;
        let (p, bi, hd) = (self.p, tk.bi, tk.col0);
        let cl = SSD_CHUNK.min(seq);
        let mut buf = vec![0f32; cl * p + cl * cl + 2 * cl];
        let (xw, rest) = buf.split_at_mut(cl * p);
        let (m, rest) = rest.split_at_mut(cl * cl);
        let (cum, w) = rest.split_at_mut(cl);
        let h0 = tk.state;
        let mut t0 = 0;
        while t0 < seq {
            let l = cl.min(seq - t0);
            let row = bi * seq + t0;
            let (bc, cc) = (&self.b[row * n..][..l * n], &self.c[row * n..][..l * n]);
            // dt-scaled x rows and the cumulative log-decay
            let mut acc = 0f32;
            for i in 0..l {
                let step = self.dt[(row + i) * heads + hd];
                acc += step * self.a[hd];
                cum[i] = acc;
                w[i] = step;
                let xr = &self.x[((row + i) * heads + hd) * p..][..p];
                xw[i * p..][..p]
                    .iter_mut()
                    .zip(xr)
                    .for_each(|(d, &v)| *d = step * v);
            }
            // M = L ⊙ C Bᵀ
            gemm_f32(l, l, n, (cc, n, 1), (bc, 1, n), (m, l), (0.0, 1.0));
            for i in 0..l {
                for r in 0..l {
                    let v = &mut m[i * l + r];
                    *v = if r <= i {
                        (cum[i] - cum[r]).exp() * *v
                    } else {
                        0.0
                    };
                }
            }
            // Y = diag(γ) C h_0ᵀ + M (dt ⊙ X)
            let yc = &mut tk.out[t0 * p..][..l * p];
            gemm_f32(l, p, n, (cc, n, 1), (h0, 1, n), (yc, p), (0.0, 1.0));
            for i in 0..l {
                let g = cum[i].exp();
                yc[i * p..][..p].iter_mut().for_each(|v| *v *= g);
            }
            gemm_f32(l, p, l, (m, l, 1), (xw, p, 1), (yc, p), (1.0, 1.0));
            // h = γ_L h_0 + (e^{G_L − G} ⊙ dt X)ᵀ B
            let last = cum[l - 1];
            for i in 0..l {
                let f = (last - cum[i]).exp();
                xw[i * p..][..p].iter_mut().for_each(|v| *v *= f);
            }
            let gl = last.exp();
            h0.iter_mut().for_each(|v| *v *= gl);
            gemm_f32(p, n, l, (xw, 1, p), (bc, n, 1), (h0, n), (1.0, 1.0));
            t0 += l;
        }
    }
}

/// Multiply-adds from which [`gemm_f32`] splits over threads.
const GEMM_PAR_FLOPS: usize = 1 << 20;

/// `x·y` with eight independent partial sums (vectorisable, unlike a
/// sequential fold).
#[inline]
pub(super) fn dot(x: &[f32], y: &[f32]) -> f32 {
    let n = x.len().min(y.len());
    let (xc, yc) = (x[..n].chunks_exact(8), y[..n].chunks_exact(8));
    let (xr, yr) = (xc.remainder(), yc.remainder());
    let mut acc = [0f32; 8];
    for (a, b) in xc.zip(yc) {
        for i in 0..8 {
            acc[i] += a[i] * b[i];
        }
    }
    let tail: f32 = xr.iter().zip(yr).map(|(a, b)| a * b).sum();
    acc.iter().sum::<f32>() + tail
}

/// `C[m, n] = keep·C + scale·A·B` (`keep = 0` overwrites), on the calling
/// thread unless the product is large.
/// A and B are `(slice, row stride, column stride)`, C `(slice, row stride)`
/// with column stride 1. Bounds are checked before the call.
#[allow(clippy::type_complexity)]
pub(super) fn gemm_f32(
    m: usize,
    n: usize,
    k: usize,
    (a, a_rs, a_cs): (&[f32], usize, usize),
    (b, b_rs, b_cs): (&[f32], usize, usize),
    (c, c_rs): (&mut [f32], usize),
    (keep, scale): (f32, f32),
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c.iter_mut().for_each(|x| *x *= keep);
        return;
    }
    let last = |rs: usize, cs: usize, r: usize, cl: usize| (r - 1) * rs + (cl - 1) * cs;
    assert!(
        last(a_rs, a_cs, m, k) < a.len()
            && last(b_rs, b_cs, k, n) < b.len()
            && last(c_rs, 1, m, n) < c.len(),
        "gemm_f32 operand out of bounds"
    );
    // SAFETY: the assert above bounds every element gemm reads or writes;
    // `c` is exclusively borrowed and never aliases `a` or `b`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            c_rs as isize,
            keep != 0.0,
            a.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            keep,
            scale,
            false,
            false,
            false,
            if m.saturating_mul(n).saturating_mul(k) >= GEMM_PAR_FLOPS {
                gemm::Parallelism::Rayon(0)
            } else {
                gemm::Parallelism::None
            },
        )
    }
}

#[cfg(test)]
#[path = "sequence_tests.rs"]
mod tests;
