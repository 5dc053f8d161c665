//! `fuse_gdn_gated_norm`: the gated-DeltaNet output norm
//! `rms_norm(x) · silu(z)` becomes one [`FusedRmsNormMulSilu`].
//!
//! Pattern: `rms_norm(x → n)`, a SiLU of the gate `z` — either
//! `activation_out(silu, z → s)`, or `activation(silu)` in place on `s`
//! optionally after `copy(z → s)` — then `binary(mul, n, s → out)` (either
//! operand order), or `rms_norm(x → n)` then one elementwise region
//! `silu(z) · n` (the graph-level region fusion's form of the same chain).
//! Dispatches: 3 (4 with the copy; 2 with the region) → 1.
//!
//! Preconditions, all from the shared dataflow:
//! * the norm alone provides every byte of `n`, the SiLU (in place: after
//!   the copy, or on `z` itself) every byte of `s`, with the mul's element
//!   count and type;
//! * `n`, `s` (and the copy's output) are read by nothing but the chain
//!   before they are overwritten and are not graph outputs or state;
//! * neither `x` nor `z` is written between its reader and the mul (the
//!   fused thunk reads them at the mul's slot) — for an in-place SiLU on
//!   `z` itself, `z` is the SiLU's own slot, whose pre-SiLU value the fused
//!   thunk reads once the SiLU is gone;
//! * `out` does not overlap `x` or `z` (the kernel reads `z` again after
//!   writing a row when the norm has a beta);
//! * f32 only, as the seed's gated-norm kernel.

use super::dataflow::Dataflow;
use super::rewrite::{rewrite_each, Rewrite};
use super::simple_elementwise_regions::gated_product;
use super::{Pass, PassContext};
use crate::thunk::io::ByteRange;
use crate::thunk::norm::{FusedRmsNormMulSilu, RmsNorm};
use crate::thunk::{HalfFlag, Thunk};
use rlx_ir::op::{Activation, BinaryOp};

/// The pass. See the module docs.
pub struct FuseGdnGatedNorm;

impl Pass for FuseGdnGatedNorm {
    const NAME: &'static str = "fuse_gdn_gated_norm";

    fn run(thunks: &mut [Thunk], cx: &PassContext) -> usize {
        rewrite_each(thunks, cx, |t: &[Thunk], df: &Dataflow, i| {
            let (fused, dead) = plan(t, df, i)?;
            let fused = Thunk::FusedRmsNormMulSilu(fused);
            Some(Rewrite { at: i, fused, dead })
        })
    }
}

/// The SiLU side: where the pre-SiLU gate lives, the slot that last reads
/// it in the original schedule, and the slots the fusion removes.
struct Gate {
    z: usize,
    reader: usize,
    dead: Vec<usize>,
}

/// Trace `s` (read by the mul at `i`) back to a SiLU of the gate.
fn gate(thunks: &[Thunk], df: &Dataflow, i: usize, s: &ByteRange, len: u32) -> Option<Gate> {
    let at = df.sole_writer(i, s)?;
    if !df.dead_after_except(at, s, &[i]) {
        return None;
    }
    let f32 = HalfFlag::F32;
    match &thunks[at] {
        Thunk::ActivationOut(a)
            if a.act == Activation::Silu && a.dt == f32 && a.len == len && a.dst == s.offset =>
        {
            // in place (src == dst) the dropped SiLU leaves the gate in `s`;
            // a shifted overlap has no such reading
            if a.src != a.dst && ByteRange::new(a.src, s.len).overlaps(s) {
                return None;
            }
            Some(Gate {
                z: a.src,
                reader: at,
                dead: vec![at],
            })
        }
        Thunk::ActivationInPlace(a)
            if a.act == Activation::Silu && a.dt == f32 && a.len == len && a.data == s.offset =>
        {
            // an optional copy made the gate's private copy
            if let Some(c) = df.sole_writer(at, s) {
                if let Thunk::Copy(cp) = &thunks[c] {
                    if cp.dst == s.offset
                        && !ByteRange::new(cp.src, s.len).overlaps(s)
                        && cp.dt == f32
                        && cp.len == len
                        && df.dead_after_except(c, s, &[at])
                    {
                        return Some(Gate {
                            z: cp.src,
                            reader: c,
                            dead: vec![c, at],
                        });
                    }
                }
            }
            // in place on the gate itself: the fused thunk reads the
            // pre-SiLU value, which is what `s` holds once the SiLU is gone
            Some(Gate {
                z: s.offset,
                reader: at,
                dead: vec![at],
            })
        }
        _ => None,
    }
}

/// The fused thunk for the mul at `i` and the slots it replaces.
/// The product at `i`: (elements, destination, the two operands, and the
/// pre-SiLU gate when the product is one elementwise region
/// `silu(z) · n` — what the graph-level region fusion makes of the chain).
fn product(t: &Thunk) -> Option<(u32, usize, [usize; 2], Option<usize>)> {
    match t {
        Thunk::BinaryFull(mul)
            if mul.op == BinaryOp::Mul && mul.dt == HalfFlag::F32 && mul.lhs != mul.rhs =>
        {
            Some((mul.len, mul.dst, [mul.lhs, mul.rhs], None))
        }
        Thunk::ElementwiseRegion(r) => match gated_product(r)? {
            (Activation::Silu, z, n) => Some((r.len, r.dst, [n, z], Some(z))),
            _ => None,
        },
        _ => None,
    }
}

fn plan(thunks: &[Thunk], df: &Dataflow, i: usize) -> Option<(FusedRmsNormMulSilu, Vec<usize>)> {
    let (len, dst, [lhs, rhs], region_z) = product(&thunks[i])?;
    let dt = HalfFlag::F32;
    let span = (len as usize).checked_mul(dt.size())?;
    if span == 0 {
        return None;
    }
    let norm_of = |off: usize| -> Option<(usize, &RmsNorm)> {
        let at = df.sole_writer(i, &ByteRange::new(off, span))?;
        match &thunks[at] {
            Thunk::RmsNorm(n)
                if n.dst == off
                    && n.dt == dt
                    && (n.rows as usize).checked_mul(n.h as usize) == Some(len as usize) =>
            {
                Some((at, n))
            }
            _ => None,
        }
    };
    let ((rms_i, norm), s_off) = match (norm_of(lhs), region_z) {
        (Some(n), _) => (n, rhs),
        (None, None) => (norm_of(rhs)?, lhs),
        (None, Some(_)) => return None,
    };
    let n = ByteRange::new(norm.dst, span);
    if !df.dead_after_except(rms_i, &n, &[i]) {
        return None;
    }
    let s = ByteRange::new(s_off, span);
    let g = match region_z {
        // the region applies the SiLU itself: the gate is its input
        Some(z) => Gate {
            z,
            reader: i,
            dead: Vec::new(),
        },
        None => gate(thunks, df, i, &s, len)?,
    };
    let x = ByteRange::new(norm.src, span);
    let z = ByteRange::new(g.z, span);
    let hb = (norm.h as usize).checked_mul(norm.dt.size())?;
    let affine = [ByteRange::new(norm.g, hb), ByteRange::new(norm.b, hb)];
    if df.written_between(rms_i, i, &x)
        || df.written_between(g.reader, i, &z)
        || affine.iter().any(|r| df.written_between(rms_i, i, r))
    {
        return None;
    }
    let out = ByteRange::new(dst, span);
    if out.overlaps(&x) || out.overlaps(&z) {
        return None;
    }
    let mut dead = g.dead;
    dead.push(rms_i);
    Some((
        FusedRmsNormMulSilu {
            x: norm.src,
            g: norm.g,
            b: norm.b,
            z: g.z,
            out: dst,
            rows: norm.rows,
            h: norm.h,
            eps: norm.eps,
            dt,
        },
        dead,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::test_util::{names, run_only};
    use crate::thunk::binary::BinaryFull;
    use crate::thunk::elementwise::{ActivationInPlace, ActivationOut};
    use crate::thunk::shape::Copy;
    use crate::thunk::tag_weight;

    const H: u32 = 8;
    const B: usize = (H as usize) * 4;
    const X: usize = 0;
    const Z: usize = B;
    const N: usize = 2 * B;
    const S: usize = 3 * B;
    const OUT: usize = 4 * B;

    fn rms(dt: HalfFlag) -> Thunk {
        Thunk::RmsNorm(RmsNorm {
            src: X,
            g: tag_weight(0),
            b: tag_weight(64),
            dst: N,
            rows: 1,
            h: H,
            eps: 1e-6,
            dt,
        })
    }

    fn silu_out(src: usize, dst: usize) -> Thunk {
        Thunk::ActivationOut(ActivationOut {
            src,
            dst,
            len: H,
            act: Activation::Silu,
            dt: HalfFlag::F32,
        })
    }

    fn silu_in(data: usize) -> Thunk {
        Thunk::ActivationInPlace(ActivationInPlace {
            data,
            len: H,
            act: Activation::Silu,
            dt: HalfFlag::F32,
        })
    }

    fn copy(src: usize, dst: usize) -> Thunk {
        Thunk::Copy(Copy {
            src,
            dst,
            len: H,
            dt: HalfFlag::F32,
        })
    }

    fn mul(lhs: usize, rhs: usize, dt: HalfFlag) -> Thunk {
        Thunk::BinaryFull(BinaryFull {
            lhs,
            rhs,
            dst: OUT,
            len: H,
            op: BinaryOp::Mul,
            dt,
        })
    }

    fn fuse(thunks: Vec<Thunk>, live_out: &[ByteRange]) -> (Vec<Thunk>, usize) {
        let (_, m, t) = run_only(FuseGdnGatedNorm::NAME, thunks, live_out);
        (t, m)
    }

    fn out(o: usize) -> ByteRange {
        ByteRange::new(o, B)
    }

    fn fused_z(t: &[Thunk]) -> usize {
        match t {
            [Thunk::FusedRmsNormMulSilu(f)] => f.z,
            _ => panic!("not fused: {:?}", names(t)),
        }
    }

    #[test]
    fn fires_with_silu_out_either_order() {
        let f32 = HalfFlag::F32;
        let (t, m) = fuse(vec![rms(f32), silu_out(Z, S), mul(N, S, f32)], &[out(OUT)]);
        assert_eq!(m, 1);
        assert_eq!(fused_z(&t), Z);
        let (t, m) = fuse(vec![silu_out(Z, S), rms(f32), mul(S, N, f32)], &[out(OUT)]);
        assert_eq!(m, 1);
        assert_eq!(fused_z(&t), Z);
    }

    #[test]
    fn fires_through_copy_and_in_place_silu() {
        let f32 = HalfFlag::F32;
        let (t, m) = fuse(
            vec![copy(Z, S), silu_in(S), rms(f32), mul(N, S, f32)],
            &[out(OUT)],
        );
        assert_eq!(m, 1);
        assert_eq!(fused_z(&t), Z);
        // in place on the gate itself
        let (t, m) = fuse(vec![silu_in(Z), rms(f32), mul(N, Z, f32)], &[out(OUT)]);
        assert_eq!(m, 1);
        assert_eq!(fused_z(&t), Z);
    }

    #[test]
    fn refuses_norm_read_later() {
        let f32 = HalfFlag::F32;
        let (t, m) = fuse(
            vec![rms(f32), silu_out(Z, S), mul(N, S, f32), copy(N, 6 * B)],
            &[out(OUT), out(6 * B)],
        );
        assert_eq!(m, 0);
        assert_eq!(
            names(&t),
            vec!["rms_norm", "activation_out", "binary", "copy"]
        );
    }

    #[test]
    fn refuses_silu_that_is_an_output() {
        let f32 = HalfFlag::F32;
        let (_, m) = fuse(
            vec![rms(f32), silu_out(Z, S), mul(N, S, f32)],
            &[out(OUT), ByteRange::new(S + 4, 4)],
        );
        assert_eq!(m, 0);
    }

    #[test]
    fn refuses_gate_clobbered_between() {
        let f32 = HalfFlag::F32;
        let (_, m) = fuse(
            vec![silu_out(Z, S), copy(6 * B, Z), rms(f32), mul(N, S, f32)],
            &[out(OUT), out(Z)],
        );
        assert_eq!(m, 0);
    }

    #[test]
    fn refuses_output_over_an_input() {
        let f32 = HalfFlag::F32;
        let mut m_ = mul(N, S, f32);
        if let Thunk::BinaryFull(b) = &mut m_ {
            b.dst = X;
        }
        let (_, m) = fuse(vec![rms(f32), silu_out(Z, S), m_], &[out(X)]);
        assert_eq!(m, 0);
    }

    #[test]
    fn refuses_f16() {
        let f16 = HalfFlag::F16;
        let (_, m) = fuse(vec![rms(f16), silu_out(Z, S), mul(N, S, f16)], &[out(OUT)]);
        assert_eq!(m, 0);
    }

    #[test]
    fn refuses_plain_mul_of_norm_and_input() {
        let f32 = HalfFlag::F32;
        let (_, m) = fuse(vec![rms(f32), mul(N, Z, f32)], &[out(OUT)]);
        assert_eq!(m, 0);
    }
}
