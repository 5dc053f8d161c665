//! `fuse_decode_mlp_combined_gate_up`: the decode MLP of a model that packs
//! gate and up into one weight (`ffn_up` with `2n` rows, Phi-3 style) — one
//! GEMV of `2n` rows whose halves feed the gating — becomes
//! [`FusedMlpGateUpSwiGLU`](crate::thunk::fused::FusedMlpGateUpSwiGLU) / [`FusedMlpGateUpGelu`](crate::thunk::fused::FusedMlpGateUpGelu) reading the two halves
//! of the packed weight, plus [`FusedMlpDownResidual`](crate::thunk::fused::FusedMlpDownResidual) for the down GEMV +
//! residual add exactly as in [`super::decode_mlp`].
//!
//! Pattern: `dequant_matmul_gguf(x, W → c [2n])`; the gate and up halves
//! of `c` reach the gating either as views (a narrow of a `[1, 1, 2n]` row
//! lowers to an offset into `c`, no thunk) or through `narrow` thunks
//! (one row, half the width, at column 0 or `n`), with whole-range `copy`s
//! allowed on either path; then `activation(silu | gelu_approx)` on one
//! half and `binary(mul)` with the other, in either order. Either half may
//! be the gate: the fused thunk's `gate_w` / `up_w` point at the matching
//! `n` rows of `W`. Dispatches: 3 (+ narrows, copies) → 1, and the tail
//! 2 → 1.
//!
//! Preconditions (shared dataflow only): one GEMV of `2n` rows provides
//! both halves, the gate and up halves are different ones, every value a
//! removed thunk writes (`c`, the narrows, the activation) is read only
//! inside the fused group and is not an output, `x` and the weight are not
//! written before the product's slot, the product overlaps neither, GELU
//! only in f32 — see `decode_mlp::finish_gate_up`.

use super::dataflow::Dataflow;
use super::decode_mlp::{finish_gate_up, gating, gemv, run_with, source, GateUp};
use super::rewrite::Rewrite;
use super::{Pass, PassContext};
use crate::thunk::io::ByteRange;
use crate::thunk::quant::packed_row_bytes;
use crate::thunk::{HalfFlag, Thunk};

/// The pass. See the module docs.
pub struct FuseDecodeMlpCombinedGateUp;

impl Pass for FuseDecodeMlpCombinedGateUp {
    const NAME: &'static str = "fuse_decode_mlp_combined_gate_up";

    fn run(thunks: &mut [Thunk], cx: &PassContext) -> usize {
        run_with(thunks, cx, combined)
    }
}

/// Which half (0: rows `0..n`, 1: rows `n..2n`) of a packed GEMV's output
/// the range `r` (`n` elements) seen before slot `at` is: (GEMV slot,
/// half, narrow / copy slots crossed).
fn half(
    thunks: &[Thunk],
    df: &Dataflow,
    at: usize,
    r: ByteRange,
) -> Option<(usize, usize, Vec<usize>)> {
    let (mut j, mut r, mut dead) = source(thunks, df, at, r)?;
    if let Thunk::Narrow(nw) = &thunks[j] {
        let es = nw.dt.size();
        let (start, len) = (nw.start as usize * es, nw.len as usize * es);
        let row = nw.src_axis as usize * es;
        if nw.outer != 1 || nw.dst != r.offset || len != r.len || row != 2 * len {
            return None;
        }
        if start != 0 && start != len {
            return None;
        }
        dead.push(j);
        let (c, cr, hops) = source(thunks, df, j, ByteRange::new(nw.src + start, len))?;
        dead.extend(hops);
        (j, r) = (c, cr);
    }
    let c = gemv(&thunks[j])?;
    let h = r.len;
    if c.n as usize * if c.dst_f16 { 2 } else { 4 } != 2 * h {
        return None;
    }
    let which = match r.offset.checked_sub(c.dst)? {
        0 => 0,
        d if d == h => 1,
        _ => return None,
    };
    Some((j, which, dead))
}

/// One packed gate/up GEMV feeding the product at `i`.
fn combined(thunks: &[Thunk], df: &Dataflow, i: usize) -> Option<Rewrite> {
    let g = gating(thunks, df, i)?;
    let (gc, gh, mut dead) = half(thunks, df, g.act, g.gate)?;
    let (uc, uh, more) = half(thunks, df, i, g.up)?;
    if gc != uc || gh == uh {
        return None;
    }
    let c = gemv(&thunks[gc])?;
    if c.n != 2 * g.n || c.dst_f16 != (g.dt == HalfFlag::F16) {
        return None;
    }
    dead.extend(more);
    dead.push(gc);
    if g.act != i {
        dead.push(g.act);
    }
    let half_bytes = (g.n as usize).checked_mul(packed_row_bytes(c.scheme, c.k))?;
    let p = GateUp {
        x: c.x,
        k: c.k,
        x_f16: c.x_f16,
        scheme: c.scheme,
        gate_w: c.w_q + gh * half_bytes,
        up_w: c.w_q + uh * half_bytes,
        first: gc,
    };
    finish_gate_up(df, i, &g, p, dead)
}

#[cfg(test)]
#[path = "decode_mlp_combined_tests.rs"]
mod tests;
