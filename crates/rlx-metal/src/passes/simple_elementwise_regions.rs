//! `rewrite_simple_elementwise_regions`: an [`ElementwiseRegion`] whose
//! chain is one of a few short shapes becomes the direct elementwise
//! thunk(s) computing the same values, as the seed does: the direct kernels
//! are plain vector loops, the region kernel interprets its chain.
//!
//! Patterns (`x`, `y`, `z`, `w` dense region inputs, `op*` binary steps,
//! `act` a unary step, each step reading the one before it as its first
//! operand):
//!
//! | chain                          | becomes                              | dispatches |
//! |--------------------------------|--------------------------------------|------------|
//! | `op(x, y)`                     | `BinaryFull`                         | 1 → 1      |
//! | `act(op(x, y))`                | `FusedBinaryActivation`              | 1 → 1      |
//! | `act(op1(op0(x, y), z))`       | `FusedTernaryActivation`             | 1 → 1      |
//! | `op(cast_f32(x), y)`           | `BinaryFull`                         | 1 → 1      |
//! | `act(x)`, `x` exactly at `dst` | `ActivationInPlace`                  | 1 → 1      |
//! | `act(x)`, `x` apart from `dst` | `ActivationOut` (not in the seed)    | 1 → 1      |
//! | `op1(op0(x, y), z)`            | `BinaryFull` pair, the second in place on `dst` | 1 → 2 |
//! | `op2(op1(op0(x, y), z), w)`    | three `BinaryFull`, the last two in place | 1 → 3 |
//!
//! The pair and the triple trade one interpreted dispatch for two or three
//! vector ones (the seed's choice for the GPU); they are the only rewrites
//! that insert thunks, hence [`Pass::run_schedule`].
//!
//! Preconditions:
//! * no prologue; every input the region declares is dense (no scalar bit,
//!   no broadcast modulus), so each reads exactly `len` f32 — the
//!   replacement thunks are f32 like the region;
//! * every operand names a declared input, and each later step's first
//!   operand is the previous step (other operand orders keep the region);
//! * the only cast accepted is the identity cast to f32 (sub-code 0): the
//!   seed also folds f16 / bf16 / trunc casts, which would drop a rounding;
//! * activation codes follow the region encoding, so code 1 is the tanh
//!   GELU (the seed maps it to the exact one);
//! * an input that overlaps `dst` is exactly `dst` (a shifted overlap keeps
//!   the region, whose kernel copies such inputs first); for the split
//!   shapes the inputs of the second and third steps do not overlap `dst`
//!   at all, since the first thunk overwrites `dst` before they are read;
//! * the replacement reads no byte the region did not read and writes
//!   exactly the region's bytes, checked against the region's ranges in
//!   the shared [`Dataflow`]: the def-use of every other thunk is unchanged,
//!   so no liveness question arises (the intermediate of a split lives in
//!   `dst`, which the region writes anyway).

use super::dataflow::Dataflow;
use super::{Pass, PassContext};
use crate::thunk::binary::{BinaryFull, FusedBinaryActivation, FusedTernaryActivation};
use crate::thunk::elementwise::{ActivationInPlace, ActivationOut};
use crate::thunk::io::ByteRange;
use crate::thunk::region::{
    input_byte_offset, ElementwiseRegion, REGION_MAX_INPUTS, REGION_MAX_STEPS, STEP_OPERAND,
};
use crate::thunk::{HalfFlag, Thunk};
use rlx_ir::op::{Activation, BinaryOp, ALL_ACTIVATIONS, ALL_BINARY_OPS};

/// The pass. See the module docs.
pub struct RewriteSimpleElementwiseRegions;

impl Pass for RewriteSimpleElementwiseRegions {
    const NAME: &'static str = "rewrite_simple_elementwise_regions";

    /// The one-for-one rewrites only (a slice cannot grow).
    fn run(thunks: &mut [Thunk], cx: &PassContext) -> usize {
        let df = Dataflow::new(thunks, &cx.live_out);
        let mut matches = 0;
        for (i, slot) in thunks.iter_mut().enumerate() {
            if let Some(mut new) = plan(slot, &df, i) {
                if let (1, Some(t)) = (new.len(), new.pop()) {
                    *slot = t;
                    matches += 1;
                }
            }
        }
        matches
    }

    /// Every rewrite, splits included. Each rewrite keeps the region's
    /// bytes, so one dataflow serves the whole sweep.
    fn run_schedule(thunks: &mut Vec<Thunk>, cx: &PassContext) -> usize {
        let df = Dataflow::new(thunks, &cx.live_out);
        let plans: Vec<(usize, Vec<Thunk>)> = (0..thunks.len())
            .filter_map(|i| plan(&thunks[i], &df, i).map(|new| (i, new)))
            .collect();
        let matches = plans.len();
        for (i, new) in plans.into_iter().rev() {
            thunks.splice(i..=i, new);
        }
        matches
    }
}

/// One decoded chain step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// `act(a)`.
    Unary(Activation, Arg),
    /// Identity cast to f32 of `a`.
    CastF32(Arg),
    /// `a op b`.
    Binary(BinaryOp, Arg, Arg),
}

/// A step operand: a declared input or an earlier step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Arg {
    Input(usize),
    Step(usize),
}

/// The chain of a region the pass can read, or `None` when any step or
/// input is outside what the rewrites model.
pub(super) fn decode(r: &ElementwiseRegion) -> Option<Vec<Step>> {
    let n_in = r.num_inputs as usize;
    let ns = r.num_steps as usize;
    if r.prologue != 0 || n_in > REGION_MAX_INPUTS || ns == 0 || ns > REGION_MAX_STEPS {
        return None;
    }
    let dense = r.scalar_input_mask == 0 && r.input_modulus.iter().take(n_in).all(|&m| m == 0);
    if !dense || r.len == 0 {
        return None;
    }
    let arg = |w: u32| {
        if w & STEP_OPERAND != 0 {
            Some(Arg::Step((w & !STEP_OPERAND) as usize))
        } else if (w as usize) < n_in {
            Some(Arg::Input(w as usize))
        } else {
            None
        }
    };
    r.chain
        .chunks_exact(4)
        .take(ns)
        .map(|w| {
            let sub = w[1] as usize;
            match w[0] {
                0 => Some(Step::Unary(*ALL_ACTIVATIONS.get(sub)?, arg(w[2])?)),
                1 if sub == 0 => Some(Step::CastF32(arg(w[2])?)),
                2 => Some(Step::Binary(
                    *ALL_BINARY_OPS.get(sub)?,
                    arg(w[2])?,
                    arg(w[3])?,
                )),
                _ => None,
            }
        })
        .collect()
}

/// The two-step region `act(a) · b` (the multiply in either operand order,
/// `a` and `b` distinct inputs) — the gating the graph-level region fusion
/// makes of an activation feeding a multiply: the activation and the byte
/// offsets of `a` and `b`.
pub(super) fn gated_product(r: &ElementwiseRegion) -> Option<(Activation, usize, usize)> {
    let (act, a, b) = match decode(r)?.as_slice() {
        [Step::Unary(act, Arg::Input(a)), Step::Binary(BinaryOp::Mul, Arg::Step(0), Arg::Input(b))]
        | [Step::Unary(act, Arg::Input(a)), Step::Binary(BinaryOp::Mul, Arg::Input(b), Arg::Step(0))] => {
            (*act, *a, *b)
        }
        _ => return None,
    };
    if a == b {
        return None;
    }
    let at = |k: usize| input_byte_offset(r.input_offs[k]);
    Some((act, at(a), at(b)))
}

/// The replacement for thunk `i`, if it is a region of a known shape and
/// every precondition holds.
fn plan(t: &Thunk, df: &Dataflow, i: usize) -> Option<Vec<Thunk>> {
    let Thunk::ElementwiseRegion(r) = t else {
        return None;
    };
    let steps = decode(r)?;
    let (dst, len) = (r.dst, r.len);
    let span = (len as usize).checked_mul(4)?;
    let out = ByteRange::new(dst, span);
    let at = |a: Arg| match a {
        Arg::Input(k) => Some(input_byte_offset(r.input_offs[k])),
        Arg::Step(_) => None,
    };
    let input = |a: Arg| at(a).filter(|&o| aligned_or_apart(o, span, &out));
    let apart = |a: Arg| at(a).filter(|&o| !ByteRange::new(o, span).overlaps(&out));
    let bin = |lhs, rhs, op| {
        Thunk::BinaryFull(BinaryFull {
            lhs,
            rhs,
            dst,
            len,
            op,
            dt: HalfFlag::F32,
        })
    };
    use Arg::Step as S;
    use Step::*;
    let new = match steps.as_slice() {
        [Binary(op, x, y)] => vec![bin(input(*x)?, input(*y)?, *op)],
        [CastF32(x), Binary(op, S(0), y)] => vec![bin(input(*x)?, input(*y)?, *op)],
        [Binary(op, x, y), Unary(act, S(0))] => {
            vec![Thunk::FusedBinaryActivation(FusedBinaryActivation {
                lhs: input(*x)?,
                rhs: input(*y)?,
                dst,
                len,
                op: *op,
                act: *act,
                dt: HalfFlag::F32,
            })]
        }
        [Binary(op0, x, y), Binary(op1, S(0), z), Unary(act, S(1))] => {
            vec![Thunk::FusedTernaryActivation(FusedTernaryActivation {
                lhs: input(*x)?,
                rhs0: input(*y)?,
                rhs1: input(*z)?,
                dst,
                len,
                op0: *op0,
                op1: *op1,
                act: *act,
                dt: HalfFlag::F32,
            })]
        }
        [Binary(op0, x, y), Binary(op1, S(0), z)] => vec![
            bin(input(*x)?, input(*y)?, *op0),
            bin(dst, apart(*z)?, *op1),
        ],
        [Binary(op0, x, y), Binary(op1, S(0), z), Binary(op2, S(1), w)] => vec![
            bin(input(*x)?, input(*y)?, *op0),
            bin(dst, apart(*z)?, *op1),
            bin(dst, apart(*w)?, *op2),
        ],
        [Unary(act, x)] => {
            let src = input(*x)?;
            if src == dst {
                vec![Thunk::ActivationInPlace(ActivationInPlace {
                    data: dst,
                    len,
                    act: *act,
                    dt: HalfFlag::F32,
                })]
            } else {
                vec![Thunk::ActivationOut(ActivationOut {
                    src,
                    dst,
                    len,
                    act: *act,
                    dt: HalfFlag::F32,
                })]
            }
        }
        _ => return None,
    };
    keeps_region_bytes(&new, df, i).then_some(new)
}

/// True when `[off, off + span)` is exactly `out` or does not touch it.
fn aligned_or_apart(off: usize, span: usize, out: &ByteRange) -> bool {
    let r = ByteRange::new(off, span);
    r == *out || !r.overlaps(out)
}

/// True when every byte `new` reads was read by region `i` and `new`
/// writes exactly the region's bytes (reads of `dst` after the first
/// thunk of a split read the split's own intermediate).
fn keeps_region_bytes(new: &[Thunk], df: &Dataflow, i: usize) -> bool {
    let old = df.io(i);
    let within = |r: &ByteRange, set: &[ByteRange]| {
        set.iter()
            .any(|s| s.offset <= r.offset && r.end() <= s.end())
    };
    let Some(out) = old.writes.first() else {
        return false;
    };
    new.iter().enumerate().all(|(k, t)| {
        let io = t.io();
        let reads_ok = io
            .reads
            .iter()
            .all(|rd| within(rd, &old.reads) || (k > 0 && rd == out));
        reads_ok && io.writes.len() == 1 && io.writes[0] == *out
    }) && old.writes.len() == 1
}

#[cfg(test)]
#[path = "simple_elementwise_regions_tests.rs"]
mod tests;
