//! Native glue for elementwise thunks: activations, binary (full, bias,
//! broadcast, fused with activations), compare, where, fma, casts, SwiGLU,
//! fused elementwise regions (prologue-free ones).

use super::{esz, read_staged, widen, NResult};
use crate::host::buffer::Mem;
use crate::host::exec::Staging;
use crate::host::kernels::elementwise as k;
use crate::host::kernels::{Elem, KernelError};
use crate::thunk::region::{
    chain_input_count, input_byte_offset, BatchElementwiseRegion, ElementwiseRegion,
    REGION_MAX_INPUTS, REGION_MAX_STEPS, STEP_OPERAND,
};
use crate::thunk::{HalfFlag, Thunk};
use k::{RegionArg, RegionCast, RegionInput, RegionOp, RegionStep};
use rlx_ir::op::{Activation, BinaryOp};

pub(super) fn handles(t: &Thunk) -> bool {
    use Thunk::*;
    match t {
        CastHost(c) => {
            super::layout::cast_host_native(c.src_dt) && super::layout::cast_host_native(c.dst_dt)
        }
        ActivationOut(_)
        | ActivationInPlace(_)
        | GeluApproxOut(_)
        | GeluApproxHost(_)
        | Cast(_)
        | CastTruncF32(_)
        | BinaryFull(_)
        | BinaryBroadcast(_)
        | BiasAdd(_)
        | FusedBinaryActivation(_)
        | FusedTernaryActivation(_)
        | Compare(_)
        | Where(_)
        | Fma(_) => true,
        FusedSwiGLU(s) => s.src_dt == s.dst_dt,
        ElementwiseRegion(r) => {
            r.prologue == 0
                && r.num_inputs as usize <= REGION_MAX_INPUTS
                && (1..=REGION_MAX_STEPS).contains(&(r.num_steps as usize))
        }
        BatchElementwiseRegion(r) => (1..=REGION_MAX_STEPS).contains(&(r.num_steps as usize)),
        _ => false,
    }
}

fn unary<T: Elem + crate::host::buffer::Plain>(
    mem: &Mem,
    st: &mut Staging,
    act: Activation,
    src: usize,
    dst: usize,
    n: usize,
) -> NResult {
    let bytes = n * std::mem::size_of::<T>();
    if src == dst {
        k::unary_inplace(act, mem.get_mut::<T>("data", dst, n)?);
        return Ok(());
    }
    let x = read_staged::<T>(mem, &mut st.a, "src", src, n, dst, bytes)?;
    let out = mem.get_mut::<T>("dst", dst, n)?;
    Ok(k::unary(act, x, out, n)?)
}

pub(super) fn run(t: &Thunk, mem: &Mem, st: &mut Staging) -> NResult {
    use Thunk::*;
    match t {
        ActivationOut(a) => {
            by_dt!(a.dt, T => unary::<T>(mem, st, a.act, a.src, a.dst, a.len as usize))
        }
        ActivationInPlace(a) => by_dt!(a.dt, T => {
            k::unary_inplace(a.act, mem.get_mut::<T>("data", a.data, a.len as usize)?);
            Ok(())
        }),
        GeluApproxOut(a) => unary::<f32>(
            mem,
            st,
            Activation::GeluApprox,
            a.src,
            a.dst,
            a.len as usize,
        ),
        GeluApproxHost(a) => unary::<f32>(
            mem,
            st,
            Activation::GeluApprox,
            a.src,
            a.dst,
            a.len as usize,
        ),
        BinaryFull(b) => by_dt!(b.dt, T => {
            let n = b.len as usize;
            let bytes = n * esz(b.dt);
            let (sa, sb) = (&mut st.a, &mut st.b);
            let x = read_staged::<T>(mem, sa, "lhs", b.lhs, n, b.dst, bytes)?;
            let y = read_staged::<T>(mem, sb, "rhs", b.rhs, n, b.dst, bytes)?;
            Ok(k::binary(b.op, x, y, mem.get_mut::<T>("dst", b.dst, n)?, n)?)
        }),
        FusedBinaryActivation(b) => by_dt!(b.dt, T => {
            let n = b.len as usize;
            let bytes = n * esz(b.dt);
            let (sa, sb) = (&mut st.a, &mut st.b);
            let x = read_staged::<T>(mem, sa, "lhs", b.lhs, n, b.dst, bytes)?;
            let y = read_staged::<T>(mem, sb, "rhs", b.rhs, n, b.dst, bytes)?;
            Ok(k::binary_act(b.op, b.act, x, y, mem.get_mut::<T>("dst", b.dst, n)?, n)?)
        }),
        FusedTernaryActivation(b) => by_dt!(b.dt, T => {
            let n = b.len as usize;
            let bytes = n * esz(b.dt);
            let (sa, sb, sc) = (&mut st.a, &mut st.b, &mut st.c);
            let x = read_staged::<T>(mem, sa, "lhs", b.lhs, n, b.dst, bytes)?;
            let y = read_staged::<T>(mem, sb, "rhs0", b.rhs0, n, b.dst, bytes)?;
            let z = read_staged::<T>(mem, sc, "rhs1", b.rhs1, n, b.dst, bytes)?;
            Ok(k::ternary(b.op0, b.op1, Some(b.act), x, y, z, mem.get_mut::<T>("dst", b.dst, n)?, n)?)
        }),
        BiasAdd(b) => by_dt!(b.dt, T => {
            let (m, n) = (b.m as usize, b.n as usize);
            let bytes = m * n * esz(b.dt);
            let (sa, sb) = (&mut st.a, &mut st.b);
            let x = read_staged::<T>(mem, sa, "src", b.src, m * n, b.dst, bytes)?;
            let bias = read_staged::<T>(mem, sb, "bias", b.bias, n, b.dst, bytes)?;
            Ok(k::bias_add(x, bias, mem.get_mut::<T>("dst", b.dst, m * n)?, m, n)?)
        }),
        BinaryBroadcast(b) => by_dt!(b.dt, T => {
            let bad = || KernelError::Invalid { kernel: "binary_broadcast", msg: "rank above 16".into() };
            let (dims, r) = widen::<16>(&b.out_dims).ok_or_else(bad)?;
            let (ls, _) = widen::<16>(&b.lhs_strides).ok_or_else(bad)?;
            let (rs, _) = widen::<16>(&b.rhs_strides).ok_or_else(bad)?;
            let extent = |s: &[usize]| -> usize {
                1 + dims[..r].iter().zip(s).map(|(&d, &st)| d.saturating_sub(1) * st).sum::<usize>()
            };
            let n = b.len as usize;
            let bytes = n * esz(b.dt);
            let (sa, sb) = (&mut st.a, &mut st.b);
            let x = read_staged::<T>(mem, sa, "lhs", b.lhs, extent(&ls[..r]), b.dst, bytes)?;
            let y = read_staged::<T>(mem, sb, "rhs", b.rhs, extent(&rs[..r]), b.dst, bytes)?;
            let geo = k::Broadcast { out_dims: &dims[..r], lhs_strides: &ls[..r], rhs_strides: &rs[..r] };
            Ok(k::binary_broadcast(b.op, None, &geo, x, y, mem.get_mut::<T>("dst", b.dst, n)?)?)
        }),
        Compare(c) => {
            let n = c.len as usize;
            let ln = if c.lhs_scalar { 1 } else { n };
            let rn = if c.rhs_scalar { 1 } else { n };
            let (sa, sb) = (&mut st.a, &mut st.b);
            let x = read_staged::<f32>(mem, sa, "lhs", c.lhs, ln, c.dst, n * 4)?;
            let y = read_staged::<f32>(mem, sb, "rhs", c.rhs, rn, c.dst, n * 4)?;
            let out = mem.get_mut::<f32>("dst", c.dst, n)?;
            Ok(k::compare(c.op, x, c.lhs_scalar, y, c.rhs_scalar, out, n)?)
        }
        Where(w) => {
            let n = w.len as usize;
            let cnt = |s: bool| if s { 1 } else { n };
            let (sa, sb, sc) = (&mut st.a, &mut st.b, &mut st.c);
            let c = read_staged::<f32>(mem, sa, "cond", w.cond, cnt(w.cond_scalar), w.dst, n * 4)?;
            let a = read_staged::<f32>(
                mem,
                sb,
                "on_true",
                w.on_true,
                cnt(w.true_scalar),
                w.dst,
                n * 4,
            )?;
            let b = read_staged::<f32>(
                mem,
                sc,
                "on_false",
                w.on_false,
                cnt(w.false_scalar),
                w.dst,
                n * 4,
            )?;
            let flags = [w.cond_scalar, w.true_scalar, w.false_scalar];
            Ok(k::where_select(
                c,
                a,
                b,
                flags,
                mem.get_mut::<f32>("dst", w.dst, n)?,
                n,
            )?)
        }
        Fma(f) => {
            let n = f.len as usize;
            let (sa, sb, sc) = (&mut st.a, &mut st.b, &mut st.c);
            let a = read_staged::<f32>(mem, sa, "a", f.a, n, f.dst, n * 4)?;
            let b = read_staged::<f32>(mem, sb, "b", f.b, n, f.dst, n * 4)?;
            let c = read_staged::<f32>(mem, sc, "c", f.c, n, f.dst, n * 4)?;
            Ok(k::fma(a, b, c, mem.get_mut::<f32>("dst", f.dst, n)?, n)?)
        }
        FusedSwiGLU(s) => {
            let total = s.total as usize;
            let nh = s.n_half.max(1) as usize;
            let rows = total / nh;
            if s.src_dt != s.dst_dt {
                return Err(KernelError::Invalid {
                    kernel: "fused_swiglu",
                    msg: "mixed dtypes run on the reference".into(),
                }
                .into());
            }
            by_dt!(s.src_dt, T => {
                let x = read_staged::<T>(mem, &mut st.a, "src", s.src, 2 * total, s.dst, total * esz(s.dst_dt))?;
                Ok(k::swiglu(x, mem.get_mut::<T>("dst", s.dst, total)?, rows, nh, s.gate_first)?)
            })
        }
        Cast(c) => {
            let n = c.len as usize;
            match (c.src_dt, c.dst_dt) {
                (HalfFlag::F32, HalfFlag::F16) => Ok(k::cast_f32_to_f16(
                    mem.get("src", c.src, n)?,
                    mem.get_mut("dst", c.dst, n)?,
                )?),
                (HalfFlag::F16, HalfFlag::F32) => Ok(k::cast_f16_to_f32(
                    mem.get("src", c.src, n)?,
                    mem.get_mut("dst", c.dst, n)?,
                )?),
                (a, _) => by_dt!(a, T => {
                    if c.src != c.dst {
                        let x = read_staged::<T>(mem, &mut st.a, "src", c.src, n, c.dst, n * esz(a))?;
                        mem.get_mut::<T>("dst", c.dst, n)?.copy_from_slice(x);
                    }
                    Ok(())
                }),
            }
        }
        CastTruncF32(c) => {
            let n = c.len as usize;
            let x = read_staged::<f32>(mem, &mut st.a, "src", c.src, n, c.dst, n * 4)?;
            let out = mem.get_mut::<f32>("dst", c.dst, n)?;
            for (o, &v) in out.iter_mut().zip(x) {
                *o = v.trunc();
            }
            Ok(())
        }
        CastHost(c) => super::layout::cast_host(c, mem),
        ElementwiseRegion(r) => region(r, mem),
        BatchElementwiseRegion(r) => batch_region(r, mem),
        _ => Err(KernelError::Invalid {
            kernel: "native",
            msg: format!("no elementwise kernel for {}", t.name()),
        }
        .into()),
    }
}

/// Activations in the region chain's code order (`sub` of a kind-0 step).
const REGION_ACTS: [Activation; 17] = {
    use Activation::*;
    [
        Gelu, GeluApprox, Silu, Relu, Sigmoid, Tanh, Exp, Log, Sqrt, Rsqrt, Neg, Abs, Sin, Cos,
        Tan, Atan, Round,
    ]
};

/// Binary ops in the region chain's code order (`sub` of a kind-2 step).
const REGION_BINS: [BinaryOp; 7] = {
    use BinaryOp::*;
    [Add, Sub, Mul, Div, Max, Min, Pow]
};

fn region_err(msg: String) -> crate::host::exec::NativeError {
    KernelError::Invalid {
        kernel: "elementwise_region",
        msg,
    }
    .into()
}

/// A batch of regions: slice `s` is the region over its inputs
/// `batch_input_offs[s · n_in ..]` writing `slice_len` elements at
/// `base_dst + s · slice_elems · 4` (the layout of
/// [`BatchElementwiseRegion`]); slices run one after the other.
fn batch_region(r: &BatchElementwiseRegion, mem: &Mem) -> NResult {
    let n_in = chain_input_count(&r.chain, r.num_steps);
    let slices = r.slices();
    let slots = slices
        .checked_mul(n_in)
        .filter(|&s| s <= r.batch_input_offs.len());
    if slots.is_none() || r.slice_len > r.slice_elems {
        return Err(region_err(format!(
            "batch of {slices} slices × {n_in} inputs, slice_len {} > stride {}",
            r.slice_len, r.slice_elems
        )));
    }
    let stride = (r.slice_elems as usize)
        .checked_mul(4)
        .ok_or_else(|| region_err("slice stride overflows".into()))?;
    for s in 0..slices {
        let mut input_offs = [0u32; REGION_MAX_INPUTS];
        input_offs[..n_in].copy_from_slice(&r.batch_input_offs[s * n_in..(s + 1) * n_in]);
        let dst = s
            .checked_mul(stride)
            .map(|o| crate::thunk::offsets::offset_add(r.base_dst, o))
            .ok_or_else(|| region_err(format!("slice {s} destination overflows")))?;
        let one = ElementwiseRegion {
            len: r.slice_len,
            num_inputs: n_in as u32,
            num_steps: r.num_steps,
            dst,
            input_offs,
            chain: r.chain,
            scalar_input_mask: r.scalar_input_mask,
            input_modulus: r.input_modulus,
            prologue: 0,
            out_n: 0,
            out_c: 0,
            out_h: 0,
            out_w: 0,
            prologue_input: 0,
        };
        region(&one, mem)?;
    }
    Ok(())
}

/// Decode the chain and run the region kernel. Inputs that overlap the
/// destination are copied first (rare: the planner gives outputs fresh space).
fn region(r: &ElementwiseRegion, mem: &Mem) -> NResult {
    let ns = r.num_steps as usize;
    let ni = r.num_inputs as usize;
    if ns == 0 || ns > REGION_MAX_STEPS || ni > REGION_MAX_INPUTS {
        return Err(region_err(format!("{ns} steps, {ni} inputs")));
    }
    let arg = |w: u32| {
        if w & STEP_OPERAND != 0 {
            RegionArg::Step((w & !STEP_OPERAND) as usize)
        } else {
            RegionArg::Input(w as usize)
        }
    };
    let mut steps = [RegionStep {
        op: RegionOp::Cast(RegionCast::Identity),
        a: RegionArg::Input(0),
        b: RegionArg::Input(0),
    }; REGION_MAX_STEPS];
    for (s, w) in r.chain.chunks_exact(4).take(ns).enumerate() {
        let sub = w[1] as usize;
        let op = match w[0] {
            0 => REGION_ACTS.get(sub).map(|&a| RegionOp::Unary(a)),
            1 => [
                RegionCast::Identity,
                RegionCast::F16,
                RegionCast::Bf16,
                RegionCast::Trunc,
            ]
            .get(sub)
            .map(|&c| RegionOp::Cast(c)),
            2 => REGION_BINS.get(sub).map(|&b| RegionOp::Binary(b)),
            _ => None,
        }
        .ok_or_else(|| region_err(format!("step {s}: bad kind/sub {}/{sub}", w[0])))?;
        steps[s] = RegionStep {
            op,
            a: arg(w[2]),
            b: arg(w[3]),
        };
    }
    let n = r.len as usize;
    let geometry = |i: usize| {
        let scalar = r.scalar_input_mask & (1 << i) != 0;
        let m = r.input_modulus[i] as usize;
        let count = if scalar {
            1
        } else if m > 0 {
            m
        } else {
            n
        };
        (scalar, m > 0, input_byte_offset(r.input_offs[i]), count)
    };
    let mut copies: [Option<Vec<f32>>; REGION_MAX_INPUTS] = Default::default();
    for (i, copy) in copies.iter_mut().enumerate().take(ni) {
        let (_, _, off, count) = geometry(i);
        if super::overlap(off, count * 4, r.dst, n * 4) {
            *copy = Some(mem.get::<f32>("input", off, count)?.to_vec());
        }
    }
    let mut inputs = [RegionInput::Scalar(0.0); REGION_MAX_INPUTS];
    for i in 0..ni {
        let (scalar, periodic, off, count) = geometry(i);
        let x: &[f32] = match &copies[i] {
            Some(v) => v,
            None => mem.get::<f32>("input", off, count)?,
        };
        inputs[i] = if scalar {
            RegionInput::Scalar(x[0])
        } else if periodic {
            RegionInput::Periodic(x)
        } else {
            RegionInput::Dense(x)
        };
    }
    let out = mem.get_mut::<f32>("dst", r.dst, n)?;
    Ok(k::region(&steps[..ns], &inputs[..ni], out)?)
}
