//! Dense matrix multiplication: sgemm (optionally with an f16 right-hand
//! side), hgemm, batched matmul with per-operand broadcast, fused
//! matmul + bias + activation, and grouped (MoE) matmul.
//!
//! All products go through the `gemm` crate, whose packed micro-kernels
//! are far faster than anything hand-written here. Threading: `gemm` is
//! told `Parallelism::Rayon(0)`, i.e. it splits work over rayon's global
//! pool, the same pool every other host kernel uses, so there is one set of
//! worker threads and no oversubscription; `gemm` itself keeps small
//! products single-threaded. Batched and grouped products run their
//! independent matrices as parallel rayon tasks with `Parallelism::None`
//! when each matrix is too small to split.
//!
//! The one `unsafe` block in the host kernels lives in `strided_gemm`
//! (behind `raw_gemm`, and the blocked SDPA prefill), which asserts the
//! slice extents it relies on.

use std::cell::RefCell;

use gemm::Parallelism;
use half::f16;
use rayon::prelude::*;
use rlx_ir::op::Activation;

use super::elementwise::bias_act_inplace;
use super::{check_len, numel, KernelError, Result};

/// Right-hand-side matrix storage: f32, or f16 weights widened on the fly.
#[derive(Debug, Clone, Copy)]
pub enum MatB<'a> {
    /// f32 elements.
    F32(&'a [f32]),
    /// f16 elements (typical for half-precision weights).
    F16(&'a [f16]),
}

impl MatB<'_> {
    fn len(&self) -> usize {
        match self {
            MatB::F32(b) => b.len(),
            MatB::F16(b) => b.len(),
        }
    }
}

/// Multiply-adds below which a product is not worth splitting over threads.
const PAR_FLOPS: usize = 1 << 18;

/// Rows of A up to which an f16 B is read directly (a gemv-like loop)
/// instead of being widened to f32 first.
const DIRECT_F16_M: usize = 4;

/// `C[m,n] (+)= A[m,k]·B[k,n]` with leading dims `lda`, `ldb`, `ldc`.
///
/// Preconditions (checked by every caller): `a.len() >= (m-1)·lda + k`,
/// `b.len() >= (k-1)·ldb + n`, `c.len() >= (m-1)·ldc + n` when the
/// respective dims are non-zero, and `m, n, k > 0`.
#[allow(clippy::too_many_arguments)]
fn raw_gemm<T: 'static + Copy>(
    (a, lda): (&[T], usize),
    (b, ldb): (&[T], usize),
    (c, ldc): (&mut [T], usize),
    m: usize,
    k: usize,
    n: usize,
    one: T,
    par: Parallelism,
) {
    strided_gemm((a, lda, 1), (b, ldb, 1), (c, ldc), m, k, n, one, par)
}

/// `C[m,n] = A[m,k]·B[k,n]` on strided operands: element `(i, j)` of A is
/// `a[i·rs + j·cs]` for `(a, rs, cs)` (so a transposed operand is just
/// its strides swapped), of C `c[i·ldc + j]`. C is overwritten. Panics if
/// an operand's extent does not fit its slice; `m, k, n = 0` is a no-op.
#[allow(clippy::too_many_arguments)]
pub(crate) fn strided_gemm<T: 'static + Copy>(
    (a, a_rs, a_cs): (&[T], usize, usize),
    (b, b_rs, b_cs): (&[T], usize, usize),
    (c, ldc): (&mut [T], usize),
    m: usize,
    k: usize,
    n: usize,
    one: T,
    par: Parallelism,
) {
    if m == 0 || k == 0 || n == 0 {
        return;
    }
    let last = |rows: usize, rs: usize, cols: usize, cs: usize| {
        (rows - 1)
            .checked_mul(rs)
            .and_then(|r| (cols - 1).checked_mul(cs).and_then(|c| r.checked_add(c)))
    };
    assert!(
        last(m, a_rs, k, a_cs).is_some_and(|e| e < a.len()),
        "gemm: A out of bounds"
    );
    assert!(
        last(k, b_rs, n, b_cs).is_some_and(|e| e < b.len()),
        "gemm: B out of bounds"
    );
    assert!(
        last(m, ldc, n, 1).is_some_and(|e| e < c.len()),
        "gemm: C out of bounds"
    );
    // SAFETY: the extents above guarantee that every element gemm reads
    // (a[i·a_rs + p·a_cs], b[p·b_rs + j·b_cs]) and writes (c[i·ldc + j])
    // lies inside its slice; `c` is borrowed mutably so nothing else
    // aliases it.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            ldc as isize,
            false,
            a.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            one,
            one,
            false,
            false,
            false,
            par,
        )
    }
}

fn par_for(m: usize, k: usize, n: usize) -> Parallelism {
    if m.saturating_mul(k).saturating_mul(n) < PAR_FLOPS {
        Parallelism::None
    } else {
        Parallelism::Rayon(0)
    }
}

thread_local! {
    /// Reused f32 copy of an f16 B (no allocation per call after warm-up).
    static WIDE_B: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// Reused f32 copy of an f16 A and f32 result of the f16 fused product.
    static WIDE_AC: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

fn check_mnk(
    kernel: &'static str,
    a: usize,
    b: usize,
    c: usize,
    m: usize,
    k: usize,
    n: usize,
) -> Result<()> {
    check_len(kernel, "a", a, numel(kernel, &[m, k])?)?;
    check_len(kernel, "b", b, numel(kernel, &[k, n])?)?;
    check_len(kernel, "c", c, numel(kernel, &[m, n])?)
}

/// `C = A·B` for dense row-major `A[m,k]`, `B[k,n]`, `C[m,n]` assuming
/// sizes are checked; `par` for the f32 path.
fn matmul_unchecked(
    a: &[f32],
    b: MatB<'_>,
    c: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
    par: Parallelism,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        c[..m * n].fill(0.0);
        return;
    }
    match b {
        MatB::F32(b) => raw_gemm((a, k), (b, n), (c, n), m, k, n, 1.0f32, par),
        MatB::F16(b) if m <= DIRECT_F16_M => gemv_f16(a, b, c, m, k, n),
        MatB::F16(b) => WIDE_B.with(|w| {
            let mut w = w.borrow_mut();
            w.clear();
            w.extend(b[..k * n].iter().map(|x| x.to_f32()));
            raw_gemm((a, k), (&w[..], n), (c, n), m, k, n, 1.0f32, par);
        }),
    }
}

/// Few-row product with an f16 B read directly: each task owns a block of
/// output columns and streams B's rows through it once per row of A.
fn gemv_f16(a: &[f32], b: &[f16], c: &mut [f32], m: usize, k: usize, n: usize) {
    const NB: usize = 256;
    for (arow, crow) in a.chunks_exact(k).zip(c.chunks_exact_mut(n)).take(m) {
        crow.par_chunks_mut(NB)
            .enumerate()
            .with_min_len((PAR_FLOPS / (k * NB)).max(1))
            .for_each(|(bi, cblk)| {
                let j0 = bi * NB;
                let mut acc = [0f32; NB];
                let acc = &mut acc[..cblk.len()];
                for (p, &ap) in arow.iter().enumerate() {
                    let brow = &b[p * n + j0..p * n + j0 + acc.len()];
                    acc.iter_mut()
                        .zip(brow)
                        .for_each(|(s, bv)| *s += ap * bv.to_f32());
                }
                cblk.copy_from_slice(acc);
            });
    }
}

/// sgemm `C[m,n] = A[m,k]·B[k,n]`, all row-major f32. Needs
/// `a >= m·k`, `b >= k·n`, `c >= m·n`.
pub fn sgemm(a: &[f32], b: &[f32], c: &mut [f32], m: usize, k: usize, n: usize) -> Result<()> {
    matmul(a, MatB::F32(b), c, m, k, n)
}

/// `C[m,n] = A[m,k]·B[k,n]` with B in f32 or f16. Needs `a >= m·k`,
/// `b >= k·n`, `c >= m·n`.
pub fn matmul(a: &[f32], b: MatB<'_>, c: &mut [f32], m: usize, k: usize, n: usize) -> Result<()> {
    check_mnk("matmul", a.len(), b.len(), c.len(), m, k, n)?;
    matmul_unchecked(a, b, c, m, k, n, par_for(m, k, n));
    Ok(())
}

/// All-f16 product `C = A·B` (gemm's f16 kernel, accumulating in f32).
/// Needs `a >= m·k`, `b >= k·n`, `c >= m·n`.
pub fn hgemm(a: &[f16], b: &[f16], c: &mut [f16], m: usize, k: usize, n: usize) -> Result<()> {
    check_mnk("hgemm", a.len(), b.len(), c.len(), m, k, n)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        c[..m * n].fill(f16::ZERO);
        return Ok(());
    }
    raw_gemm((a, k), (b, n), (c, n), m, k, n, f16::ONE, par_for(m, k, n));
    Ok(())
}

/// Fused `C = act(A·B + bias)` (bias `[n]` and act optional). Needs
/// `a >= m·k`, `b >= k·n`, `c >= m·n`, `bias >= n`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_bias_act(
    a: &[f32],
    b: MatB<'_>,
    bias: Option<&[f32]>,
    act: Option<Activation>,
    c: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
) -> Result<()> {
    if let Some(bias) = bias {
        check_len("matmul_bias_act", "bias", bias.len(), n)?;
    }
    matmul(a, b, c, m, k, n)?;
    bias_act_inplace(c, bias, act, m, n)
}

/// Fused `C = act(A·B + bias)` on f16 operands: A is widened to f32, B
/// read as f16 and widened on the fly, the product, bias and activation run
/// in f32, and the result is rounded to f16 once. Needs `a >= m·k`,
/// `b >= k·n`, `c >= m·n`, `bias >= n`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_bias_act_f16(
    a: &[f16],
    b: &[f16],
    bias: Option<&[f16]>,
    act: Option<Activation>,
    c: &mut [f16],
    m: usize,
    k: usize,
    n: usize,
) -> Result<()> {
    const K: &str = "matmul_bias_act_f16";
    check_mnk(K, a.len(), b.len(), c.len(), m, k, n)?;
    if let Some(bias) = bias {
        check_len(K, "bias", bias.len(), n)?;
    }
    let (mk, mn) = (m * k, m * n);
    WIDE_AC.with(|w| {
        let mut w = w.borrow_mut();
        let (wa, wc) = &mut *w;
        wa.clear();
        wa.extend(a[..mk].iter().map(|x| x.to_f32()));
        wc.clear();
        wc.resize(mn, 0.0);
        let bias32: Option<Vec<f32>> = bias.map(|b| b[..n].iter().map(|x| x.to_f32()).collect());
        matmul_unchecked(wa, MatB::F16(b), wc, m, k, n, par_for(m, k, n));
        bias_act_inplace(wc, bias32.as_deref(), act, m, n)?;
        c[..mn]
            .iter_mut()
            .zip(wc.iter())
            .for_each(|(o, &v)| *o = f16::from_f32(v));
        Ok(())
    })
}

/// Geometry of a batched product: `batch` matrices, with the batch stride
/// (in elements) of each input; stride 0 broadcasts one matrix to all.
#[derive(Debug, Clone, Copy)]
pub struct Batch {
    /// Number of products.
    pub batch: usize,
    /// Element stride between A matrices (`m·k` dense, 0 broadcast).
    pub a_stride: usize,
    /// Element stride between B matrices (`k·n` dense, 0 broadcast).
    pub b_stride: usize,
}

impl Batch {
    /// Checks the lengths `[a, b, c]` of a batched `[m, k] @ [k, n]`
    /// product (see [`batched_matmul`]; `batch` ≥ 1) and returns `m·n`.
    fn check(
        &self,
        kernel: &'static str,
        [a, b, c]: [usize; 3],
        m: usize,
        k: usize,
        n: usize,
    ) -> Result<usize> {
        let last = self.batch - 1;
        let (mk, kn, mn) = (
            numel(kernel, &[m, k])?,
            numel(kernel, &[k, n])?,
            numel(kernel, &[m, n])?,
        );
        check_len(kernel, "a", a, numel(kernel, &[last, self.a_stride])? + mk)?;
        check_len(kernel, "b", b, numel(kernel, &[last, self.b_stride])? + kn)?;
        check_len(kernel, "c", c, numel(kernel, &[self.batch, mn])?)?;
        Ok(mn)
    }
}

/// Batched `C[i] = A[i·a_stride..]·B[i·b_stride..]`, C dense
/// `[batch, m, n]`. Needs `a >= (batch-1)·a_stride + m·k`,
/// `b >= (batch-1)·b_stride + k·n`, `c >= batch·m·n`.
pub fn batched_matmul(
    bt: Batch,
    a: &[f32],
    b: MatB<'_>,
    c: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
) -> Result<()> {
    const K: &str = "batched_matmul";
    if bt.batch == 0 {
        return Ok(());
    }
    let mn = bt.check(K, [a.len(), b.len(), c.len()], m, k, n)?;
    if mn == 0 {
        return Ok(());
    }
    let sub_b = |i: usize| match b {
        MatB::F32(b) => MatB::F32(&b[i * bt.b_stride..]),
        MatB::F16(b) => MatB::F16(&b[i * bt.b_stride..]),
    };
    let per = m.saturating_mul(k).saturating_mul(n);
    let c = &mut c[..bt.batch * mn];
    if per >= PAR_FLOPS * 4 || bt.batch == 1 {
        // Big matrices: one at a time, each split by gemm.
        for (i, ci) in c.chunks_exact_mut(mn).enumerate() {
            matmul_unchecked(
                &a[i * bt.a_stride..],
                sub_b(i),
                ci,
                m,
                k,
                n,
                par_for(m, k, n),
            );
        }
    } else {
        c.par_chunks_exact_mut(mn).enumerate().for_each(|(i, ci)| {
            matmul_unchecked(
                &a[i * bt.a_stride..],
                sub_b(i),
                ci,
                m,
                k,
                n,
                Parallelism::None,
            );
        });
    }
    Ok(())
}

/// Batched all-f16 product `C[i] = A[i·a_stride..]·B[i·b_stride..]` (gemm's
/// f16 kernel, accumulating in f32), C dense `[batch, m, n]`. Needs the
/// extents of [`batched_matmul`].
pub fn batched_hgemm(
    bt: Batch,
    a: &[f16],
    b: &[f16],
    c: &mut [f16],
    m: usize,
    k: usize,
    n: usize,
) -> Result<()> {
    const K: &str = "batched_hgemm";
    if bt.batch == 0 {
        return Ok(());
    }
    let mn = bt.check(K, [a.len(), b.len(), c.len()], m, k, n)?;
    if mn == 0 {
        return Ok(());
    }
    let c = &mut c[..bt.batch * mn];
    let one = |i: usize, ci: &mut [f16], par: Parallelism| {
        if k == 0 {
            ci.fill(f16::ZERO);
        } else {
            let (ai, bi) = (&a[i * bt.a_stride..], &b[i * bt.b_stride..]);
            raw_gemm((ai, k), (bi, n), (ci, n), m, k, n, f16::ONE, par);
        }
    };
    let per = m.saturating_mul(k).saturating_mul(n);
    if per >= PAR_FLOPS * 4 || bt.batch == 1 {
        for (i, ci) in c.chunks_exact_mut(mn).enumerate() {
            one(i, ci, par_for(m, k, n));
        }
    } else {
        c.par_chunks_exact_mut(mn)
            .enumerate()
            .for_each(|(i, ci)| one(i, ci, Parallelism::None));
    }
    Ok(())
}

/// Checks the operand lengths of a grouped (mixture-of-experts) product
/// `out[i] = x[i]·w[ids[i]]`: `x [m, k]`, `w` a stack of `experts` slices
/// of `per_expert` elements (or bytes), `m` expert ids, `out [m, n]`.
/// `ops` are the `(name, len)` of x, w, ids and out, in that order.
pub(crate) fn check_grouped(
    kernel: &'static str,
    [m, k, n, experts]: [usize; 4],
    per_expert: usize,
    ops: [(&'static str, usize); 4],
) -> Result<()> {
    let [x, w, ids, out] = ops;
    check_len(kernel, x.0, x.1, numel(kernel, &[m, k])?)?;
    check_len(kernel, w.0, w.1, numel(kernel, &[experts, per_expert])?)?;
    check_len(kernel, ids.0, ids.1, m)?;
    check_len(kernel, out.0, out.1, numel(kernel, &[m, n])?)
}

/// Grouped (mixture-of-experts) product: `out[i] = x[i]·w[expert[i]]` for
/// `x [m,k]`, `w [experts,k,n]`, `expert` i32 `[m]`, `out [m,n]`. Rows are
/// bucketed per expert so each expert's matrix is multiplied once. Needs
/// `x >= m·k`, `w >= experts·k·n`, `expert >= m`, `out >= m·n`; every
/// expert index must lie in `0..experts`.
#[allow(clippy::too_many_arguments)]
pub fn grouped_matmul(
    x: &[f32],
    w: MatB<'_>,
    expert: &[i32],
    out: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
    experts: usize,
) -> Result<()> {
    const K: &str = "grouped_matmul";
    let ops = [
        ("x", x.len()),
        ("w", w.len()),
        ("expert", expert.len()),
        ("out", out.len()),
    ];
    let kn = numel(K, &[k, n])?;
    check_grouped(K, [m, k, n, experts], kn, ops)?;
    // Counting sort of rows by expert.
    let mut count = vec![0usize; experts + 1];
    for &e in &expert[..m] {
        if e < 0 || e as usize >= experts {
            return Err(KernelError::Index {
                kernel: K,
                operand: "expert",
                index: e as i64,
                bound: experts,
            });
        }
        count[e as usize + 1] += 1;
    }
    for e in 0..experts {
        count[e + 1] += count[e];
    }
    let mut order = vec![0usize; m];
    let mut next = count.clone();
    for (i, &e) in expert[..m].iter().enumerate() {
        order[next[e as usize]] = i;
        next[e as usize] += 1;
    }
    // Gather rows in expert order, multiply each bucket, scatter back.
    let mut xs = vec![0f32; m * k];
    for (dst, &i) in xs.chunks_exact_mut(k.max(1)).zip(&order) {
        dst.copy_from_slice(&x[i * k..i * k + k]);
    }
    let mut ys = vec![0f32; m * n];
    let mut rest: &mut [f32] = &mut ys;
    let mut jobs = Vec::new();
    for e in 0..experts {
        let rows = count[e + 1] - count[e];
        let (head, tail) = rest.split_at_mut(rows * n);
        rest = tail;
        if rows > 0 {
            jobs.push((e, count[e], rows, head));
        }
    }
    let run = |(e, start, rows, ye): (usize, usize, usize, &mut [f32]), par| {
        let we = match w {
            MatB::F32(w) => MatB::F32(&w[e * kn..]),
            MatB::F16(w) => MatB::F16(&w[e * kn..]),
        };
        matmul_unchecked(&xs[start * k..], we, ye, rows, k, n, par);
    };
    if jobs.len() > 1 && m.saturating_mul(kn) < PAR_FLOPS * 16 {
        jobs.into_par_iter().for_each(|j| run(j, Parallelism::None));
    } else {
        jobs.into_iter().for_each(|j| {
            let par = par_for(j.2, k, n);
            run(j, par)
        });
    }
    for (src, &i) in ys.chunks_exact(n.max(1)).zip(&order) {
        out[i * n..i * n + n].copy_from_slice(src);
    }
    Ok(())
}

#[cfg(test)]
#[path = "matmul_tests.rs"]
mod tests;
