//! Fused elementwise regions: a short program of unary / binary / cast
//! steps evaluated per element in f32 registers (each step's value is an
//! f32, as in the numpy reference's chain interpreter).
//!
//! The program runs over chunks of [`CHUNK`] elements: inputs are gathered
//! into per-chunk buffers (scalars splatted, periodic inputs read at
//! `g % period`), then every step is one monomorphised loop over the chunk,
//! so the interpreter's dispatch costs once per step and chunk, not per
//! element.

use half::{bf16, f16};
use rayon::prelude::*;
use rlx_ir::op::{Activation, BinaryOp};

use super::{act_f32, check_len, invalid, Result, CHUNK, PAR_MIN};

/// Where a step reads an operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionArg {
    /// Region input `i`.
    Input(usize),
    /// Result of an earlier step.
    Step(usize),
}

/// Rounding applied by a cast step (the value stays an f32 register).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionCast {
    /// No change (casts to f32 / f64).
    Identity,
    /// Round to f16 precision (nearest even; overflow → ±inf).
    F16,
    /// Round to bf16 precision (nearest even).
    Bf16,
    /// Truncate toward zero (casts to integer dtypes).
    Trunc,
}

/// What a step computes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RegionOp {
    /// `act(a)`.
    Unary(Activation),
    /// `a op b`.
    Binary(BinaryOp),
    /// `cast(a)`.
    Cast(RegionCast),
}

/// One step of a region program; `b` is ignored by unary and cast steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RegionStep {
    /// Operation.
    pub op: RegionOp,
    /// First operand.
    pub a: RegionArg,
    /// Second operand (binary steps).
    pub b: RegionArg,
}

/// How output element `g` reads one region input.
#[derive(Debug, Clone, Copy)]
pub enum RegionInput<'a> {
    /// The same value everywhere.
    Scalar(f32),
    /// `x[g % x.len()]` (a trailing-shape broadcast).
    Periodic(&'a [f32]),
    /// `x[g]`.
    Dense(&'a [f32]),
}

const K: &str = "elementwise_region";

fn check(steps: &[RegionStep], inputs: &[RegionInput<'_>], n: usize) -> Result<()> {
    if steps.is_empty() {
        return Err(invalid(K, "empty program"));
    }
    for (s, st) in steps.iter().enumerate() {
        let args: &[RegionArg] = match st.op {
            RegionOp::Binary(_) => &[st.a, st.b],
            _ => &[st.a],
        };
        for &arg in args {
            match arg {
                RegionArg::Input(i) if i >= inputs.len() => {
                    return Err(invalid(
                        K,
                        format!("step {s} reads input {i} of {}", inputs.len()),
                    ))
                }
                RegionArg::Step(j) if j >= s => {
                    return Err(invalid(K, format!("step {s} reads step {j}")))
                }
                _ => {}
            }
        }
    }
    for input in inputs {
        match *input {
            RegionInput::Dense(x) => check_len(K, "input", x.len(), n)?,
            RegionInput::Periodic([]) => return Err(invalid(K, "periodic input of period 0")),
            _ => {}
        }
    }
    Ok(())
}

/// Evaluates `steps` for every element of `out` (the last step's value).
/// Inputs: dense ones need `len >= out.len()`; operands must name existing
/// inputs and earlier steps.
pub fn region(steps: &[RegionStep], inputs: &[RegionInput<'_>], out: &mut [f32]) -> Result<()> {
    let n = out.len();
    check(steps, inputs, n)?;
    let ns = steps.len();
    let run = |(c, o): (usize, &mut [f32]), buf: &mut Vec<f32>| {
        buf.resize((inputs.len() + ns) * CHUNK, 0.0);
        let (ins, regs) = buf.split_at_mut(inputs.len() * CHUNK);
        let g0 = c * CHUNK;
        let len = o.len();
        for (input, b) in inputs.iter().zip(ins.chunks_exact_mut(CHUNK)) {
            let b = &mut b[..len];
            match *input {
                RegionInput::Scalar(v) => b.fill(v),
                RegionInput::Dense(x) => b.copy_from_slice(&x[g0..g0 + len]),
                RegionInput::Periodic(x) => {
                    let mut j = g0 % x.len();
                    for v in b.iter_mut() {
                        *v = x[j];
                        j += 1;
                        if j == x.len() {
                            j = 0;
                        }
                    }
                }
            }
        }
        for (s, st) in steps.iter().enumerate() {
            let (done, rest) = regs.split_at_mut(s * CHUNK);
            let dst = &mut rest[..len];
            let get = |arg: RegionArg| -> &[f32] {
                match arg {
                    RegionArg::Input(i) => &ins[i * CHUNK..i * CHUNK + len],
                    RegionArg::Step(j) => &done[j * CHUNK..j * CHUNK + len],
                }
            };
            let a = get(st.a);
            match st.op {
                RegionOp::Unary(act) => {
                    dst.copy_from_slice(a);
                    act_f32(act, dst);
                }
                RegionOp::Binary(op) => {
                    let b = get(st.b);
                    with_bin!(op, f => dst
                        .iter_mut()
                        .zip(a.iter().zip(b))
                        .for_each(|(d, (&x, &y))| *d = f(x, y)));
                }
                RegionOp::Cast(cast) => {
                    let it = dst.iter_mut().zip(a);
                    match cast {
                        RegionCast::Identity => it.for_each(|(d, &x)| *d = x),
                        RegionCast::F16 => it.for_each(|(d, &x)| *d = f16::from_f32(x).to_f32()),
                        RegionCast::Bf16 => it.for_each(|(d, &x)| *d = bf16::from_f32(x).to_f32()),
                        RegionCast::Trunc => it.for_each(|(d, &x)| *d = x.trunc()),
                    }
                }
            }
        }
        o.copy_from_slice(&regs[(ns - 1) * CHUNK..(ns - 1) * CHUNK + len]);
    };
    if n >= PAR_MIN {
        out.par_chunks_mut(CHUNK)
            .enumerate()
            .for_each_init(Vec::new, |buf, item| run(item, buf));
    } else {
        let mut buf = Vec::new();
        out.chunks_mut(CHUNK)
            .enumerate()
            .for_each(|item| run(item, &mut buf));
    }
    Ok(())
}
