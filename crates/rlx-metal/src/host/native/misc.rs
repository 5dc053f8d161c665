//! Native glue for the random fills, `vq_assign`, `axial_rope2d_host` and
//! `spd_host` onto [`crate::host::kernels::misc`] and
//! [`crate::host::kernels::spd`].

use super::{read_staged, NResult};
use crate::host::buffer::Mem;
use crate::host::exec::{NativeError, Staging};
use crate::host::kernels::misc::{self as k, AxialRope};
use crate::host::kernels::spd;
use crate::host::kernels::{invalid, KernelError};
use crate::thunk::host::{rng_key, CustomOperand, SpdHost};
use crate::thunk::Thunk;
use half::f16;
use rlx_ir::{DType, Op};

pub(super) fn handles(t: &Thunk) -> bool {
    match t {
        Thunk::RngNormal(_) | Thunk::RngUniform(_) | Thunk::VqAssign(_) => true,
        Thunk::AxialRope2dHost(_) => true,
        Thunk::SpdHost(s) => match &s.op {
            Op::Spd { .. } => true,
            Op::SpdBackward { kind, .. } => spd::backward_native(*kind),
            _ => false,
        },
        _ => false,
    }
}

pub(super) fn run(t: &Thunk, mem: &Mem, st: &mut Staging) -> NResult {
    match t {
        Thunk::RngNormal(r) => {
            let out = mem.get_mut::<f32>("dst", r.dst, r.len as usize)?;
            k::rng_normal(out, r.mean, r.scale, rng_key(r.key, r.op_seed), r.offset);
            Ok(())
        }
        Thunk::RngUniform(r) => {
            let out = mem.get_mut::<f32>("dst", r.dst, r.len as usize)?;
            k::rng_uniform(out, r.low, r.high, rng_key(r.key, r.op_seed), r.offset);
            Ok(())
        }
        Thunk::VqAssign(v) => {
            let (n, d, kk) = (v.n as usize, v.d as usize, v.k as usize);
            let out_bytes = n * 4;
            let x = read_staged::<f32>(mem, &mut st.a, "x", v.x, n * d, v.out, out_bytes)?;
            let cb = read_staged::<f32>(mem, &mut st.b, "cb", v.cb, kk * d, v.out, out_bytes)?;
            let out = mem.get_mut::<i32>("out", v.out, n)?;
            Ok(k::vq_assign(x, cb, out, (n, d, kk), v.metric)?)
        }
        Thunk::AxialRope2dHost(r) => {
            let a = AxialRope {
                batch: r.batch as usize,
                seq: r.seq as usize,
                heads: r.num_heads as usize,
                head_dim: r.head_dim as usize,
                end_x: r.end_x as usize,
                end_y: r.end_y as usize,
                theta: r.theta,
                repeat_factor: r.repeat_factor as usize,
            };
            let total = r.batch as usize * r.seq as usize * r.hidden as usize;
            if r.hidden as usize != a.heads * a.head_dim {
                return Err(invalid(
                    "axial_rope2d",
                    format!("hidden {} != {} heads × {}", r.hidden, a.heads, a.head_dim),
                )
                .into());
            }
            let src = read_staged::<f32>(mem, &mut st.a, "src", r.src, total, r.dst, total * 4)?;
            let dst = mem.get_mut::<f32>("dst", r.dst, total)?;
            Ok(k::axial_rope2d(src, dst, &a)?)
        }
        Thunk::SpdHost(s) => run_spd(s, mem),
        _ => Ok(()),
    }
}

/// An operand widened to f64.
fn load(mem: &Mem, o: &CustomOperand) -> Result<Vec<f64>, NativeError> {
    let n = o.1 as usize;
    Ok(match o.2.dtype {
        DType::F64 => mem.get::<f64>("spd operand", o.0, n)?.to_vec(),
        DType::F32 => mem
            .get::<f32>("spd operand", o.0, n)?
            .iter()
            .map(|&v| v as f64)
            .collect(),
        DType::F16 => mem
            .get::<f16>("spd operand", o.0, n)?
            .iter()
            .map(|v| v.to_f64())
            .collect(),
        other => {
            return Err(invalid("spd", format!("operand dtype {other} is not a float")).into())
        }
    })
}

/// Relative symmetry tolerance of an input dtype (its rounding of a
/// symmetric product can leave that much asymmetry).
fn sym_tol(dt: DType) -> f64 {
    match dt {
        DType::F64 => 1e-9,
        DType::F32 => 1e-5,
        _ => 4e-3,
    }
}

fn run_spd(s: &SpdHost, mem: &Mem) -> NResult {
    let datas = s
        .inputs
        .iter()
        .map(|o| load(mem, o))
        .collect::<Result<Vec<_>, _>>()?;
    let dims: Vec<Vec<usize>> = s
        .inputs
        .iter()
        .map(|o| {
            o.2.dims
                .iter()
                .map(|d| d.as_static().unwrap_or(0))
                .collect()
        })
        .collect();
    let ops: Vec<spd::Operand<'_>> = datas
        .iter()
        .zip(&dims)
        .map(|(data, dims)| spd::Operand { data, dims })
        .collect();
    let tol = s
        .inputs
        .iter()
        .map(|o| sym_tol(o.2.dtype))
        .fold(0.0, f64::max);
    let res = match &s.op {
        Op::Spd { kind, eps } => spd::spd_forward(*kind, *eps as f64, &ops, tol)?,
        Op::SpdBackward { kind, eps } => spd::spd_backward(*kind, *eps as f64, &ops, tol)?,
        other => {
            let e: KernelError = invalid("spd", format!("not an SPD op: {}", other.name()));
            return Err(e.into());
        }
    };
    let (off, n, shape) = &s.output;
    let n = *n as usize;
    if res.len() != n {
        let msg = format!("result has {} elements, the output {n}", res.len());
        return Err(invalid("spd", msg).into());
    }
    match shape.dtype {
        DType::F64 => mem
            .get_mut::<f64>("spd output", *off, n)?
            .copy_from_slice(&res),
        DType::F32 => {
            let o = mem.get_mut::<f32>("spd output", *off, n)?;
            o.iter_mut().zip(&res).for_each(|(o, v)| *o = *v as f32);
        }
        DType::F16 => {
            let o = mem.get_mut::<f16>("spd output", *off, n)?;
            o.iter_mut()
                .zip(&res)
                .for_each(|(o, v)| *o = f16::from_f64(*v));
        }
        other => return Err(invalid("spd", format!("output dtype {other} is not a float")).into()),
    }
    Ok(())
}
