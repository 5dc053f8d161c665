//! Elementwise kernels: activations, binary ops (dense and numpy
//! broadcast), bias add, fused binary/ternary + activation, compare, where,
//! fma, SwiGLU, dtype casts and fused region programs.
//!
//! The op `match` is hoisted out of every inner loop (the `with_act!` /
//! `with_bin!` macros monomorphise one loop per op), so each loop is a
//! straight zip over slices that LLVM vectorises. Fused kernels evaluate in
//! `f32` over a stack scratch chunk so that f16 inputs are rounded once, at
//! the store.

use rayon::prelude::*;
use rlx_ir::op::{Activation, BinaryOp, CmpOp};

use super::{check_len, invalid, numel, Elem, Result, PAR_MIN};

#[macro_use]
mod scalar;
mod cast;
mod region;

pub use cast::*;
pub use region::{region, RegionArg, RegionCast, RegionInput, RegionOp, RegionStep};
pub use scalar::{erf, silu};
pub(crate) use scalar::{exp_parts, gelu_approx};

/// Elements per scratch chunk of the fused kernels (fits in L1).
const CHUNK: usize = 1024;

/// One activation on one value (slow path for scalars and tests).
pub fn activate(act: Activation, x: f32) -> f32 {
    with_act!(act, f => f(x))
}

/// One binary op on two values.
pub fn binary_scalar(op: BinaryOp, a: f32, b: f32) -> f32 {
    with_bin!(op, f => f(a, b))
}

/// Applies `act` to the f32 scratch in place. GELU (tanh form), SiLU and
/// the sigmoid, whose formulas are branch-free (see [`scalar::exp_fast`]),
/// run as one vector loop built for AVX-512 or AVX2 when the CPU has it.
#[inline]
fn act_f32(act: Activation, v: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if matches!(
        act,
        Activation::GeluApprox | Activation::Silu | Activation::Sigmoid
    ) {
        with_act!(act, f => simd::map(v, f));
        return;
    }
    with_act!(act, f => v.iter_mut().for_each(|x| *x = f(*x)))
}

/// The in-place loop of [`act_f32`] compiled for wider vector units,
/// chosen at run time.
#[cfg(target_arch = "x86_64")]
mod simd {
    use std::sync::OnceLock;

    /// 2 = AVX-512 F, 1 = AVX2 + FMA, 0 = neither (asked once).
    fn level() -> u8 {
        static LEVEL: OnceLock<u8> = OnceLock::new();
        *LEVEL.get_or_init(|| {
            if is_x86_feature_detected!("avx512f") {
                2
            } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                1
            } else {
                0
            }
        })
    }

    /// # Safety
    /// The CPU has AVX-512 F.
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn map_avx512(v: &mut [f32], f: impl Fn(f32) -> f32) {
        v.iter_mut().for_each(|x| *x = f(*x));
    }

    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn map_avx2(v: &mut [f32], f: impl Fn(f32) -> f32) {
        v.iter_mut().for_each(|x| *x = f(*x));
    }

    /// `v[i] = f(v[i])` on the widest vector unit there is (`f` is
    /// inlined into each build).
    #[inline(always)]
    pub(super) fn map(v: &mut [f32], f: impl Fn(f32) -> f32) {
        match level() {
            // SAFETY: the CPU reported the features of each build.
            2 => unsafe { map_avx512(v, f) },
            1 => unsafe { map_avx2(v, f) },
            _ => v.iter_mut().for_each(|x| *x = f(*x)),
        }
    }
}

/// `out[i] = act(x[i])` for `i < n`. Needs `x.len(), out.len() >= n`.
pub fn unary<T: Elem>(act: Activation, x: &[T], out: &mut [T], n: usize) -> Result<()> {
    check_len("unary", "x", x.len(), n)?;
    check_len("unary", "out", out.len(), n)?;
    let (x, out) = (&x[..n], &mut out[..n]);
    with_act!(act, f => {
        let body = |(o, x): (&mut [T], &[T])| {
            o.iter_mut().zip(x).for_each(|(o, x)| *o = T::from_f32(f(x.to_f32())))
        };
        if n < PAR_MIN {
            body((out, x))
        } else {
            out.par_chunks_mut(PAR_MIN).zip(x.par_chunks(PAR_MIN)).for_each(body)
        }
    });
    Ok(())
}

/// `x[i] = act(x[i])` over the whole slice.
pub fn unary_inplace<T: Elem>(act: Activation, x: &mut [T]) {
    with_act!(act, f => {
        let body = |c: &mut [T]| c.iter_mut().for_each(|v| *v = T::from_f32(f(v.to_f32())));
        if x.len() < PAR_MIN {
            body(x)
        } else {
            x.par_chunks_mut(PAR_MIN).for_each(body)
        }
    })
}

/// Dense `out[i] = a[i] op b[i]` for `i < n`. Needs all lengths `>= n`.
pub fn binary<T: Elem>(op: BinaryOp, a: &[T], b: &[T], out: &mut [T], n: usize) -> Result<()> {
    check_len("binary", "lhs", a.len(), n)?;
    check_len("binary", "rhs", b.len(), n)?;
    check_len("binary", "out", out.len(), n)?;
    let (a, b, out) = (&a[..n], &b[..n], &mut out[..n]);
    with_bin!(op, f => {
        let body = |((o, a), b): ((&mut [T], &[T]), &[T])| {
            for ((o, a), b) in o.iter_mut().zip(a).zip(b) {
                *o = T::from_f32(f(a.to_f32(), b.to_f32()));
            }
        };
        if n < PAR_MIN {
            body(((out, a), b))
        } else {
            out.par_chunks_mut(PAR_MIN)
                .zip(a.par_chunks(PAR_MIN))
                .zip(b.par_chunks(PAR_MIN))
                .for_each(body)
        }
    });
    Ok(())
}

/// Numpy-style broadcast geometry: output dims and, per operand, one
/// element stride per output axis (stride 0 = broadcast along that axis).
#[derive(Debug, Clone, Copy)]
pub struct Broadcast<'a> {
    /// Output dims (rank `r`; rank 0 is a scalar).
    pub out_dims: &'a [usize],
    /// Lhs element strides (`r` entries).
    pub lhs_strides: &'a [usize],
    /// Rhs element strides (`r` entries).
    pub rhs_strides: &'a [usize],
}

/// Elements an operand must have to be read at every index of `dims` with
/// `strides`: `1 + Σ (d - 1)·stride` (0 for an empty output).
pub(crate) fn strided_extent(dims: &[usize], strides: &[usize]) -> usize {
    if dims.contains(&0) {
        return 0;
    }
    1 + dims
        .iter()
        .zip(strides)
        .map(|(&d, &s)| (d - 1) * s)
        .sum::<usize>()
}

/// Offset of row `row` (index over all but the last output axis).
#[inline]
fn row_offset(mut row: usize, lead_dims: &[usize], strides: &[usize]) -> usize {
    let mut off = 0;
    for (&d, &s) in lead_dims.iter().zip(strides).rev() {
        off += (row % d) * s;
        row /= d;
    }
    off
}

/// `out[i] = f(a[ia], b[ib])` along one row with strides `sa`, `sb`.
#[inline(always)]
fn strided_row<T: Elem>(
    f: impl Fn(f32, f32) -> f32,
    a: &[T],
    sa: usize,
    b: &[T],
    sb: usize,
    out: &mut [f32],
) {
    let n = out.len();
    match (sa, sb) {
        (1, 1) => {
            for ((o, a), b) in out.iter_mut().zip(&a[..n]).zip(&b[..n]) {
                *o = f(a.to_f32(), b.to_f32());
            }
        }
        (0, 1) => {
            let a = a[0].to_f32();
            for (o, b) in out.iter_mut().zip(&b[..n]) {
                *o = f(a, b.to_f32());
            }
        }
        (1, 0) => {
            let b = b[0].to_f32();
            for (o, a) in out.iter_mut().zip(&a[..n]) {
                *o = f(a.to_f32(), b);
            }
        }
        _ => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = f(a[i * sa].to_f32(), b[i * sb].to_f32());
            }
        }
    }
}

/// Broadcast binary: `out[idx] = a[idx·lhs_strides] op b[idx·rhs_strides]`
/// over every index of `bc.out_dims`, then `act` if given. Needs `out` to
/// hold `prod(out_dims)` elements and `a`, `b` their strided extents.
pub fn binary_broadcast<T: Elem>(
    op: BinaryOp,
    act: Option<Activation>,
    bc: &Broadcast<'_>,
    a: &[T],
    b: &[T],
    out: &mut [T],
) -> Result<()> {
    const K: &str = "binary_broadcast";
    let r = bc.out_dims.len();
    if bc.lhs_strides.len() != r || bc.rhs_strides.len() != r {
        return Err(invalid(
            K,
            format!(
                "rank {r} but strides {:?} / {:?}",
                bc.lhs_strides, bc.rhs_strides
            ),
        ));
    }
    let total = numel(K, bc.out_dims)?;
    check_len(K, "out", out.len(), total)?;
    check_len(
        K,
        "lhs",
        a.len(),
        strided_extent(bc.out_dims, bc.lhs_strides),
    )?;
    check_len(
        K,
        "rhs",
        b.len(),
        strided_extent(bc.out_dims, bc.rhs_strides),
    )?;
    if total == 0 {
        return Ok(());
    }
    let (row_len, sa, sb) = if r == 0 {
        (1, 0, 0)
    } else {
        (
            bc.out_dims[r - 1],
            bc.lhs_strides[r - 1],
            bc.rhs_strides[r - 1],
        )
    };
    let lead = &bc.out_dims[..r.saturating_sub(1)];
    let (la, lb) = (
        &bc.lhs_strides[..r.saturating_sub(1)],
        &bc.rhs_strides[..r.saturating_sub(1)],
    );
    let a_need = (row_len - 1) * sa + 1;
    let b_need = (row_len - 1) * sb + 1;
    let rows_per = super::rows_per_task(total / row_len, row_len);
    let out = &mut out[..total];
    let task = |(t, chunk): (usize, &mut [T])| {
        let mut tmp = [0f32; CHUNK];
        for (ri, orow) in chunk.chunks_mut(row_len).enumerate() {
            let row = t * rows_per + ri;
            let oa = row_offset(row, lead, la);
            let ob = row_offset(row, lead, lb);
            let (ar, br) = (&a[oa..oa + a_need], &b[ob..ob + b_need]);
            for (ci, oc) in orow.chunks_mut(CHUNK).enumerate() {
                let s = ci * CHUNK;
                let tmp = &mut tmp[..oc.len()];
                let (ac, bc) = (&ar[s * sa..], &br[s * sb..]);
                with_bin!(op, f => strided_row(f, ac, sa, bc, sb, tmp));
                if let Some(act) = act {
                    act_f32(act, tmp);
                }
                oc.iter_mut()
                    .zip(tmp.iter())
                    .for_each(|(o, v)| *o = T::from_f32(*v));
            }
        }
    };
    if total < PAR_MIN {
        task((0, out));
    } else {
        out.par_chunks_mut(rows_per * row_len)
            .enumerate()
            .for_each(task);
    }
    Ok(())
}

/// In place over a `[rows, n]` matrix: `x[r, j] = act(x[r, j] + bias[j])`
/// (either part optional). Needs `x >= rows·n`, `bias >= n`. Used as the
/// epilogue of fused matmuls.
pub fn bias_act_inplace<T: Elem>(
    x: &mut [T],
    bias: Option<&[T]>,
    act: Option<Activation>,
    rows: usize,
    n: usize,
) -> Result<()> {
    const K: &str = "bias_act";
    let total = numel(K, &[rows, n])?;
    check_len(K, "x", x.len(), total)?;
    if let Some(b) = bias {
        check_len(K, "bias", b.len(), n)?;
    }
    if total == 0 || (bias.is_none() && act.is_none()) {
        return Ok(());
    }
    let rows_per = super::rows_per_task(rows, n);
    x[..total].par_chunks_mut(rows_per * n).for_each(|chunk| {
        let mut tmp = [0f32; CHUNK];
        for row in chunk.chunks_exact_mut(n) {
            for (ci, rc) in row.chunks_mut(CHUNK).enumerate() {
                let tmp = &mut tmp[..rc.len()];
                tmp.iter_mut()
                    .zip(rc.iter())
                    .for_each(|(t, v)| *t = v.to_f32());
                if let Some(b) = bias {
                    let b = &b[ci * CHUNK..ci * CHUNK + tmp.len()];
                    tmp.iter_mut().zip(b).for_each(|(t, b)| *t += b.to_f32());
                }
                if let Some(act) = act {
                    act_f32(act, tmp);
                }
                rc.iter_mut()
                    .zip(tmp.iter())
                    .for_each(|(o, v)| *o = T::from_f32(*v));
            }
        }
    });
    Ok(())
}

/// Dense fused `out[i] = act(a[i] op b[i])`. Needs all lengths `>= n`.
pub fn binary_act<T: Elem>(
    op: BinaryOp,
    act: Activation,
    a: &[T],
    b: &[T],
    out: &mut [T],
    n: usize,
) -> Result<()> {
    let dims = [n];
    let bc = Broadcast {
        out_dims: &dims,
        lhs_strides: &[1],
        rhs_strides: &[1],
    };
    check_len("binary_act", "lhs", a.len(), n)?;
    check_len("binary_act", "rhs", b.len(), n)?;
    binary_broadcast(op, Some(act), &bc, a, b, out)
}

/// `out[r, j] = x[r, j] + bias[j]` for a `[rows, n]` matrix. Needs
/// `x, out >= rows·n`, `bias >= n`.
pub fn bias_add<T: Elem>(x: &[T], bias: &[T], out: &mut [T], rows: usize, n: usize) -> Result<()> {
    let dims = [rows, n];
    let bc = Broadcast {
        out_dims: &dims,
        lhs_strides: &[n, 1],
        rhs_strides: &[0, 1],
    };
    check_len("bias_add", "bias", bias.len(), n)?;
    binary_broadcast(BinaryOp::Add, None, &bc, x, bias, out)
}

/// Fused ternary `out[i] = act((a[i] op0 b[i]) op1 c[i])` (`act` optional).
/// Needs all lengths `>= n`.
#[allow(clippy::too_many_arguments)]
pub fn ternary<T: Elem>(
    op0: BinaryOp,
    op1: BinaryOp,
    act: Option<Activation>,
    a: &[T],
    b: &[T],
    c: &[T],
    out: &mut [T],
    n: usize,
) -> Result<()> {
    const K: &str = "ternary";
    check_len(K, "a", a.len(), n)?;
    check_len(K, "b", b.len(), n)?;
    check_len(K, "c", c.len(), n)?;
    check_len(K, "out", out.len(), n)?;
    let body = |(ci, o): (usize, &mut [T])| {
        let s = ci * CHUNK;
        let e = s + o.len();
        let mut tmp = [0f32; CHUNK];
        let tmp = &mut tmp[..o.len()];
        with_bin!(op0, f => strided_row(f, &a[s..e], 1, &b[s..e], 1, tmp));
        with_bin!(op1, f => tmp.iter_mut().zip(&c[s..e]).for_each(|(t, c)| *t = f(*t, c.to_f32())));
        if let Some(act) = act {
            act_f32(act, tmp);
        }
        o.iter_mut()
            .zip(tmp.iter())
            .for_each(|(o, v)| *o = T::from_f32(*v));
    };
    let min = if n < PAR_MIN {
        usize::MAX
    } else {
        PAR_MIN / CHUNK
    };
    out[..n]
        .par_chunks_mut(CHUNK)
        .enumerate()
        .with_min_len(min)
        .for_each(body);
    Ok(())
}

/// Index into an operand that is either dense or a single broadcast scalar.
#[inline(always)]
fn pick<T: Copy>(v: &[T], scalar: bool, i: usize) -> T {
    if scalar {
        v[0]
    } else {
        v[i]
    }
}

/// `out[i] = (a[i] cmp b[i]) ? 1 : 0`; a `*_scalar` flag reads element 0
/// of that operand for every `i`. Needs `out >= n` and each operand `>= n`
/// (or `>= 1` when scalar).
#[allow(clippy::too_many_arguments)]
pub fn compare<T: Elem>(
    op: CmpOp,
    a: &[T],
    a_scalar: bool,
    b: &[T],
    b_scalar: bool,
    out: &mut [T],
    n: usize,
) -> Result<()> {
    const K: &str = "compare";
    check_len(K, "lhs", a.len(), if a_scalar { 1 } else { n })?;
    check_len(K, "rhs", b.len(), if b_scalar { 1 } else { n })?;
    check_len(K, "out", out.len(), n)?;
    if n == 0 {
        return Ok(());
    }
    let f: fn(f32, f32) -> bool = match op {
        CmpOp::Eq => |a, b| a == b,
        CmpOp::Ne => |a, b| a != b,
        CmpOp::Lt => |a, b| a < b,
        CmpOp::Le => |a, b| a <= b,
        CmpOp::Gt => |a, b| a > b,
        CmpOp::Ge => |a, b| a >= b,
    };
    let (one, zero) = (T::from_f32(1.0), T::from_f32(0.0));
    out[..n]
        .par_iter_mut()
        .with_min_len(PAR_MIN)
        .enumerate()
        .for_each(|(i, o)| {
            let hit = f(pick(a, a_scalar, i).to_f32(), pick(b, b_scalar, i).to_f32());
            *o = if hit { one } else { zero };
        });
    Ok(())
}

/// `out[i] = cond[i] != 0 ? a[i] : b[i]` with per-operand scalar flags
/// (`scalar = [cond, a, b]`). Needs `out >= n`, operands `>= n` (or 1).
pub fn where_select<T: Elem>(
    cond: &[T],
    a: &[T],
    b: &[T],
    scalar: [bool; 3],
    out: &mut [T],
    n: usize,
) -> Result<()> {
    const K: &str = "where";
    let need = |s: bool| if s { 1 } else { n };
    check_len(K, "cond", cond.len(), need(scalar[0]))?;
    check_len(K, "a", a.len(), need(scalar[1]))?;
    check_len(K, "b", b.len(), need(scalar[2]))?;
    check_len(K, "out", out.len(), n)?;
    if n == 0 {
        return Ok(());
    }
    out[..n]
        .par_iter_mut()
        .with_min_len(PAR_MIN)
        .enumerate()
        .for_each(|(i, o)| {
            *o = if pick(cond, scalar[0], i).to_f32() != 0.0 {
                pick(a, scalar[1], i)
            } else {
                pick(b, scalar[2], i)
            };
        });
    Ok(())
}

/// `out[i] = a[i]·b[i] + c[i]` (two roundings, like numpy). Needs `>= n`.
pub fn fma<T: Elem>(a: &[T], b: &[T], c: &[T], out: &mut [T], n: usize) -> Result<()> {
    ternary(BinaryOp::Mul, BinaryOp::Add, None, a, b, c, out, n)
}

/// SwiGLU over `x: [rows, 2n]` into `out: [rows, n]`:
/// `x[:, :n]·silu(x[:, n:])`, or with `gate_first`
/// `silu(x[:, :n])·x[:, n:]`. Needs `x >= rows·2n`, `out >= rows·n`.
pub fn swiglu<T: Elem>(
    x: &[T],
    out: &mut [T],
    rows: usize,
    n: usize,
    gate_first: bool,
) -> Result<()> {
    const K: &str = "swiglu";
    let total = numel(K, &[rows, n])?;
    check_len(K, "x", x.len(), total * 2)?;
    check_len(K, "out", out.len(), total)?;
    if total == 0 {
        return Ok(());
    }
    let rows_per = super::rows_per_task(rows, n);
    out[..total]
        .par_chunks_mut(rows_per * n)
        .zip(x[..2 * total].par_chunks(rows_per * 2 * n))
        .for_each(|(o, x)| {
            for (o, x) in o.chunks_exact_mut(n).zip(x.chunks_exact(2 * n)) {
                let (l, r) = x.split_at(n);
                let (val, gate) = if gate_first { (r, l) } else { (l, r) };
                for ((o, v), g) in o.iter_mut().zip(val).zip(gate) {
                    *o = T::from_f32(v.to_f32() * silu(g.to_f32()));
                }
            }
        });
    Ok(())
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
