//! `fuse_decode_mlp`: the decode (`m = 1`) MLP of a gated FFN — separate
//! gate and up GEMVs, the gating, and the down GEMV feeding the residual
//! add — becomes [`FusedMlpGateUpSwiGLU`] / [`FusedMlpGateUpGelu`] plus,
//! where the down output goes straight into the add,
//! [`FusedMlpDownResidual`].
//!
//! Pattern (what `build_decoder` lowers to for one token):
//! `dequant_matmul_gguf(x, Wg → g)`, `dequant_matmul_gguf(x, Wu → u)`,
//! `activation_out(silu | gelu_approx, g → a)` (or the in-place /
//! `gelu_approx_out` forms, and whole-range `copy`s anywhere on the two
//! operand paths), `binary(mul, a, u → p)` in either operand order; then
//! `dequant_matmul_gguf(p, Wd → d)`, `binary(add, d, r → h)` in either
//! order. Dispatches: 4 (+ copies) → 1 for gate/up, 2 → 1 for the tail;
//! 6 → 2 per layer for Llama / Qwen2, 4 → 1 for Gemma 3, whose
//! post-FFN norm sits between down and add (the tail does not fuse there).
//!
//! Preconditions, all from the shared dataflow (no opaque-thunk escape:
//! every thunk's `io()` is exact, so the pass fires on every layer whose
//! intermediates are really dead, and nowhere else):
//! * gate and up are GGUF GEMVs (`m = 1`) of the same `x`, `k`, `n`, format
//!   and precision, and the product has `n` elements of their output type;
//! * every value a removed thunk writes (g, u, a, copies) is read only by
//!   the fused group and is not a graph output or state;
//! * `x` is not written between the first GEMV and the product (the fused
//!   thunk reads it at the product's slot), and the product overlaps no
//!   weight. The product may overlap `x`: the planner routinely puts it
//!   over the then-dead `x` (every Qwen2.5 and Granite layer but the
//!   first), and the fused thunk, like every thunk, reads its operands in
//!   full before it writes (the host executor stages an operand
//!   overlapping the output, the numpy reference copies it). The GEMV
//!   kernels of Metal cannot stage `x`, so the pass then moves the product
//!   into the bytes of a removed gate / up output where they are free
//!   (see `rehome`), which also keeps the tail's sum off its `x`;
//! * GELU: f32 activations and result (the fused GELU thunk has no f16);
//! * tail: the down GEMV reads exactly `p` as written by the fused thunk,
//!   its output is read by the add alone and is not an output, `p` is not
//!   rewritten before the add, and the add's result either is exactly the
//!   residual operand (in place) or does not overlap it (it may lie over
//!   `p`, read in full first like `x` above).
//!
//! The match count is one per fused gate/up (one per layer); tails show in
//! the schedule as `fused_mlp_down_residual`.

use super::dataflow::Dataflow;
use super::rewrite::Rewrite;
use super::simple_elementwise_regions::gated_product;
use super::{Pass, PassContext};
use crate::thunk::fused::{FusedMlpDownResidual, FusedMlpGateUpGelu, FusedMlpGateUpSwiGLU};
use crate::thunk::io::ByteRange;
use crate::thunk::quant::{packed_row_bytes, DequantMatMulGguf};
use crate::thunk::{HalfFlag, Thunk};
use rlx_ir::op::{Activation, BinaryOp};
use rlx_ir::QuantScheme;

/// The pass. See the module docs.
pub struct FuseDecodeMlp;

impl Pass for FuseDecodeMlp {
    const NAME: &'static str = "fuse_decode_mlp";

    fn run(thunks: &mut [Thunk], cx: &PassContext) -> usize {
        run_with(thunks, cx, separate)
    }
}

/// A gate/up matcher: the rewrite for the product at slot `i`, if any.
pub(super) type Matcher = fn(&[Thunk], &Dataflow, usize) -> Option<Rewrite>;

/// Runs `matcher` at every slot; after each gate/up rewrite moves the
/// product off `x` / the block's output where it must (see `rehome`),
/// then tries the down tail of the same block. Returns the gate/up matches.
pub(super) fn run_with(thunks: &mut [Thunk], cx: &PassContext, matcher: Matcher) -> usize {
    let mut matches = 0;
    let mut df = Dataflow::new(thunks, &cx.live_out);
    for i in 0..thunks.len() {
        let Some(mut rw) = matcher(thunks, &df, i) else {
            continue;
        };
        let moved = rehome(thunks, &df, &mut rw);
        rw.apply(thunks);
        if let Some((di, gemv)) = moved {
            thunks[di] = gemv;
        }
        matches += 1;
        df = Dataflow::new(thunks, &cx.live_out);
        if let Some(rw) = down_tail(thunks, &df, i) {
            rw.apply(thunks);
            df = Dataflow::new(thunks, &cx.live_out);
        }
    }
    matches
}

/// Moves the product of the gate/up rewrite `rw` (at slot `i = rw.at`)
/// into the bytes of a value the rewrite removes (the gate or up GEMV
/// output) when the planner put it where a Metal kernel cannot write it:
/// over `x` (the product was placed over the then-dead `x`), or under the
/// output of the add that consumes the down GEMV (the sum placed over the
/// then-dead product; the fused tail would read its `x` where it writes).
/// The host runs both layouts (it stages an overlapping operand), the
/// GEMV kernels do not (other threadgroups would overwrite `x` while it is
/// read), so without the move the layer's MLP ran on the host on Metal.
///
/// The move needs: the product read by one down GEMV (`x` exactly the
/// product) and by nothing else, not an output; a removed value's bytes
/// (as long as the product) that no thunk reads or writes from `i` through
/// the down GEMV, overlapping neither `x` nor the add's output. Rewrites
/// `rw` to write there and returns the down GEMV reading there (slot,
/// thunk); `None` leaves `rw` as it was.
fn rehome(thunks: &[Thunk], df: &Dataflow, rw: &mut Rewrite) -> Option<(usize, Thunk)> {
    let i = rw.at;
    let (x, p, n, f16) = match &rw.fused {
        Thunk::FusedMlpGateUpSwiGLU(f) => {
            let x = ByteRange::new(f.x, (f.k as usize).checked_mul(esz(f.x_f16))?);
            (x, f.dst, f.n, f.dst_f16)
        }
        Thunk::FusedMlpGateUpGelu(f) => (
            ByteRange::new(f.x, (f.k as usize).checked_mul(4)?),
            f.dst,
            f.n,
            false,
        ),
        _ => return None,
    };
    let pr = ByteRange::new(p, (n as usize).checked_mul(esz(f16))?);
    let uses = df.uses_after(i, &pr);
    let [di] = uses.readers[..] else {
        return None;
    };
    let dm = gemv(&thunks[di]).filter(|d| d.x == p && d.k == n && d.x_f16 == f16)?;
    if uses.live_out {
        return None;
    }
    let dr = ByteRange::new(dm.dst, (dm.n as usize).checked_mul(esz(dm.dst_f16))?);
    // the writes of the down output's readers (the residual add, if any)
    let sums: Vec<ByteRange> = df
        .uses_after(di, &dr)
        .readers
        .iter()
        .flat_map(|&j| df.io(j).writes.clone())
        .collect();
    let clash = |r: &ByteRange| r.overlaps(&x) || sums.iter().any(|w| w.overlaps(r));
    if !clash(&pr) {
        return None;
    }
    let home = rw
        .dead
        .iter()
        .flat_map(|&d| df.io(d).writes.iter())
        .filter(|w| w.len >= pr.len && w.buffer() == pr.buffer())
        .map(|w| ByteRange::new(w.offset, pr.len))
        .find(|c| {
            !clash(c)
                && !c.overlaps(&pr)
                && !df.written_between(i, di + 1, c)
                && !df.read_between(i, di, c)
        })?;
    match &mut rw.fused {
        Thunk::FusedMlpGateUpSwiGLU(f) => f.dst = home.offset,
        Thunk::FusedMlpGateUpGelu(f) => f.dst = home.offset,
        _ => return None,
    }
    let mut down = dm.clone();
    down.x = home.offset;
    Some((di, Thunk::DequantMatMulGguf(down)))
}

/// Bytes per element of an operand that may be f16.
fn esz(f16: bool) -> usize {
    if f16 {
        2
    } else {
        4
    }
}

/// The gating product at a slot: `mul(act(gate), up)`.
pub(super) struct Gating {
    /// Slot of the activation.
    pub act: usize,
    /// The activation's input (the gate projection's values).
    pub gate: ByteRange,
    /// The product's other operand (the up projection's values).
    pub up: ByteRange,
    /// The product.
    pub dst: usize,
    /// Elements (the intermediate size).
    pub n: u32,
    /// Element type of the activation and product.
    pub dt: HalfFlag,
    /// GELU (tanh) rather than SiLU.
    pub gelu: bool,
}

/// `Some(true)` for GELU (tanh), `Some(false)` for SiLU.
fn gate_kind(a: Activation) -> Option<bool> {
    match a {
        Activation::Silu => Some(false),
        Activation::GeluApprox => Some(true),
        _ => None,
    }
}

/// The input offset and kind of a gating activation writing `len`
/// elements of `dt` exactly at `dst`.
fn activation(t: &Thunk, dst: usize, len: u32, dt: HalfFlag) -> Option<(usize, bool)> {
    match t {
        Thunk::ActivationOut(a) if a.dst == dst && a.len == len && a.dt == dt => {
            gate_kind(a.act).map(|g| (a.src, g))
        }
        Thunk::ActivationInPlace(a) if a.data == dst && a.len == len && a.dt == dt => {
            gate_kind(a.act).map(|g| (a.data, g))
        }
        Thunk::GeluApproxOut(a) if a.dst == dst && a.len == len && dt == HalfFlag::F32 => {
            Some((a.src, true))
        }
        Thunk::GeluApproxHost(a) if a.dst == dst && a.len == len && dt == HalfFlag::F32 => {
            Some((a.src, true))
        }
        _ => None,
    }
}

/// The gating product computed by the two-step elementwise region at `i`
/// (`act(gate) · up`, as the graph-level region fusion marks it): the
/// region is both the activation and the product, so `act == i`.
fn region_gating(thunks: &[Thunk], i: usize) -> Option<Gating> {
    let Thunk::ElementwiseRegion(r) = &thunks[i] else {
        return None;
    };
    let (act, gate, up) = gated_product(r)?;
    let span = (r.len as usize).checked_mul(4)?;
    Some(Gating {
        act: i,
        gate: ByteRange::new(gate, span),
        up: ByteRange::new(up, span),
        dst: r.dst,
        n: r.len,
        dt: HalfFlag::F32,
        gelu: gate_kind(act)?,
    })
}

/// The gating product at slot `i`, in either operand order, as an
/// activation feeding a multiply, one elementwise region, or one
/// single-row `FusedSwiGLU` over the packed halves.
pub(super) fn gating(thunks: &[Thunk], df: &Dataflow, i: usize) -> Option<Gating> {
    if let Some(g) = region_gating(thunks, i) {
        return Some(g);
    }
    if let Thunk::FusedSwiGLU(f) = &thunks[i] {
        // one row of `[gate | up]` (or `[up | gate]`) halves
        if f.total != f.n_half || f.src_dt != f.dst_dt || f.total == 0 {
            return None;
        }
        let span = (f.total as usize).checked_mul(f.src_dt.size())?;
        let (g0, u0) = if f.gate_first { (0, span) } else { (span, 0) };
        return Some(Gating {
            act: i,
            gate: ByteRange::new(f.src.checked_add(g0)?, span),
            up: ByteRange::new(f.src.checked_add(u0)?, span),
            dst: f.dst,
            n: f.total,
            dt: f.dst_dt,
            gelu: false,
        });
    }
    let Thunk::BinaryFull(mul) = &thunks[i] else {
        return None;
    };
    if mul.op != BinaryOp::Mul || mul.len == 0 {
        return None;
    }
    let span = (mul.len as usize).checked_mul(mul.dt.size())?;
    for (a, u) in [(mul.lhs, mul.rhs), (mul.rhs, mul.lhs)] {
        let Some(j) = df.sole_writer(i, &ByteRange::new(a, span)) else {
            continue;
        };
        if let Some((src, gelu)) = activation(&thunks[j], a, mul.len, mul.dt) {
            return Some(Gating {
                act: j,
                gate: ByteRange::new(src, span),
                up: ByteRange::new(u, span),
                dst: mul.dst,
                n: mul.len,
                dt: mul.dt,
                gelu,
            });
        }
    }
    None
}

/// The thunk that alone provides every byte of `r` just before slot `at`,
/// following whole-range copies back: (its slot, the range within its
/// output, the copies crossed).
pub(super) fn source(
    thunks: &[Thunk],
    df: &Dataflow,
    mut at: usize,
    mut r: ByteRange,
) -> Option<(usize, ByteRange, Vec<usize>)> {
    let mut hops = Vec::new();
    for _ in 0..8 {
        let j = df.sole_writer(at, &r)?;
        match &thunks[j] {
            Thunk::Copy(c) if c.dst == r.offset && c.len as usize * c.dt.size() == r.len => {
                hops.push(j);
                at = j;
                r = ByteRange::new(c.src, r.len);
            }
            _ => return Some((j, r, hops)),
        }
    }
    None
}

/// A GGUF decode GEMV.
pub(super) fn gemv(t: &Thunk) -> Option<&DequantMatMulGguf> {
    match t {
        Thunk::DequantMatMulGguf(d)
            if d.m == 1 && d.k > 0 && d.n > 0 && matches!(d.scheme, QuantScheme::Gguf(_)) =>
        {
            Some(d)
        }
        _ => None,
    }
}

/// What the fused gate/up thunk reads.
pub(super) struct GateUp {
    /// Activation row.
    pub x: usize,
    /// Its length.
    pub k: u32,
    /// It is f16.
    pub x_f16: bool,
    /// Weight format.
    pub scheme: QuantScheme,
    /// Gate rows.
    pub gate_w: usize,
    /// Up rows.
    pub up_w: usize,
    /// First slot that reads `x` in the unfused schedule.
    pub first: usize,
}

/// The checks every gate/up rewrite shares, and the fused thunk at `i`.
/// `dead` are the slots the rewrite removes (GEMVs, activation, copies).
pub(super) fn finish_gate_up(
    df: &Dataflow,
    i: usize,
    g: &Gating,
    p: GateUp,
    mut dead: Vec<usize>,
) -> Option<Rewrite> {
    if g.gelu && (g.dt != HalfFlag::F32 || p.x_f16) {
        return None;
    }
    dead.sort_unstable();
    dead.dedup();
    let mut group = dead.clone();
    group.push(i);
    for &d in &dead {
        if df
            .io(d)
            .writes
            .iter()
            .any(|w| !df.dead_after_except(d, w, &group))
        {
            return None;
        }
    }
    let x = ByteRange::new(p.x, (p.k as usize).checked_mul(esz(p.x_f16))?);
    let wb = (g.n as usize).checked_mul(packed_row_bytes(p.scheme, p.k))?;
    let (gw, uw) = (ByteRange::new(p.gate_w, wb), ByteRange::new(p.up_w, wb));
    if [&x, &gw, &uw]
        .iter()
        .any(|r| df.written_between(p.first, i, r))
    {
        return None;
    }
    let out = ByteRange::new(g.dst, (g.n as usize).checked_mul(g.dt.size())?);
    if out.overlaps(&gw) || out.overlaps(&uw) {
        return None;
    }
    let fused = if g.gelu {
        Thunk::FusedMlpGateUpGelu(FusedMlpGateUpGelu {
            x: p.x,
            gate_w: p.gate_w,
            up_w: p.up_w,
            dst: g.dst,
            k: p.k,
            n: g.n,
            scheme: p.scheme,
        })
    } else {
        Thunk::FusedMlpGateUpSwiGLU(FusedMlpGateUpSwiGLU {
            x: p.x,
            gate_w: p.gate_w,
            up_w: p.up_w,
            dst: g.dst,
            k: p.k,
            n: g.n,
            scheme: p.scheme,
            x_f16: p.x_f16,
            dst_f16: g.dt == HalfFlag::F16,
        })
    };
    Some(Rewrite { at: i, fused, dead })
}

/// Separate gate and up GEMVs feeding the product at `i`.
fn separate(thunks: &[Thunk], df: &Dataflow, i: usize) -> Option<Rewrite> {
    let g = gating(thunks, df, i)?;
    let (gi, gr, mut dead) = source(thunks, df, g.act, g.gate)?;
    let (ui, ur, hops) = source(thunks, df, i, g.up)?;
    if gi == ui {
        return None;
    }
    let (gm, um) = (gemv(&thunks[gi])?, gemv(&thunks[ui])?);
    let same = gm.x == um.x
        && gm.k == um.k
        && gm.scheme == um.scheme
        && gm.x_f16 == um.x_f16
        && gm.dst_f16 == um.dst_f16;
    if !same
        || gm.dst != gr.offset
        || um.dst != ur.offset
        || gm.n != g.n
        || um.n != g.n
        || gm.dst_f16 != (g.dt == HalfFlag::F16)
    {
        return None;
    }
    dead.extend(hops);
    dead.extend([gi, ui]);
    if g.act != i {
        dead.push(g.act);
    }
    let p = GateUp {
        x: gm.x,
        k: gm.k,
        x_f16: gm.x_f16,
        scheme: gm.scheme,
        gate_w: gm.w_q,
        up_w: um.w_q,
        first: gi.min(ui),
    };
    finish_gate_up(df, i, &g, p, dead)
}

/// The down GEMV + residual add after the fused gate/up thunk at `f`.
fn down_tail(thunks: &[Thunk], df: &Dataflow, f: usize) -> Option<Rewrite> {
    let (p, pn, p_f16) = match &thunks[f] {
        Thunk::FusedMlpGateUpSwiGLU(t) => (t.dst, t.n, t.dst_f16),
        Thunk::FusedMlpGateUpGelu(t) => (t.dst, t.n, false),
        _ => return None,
    };
    let pr = ByteRange::new(p, (pn as usize).checked_mul(esz(p_f16))?);
    let di =
        *df.uses_after(f, &pr).readers.iter().find(|&&j| {
            gemv(&thunks[j]).is_some_and(|d| d.x == p && d.k == pn && d.x_f16 == p_f16)
        })?;
    if df.sole_writer(di, &pr) != Some(f) {
        return None;
    }
    let dm = gemv(&thunks[di])?;
    let dr = ByteRange::new(dm.dst, (dm.n as usize).checked_mul(esz(dm.dst_f16))?);
    let uses = df.uses_after(di, &dr);
    let [ai] = uses.readers[..] else {
        return None;
    };
    let Thunk::BinaryFull(add) = &thunks[ai] else {
        return None;
    };
    let f16 = add.dt == HalfFlag::F16;
    if uses.live_out || add.op != BinaryOp::Add || add.len != dm.n || f16 != dm.dst_f16 {
        return None;
    }
    let res = match (add.lhs == dm.dst, add.rhs == dm.dst) {
        (true, false) => add.rhs,
        (false, true) => add.lhs,
        _ => return None,
    };
    let rr = ByteRange::new(res, dr.len);
    let wr = ByteRange::new(
        dm.w_q,
        (dm.n as usize).checked_mul(packed_row_bytes(dm.scheme, dm.k))?,
    );
    if rr.overlaps(&dr) || df.written_between(di, ai, &pr) || df.written_between(di, ai, &wr) {
        return None;
    }
    let out = ByteRange::new(add.dst, dr.len);
    if out.overlaps(&wr) || (out.overlaps(&rr) && out != rr) {
        return None;
    }
    let fused = Thunk::FusedMlpDownResidual(FusedMlpDownResidual {
        x: p,
        w: dm.w_q,
        res,
        dst: add.dst,
        k: dm.k,
        n: dm.n,
        scheme: dm.scheme,
        x_f16: dm.x_f16,
        dst_f16: f16,
        res_f16: f16,
    });
    Some(Rewrite {
        at: ai,
        fused,
        dead: vec![di],
    })
}

#[cfg(test)]
#[path = "decode_mlp_tests.rs"]
pub(crate) mod tests;
