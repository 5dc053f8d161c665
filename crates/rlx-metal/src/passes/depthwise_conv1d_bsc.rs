//! `fuse_depthwise_conv1d_bsc`: the transpose dance around a depthwise
//! 1-D convolution on `[batch, seq, channels]` data (GDN / Mamba
//! `ssm_conv1d`) becomes one [`FusedDepthwiseConv1dBsc`].
//!
//! Pattern: `transpose(BSC → BCW)`, optionally `copy`, then `conv2d` with
//! `groups == c_in == c_out`, `h = kh = 1`, unit strides and dilations, no
//! padding, `w = w_out + kw − 1`; then optionally `copy`,
//! `transpose(BCS → BSC)`, and optionally a SiLU of the result
//! (`activation_out` or in-place `activation`). Reshapes are views and
//! leave no thunk. Dispatches: 3–6 → 1.
//!
//! The fused thunk sits at the chain's last slot, so only reads move
//! later; preconditions, all from the shared dataflow:
//! * every link's input is provided in full by the link before it alone,
//!   with the exact layout (transpose strides, element counts);
//! * every intermediate (BCW, its copy, the conv output, its copy, the
//!   BSC before a fused SiLU) is read by nothing but the next link and is
//!   not a graph output or state;
//! * neither the BSC source nor the weight is written between its original
//!   reader and the last slot;
//! * the final output does not overlap the source.
//!
//! Everything is f32 (the conv and transpose thunks are).

use super::dataflow::Dataflow;
use super::rewrite::{rewrite_each, Rewrite};
use super::{Pass, PassContext};
use crate::thunk::conv::FusedDepthwiseConv1dBsc;
use crate::thunk::io::ByteRange;
use crate::thunk::shape::Transpose;
use crate::thunk::{HalfFlag, Thunk};
use rlx_ir::op::Activation;

const F32: usize = 4;

/// The pass. See the module docs.
pub struct FuseDepthwiseConv1dBsc;

impl Pass for FuseDepthwiseConv1dBsc {
    const NAME: &'static str = "fuse_depthwise_conv1d_bsc";

    fn run(thunks: &mut [Thunk], cx: &PassContext) -> usize {
        rewrite_each(thunks, cx, |t: &[Thunk], df: &Dataflow, i| {
            let (fused, at, dead) = plan(t, df, i)?;
            let fused = Thunk::FusedDepthwiseConv1dBsc(fused);
            Some(Rewrite { at, fused, dead })
        })
    }
}

/// True when `t` writes dense `dims` reading element `(a, b, c)` at
/// `a·s0 + b + c·s2` of its source: the (0, 2, 1) permutation of a dense
/// `[d0, d2, d1]` tensor.
fn swaps_last_two(t: &Transpose, dims: [u32; 3]) -> bool {
    let [d0, d1, d2] = dims;
    t.out_dims == dims
        && d1
            .checked_mul(d2)
            .is_some_and(|s0| t.in_strides == [s0, 1, d1])
        && d0.checked_mul(d1).and_then(|x| x.checked_mul(d2)) == Some(t.total)
}

/// The single reader `j` of the value `r` written at `at`, when nothing
/// else reads it and it is not live-out.
fn sole_reader(df: &Dataflow, at: usize, r: &ByteRange) -> Option<usize> {
    let uses = df.uses_after(at, r);
    match (uses.readers.as_slice(), uses.live_out) {
        ([j], false) => Some(*j),
        _ => None,
    }
}

/// The fused thunk for the conv at `i`, the slot it goes to and the slots
/// it replaces.
fn plan(
    thunks: &[Thunk],
    df: &Dataflow,
    i: usize,
) -> Option<(FusedDepthwiseConv1dBsc, usize, Vec<usize>)> {
    let Thunk::Conv2D(cv) = &thunks[i] else {
        return None;
    };
    let unit = |v: u32| v == 1;
    if !(cv.groups == cv.c_in
        && cv.c_in == cv.c_out
        && unit(cv.h)
        && unit(cv.h_out)
        && unit(cv.kh)
        && unit(cv.sh)
        && unit(cv.sw)
        && unit(cv.dh)
        && unit(cv.dw)
        && cv.ph == 0
        && cv.pw == 0
        && cv.kw >= 1
        && cv.w_out >= 1
        && cv.w_out.checked_add(cv.kw - 1) == Some(cv.w))
    {
        return None;
    }
    let (b, c, w, s) = (cv.n, cv.c_in, cv.w, cv.w_out);
    let bytes = |n: [u32; 3]| -> Option<usize> {
        n.iter()
            .try_fold(F32, |acc, &d| acc.checked_mul(d as usize))
    };
    let in_bytes = bytes([b, c, w])?;
    let out_bytes = bytes([b, c, s])?;
    let mut dead = Vec::new();

    // backwards: [copy] ← transpose(BSC → BCW)
    let conv_in = ByteRange::new(cv.src, in_bytes);
    let mut at = df.sole_writer(i, &conv_in)?;
    let mut bcw = conv_in;
    if let Thunk::Copy(cp) = &thunks[at] {
        if cp.dst != cv.src || cp.dt != HalfFlag::F32 || cp.len as usize * F32 != in_bytes {
            return None;
        }
        if sole_reader(df, at, &conv_in) != Some(i) {
            return None;
        }
        dead.push(at);
        bcw = ByteRange::new(cp.src, in_bytes);
        let next = df.sole_writer(at, &bcw)?;
        if sole_reader(df, next, &bcw) != Some(at) {
            return None;
        }
        at = next;
    } else if sole_reader(df, at, &conv_in) != Some(i) {
        return None;
    }
    let Thunk::Transpose(t_in) = &thunks[at] else {
        return None;
    };
    if t_in.dst != bcw.offset || !swaps_last_two(t_in, [b, c, w]) {
        return None;
    }
    let t_in_i = at;
    dead.push(t_in_i);
    let src = ByteRange::new(t_in.src, in_bytes);

    // forwards: [copy] → transpose(BCS → BSC) → [silu]
    let conv_out = ByteRange::new(cv.dst, out_bytes);
    let mut j = sole_reader(df, i, &conv_out)?;
    let mut bcs = conv_out;
    let mut bcs_writer = i;
    if let Thunk::Copy(cp) = &thunks[j] {
        if cp.src != cv.dst
            || cp.dt != HalfFlag::F32
            || cp.len as usize * F32 != out_bytes
            || df.sole_writer(j, &conv_out) != Some(i)
        {
            return None;
        }
        dead.push(j);
        bcs = ByteRange::new(cp.dst, out_bytes);
        bcs_writer = j;
        j = sole_reader(df, j, &bcs)?;
    }
    let Thunk::Transpose(t_out) = &thunks[j] else {
        return None;
    };
    if t_out.src != bcs.offset
        || !swaps_last_two(t_out, [b, s, c])
        || df.sole_writer(j, &bcs) != Some(bcs_writer)
    {
        return None;
    }
    let mut last = j;
    let mut dst = t_out.dst;
    let bsc = ByteRange::new(t_out.dst, out_bytes);
    let silu = match sole_reader(df, j, &bsc).map(|k| (k, &thunks[k])) {
        Some((k, Thunk::ActivationOut(a)))
            if a.act == Activation::Silu
                && a.dt == HalfFlag::F32
                && a.src == t_out.dst
                && a.len as usize * F32 == out_bytes =>
        {
            Some((k, a.dst))
        }
        Some((k, Thunk::ActivationInPlace(a)))
            if a.act == Activation::Silu
                && a.dt == HalfFlag::F32
                && a.data == t_out.dst
                && a.len as usize * F32 == out_bytes =>
        {
            Some((k, a.data))
        }
        _ => None,
    };
    if let Some((k, d)) = silu {
        if df.sole_writer(k, &bsc) != Some(j) {
            return None;
        }
        dead.push(j);
        last = k;
        dst = d;
    }

    // moved reads: the source from t_in, the weight from the conv
    let weight = ByteRange::new(cv.weight, bytes([c, 1, cv.kw])?);
    if df.written_between(t_in_i, last, &src) || df.written_between(i, last, &weight) {
        return None;
    }
    if ByteRange::new(dst, out_bytes).overlaps(&src) {
        return None;
    }
    dead.push(i);
    dead.retain(|&d| d != last);
    Some((
        FusedDepthwiseConv1dBsc {
            src: t_in.src,
            weight: cv.weight,
            dst,
            batch: b,
            width: w,
            out_seq: s,
            channels: c,
            k: cv.kw,
            silu: silu.is_some(),
        },
        last,
        dead,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::passes::test_util::{names, run_only};
    use crate::thunk::conv::Conv2D;
    use crate::thunk::elementwise::{ActivationInPlace, ActivationOut};
    use crate::thunk::shape::Copy;
    use crate::thunk::tag_weight;

    // B = 1, C = 4, k = 3, decode: W = 3, S = 1
    const C: u32 = 4;
    const K: u32 = 3;
    const SRC: usize = 0;
    const BCW: usize = 256;
    const CIN: usize = 512;
    const COUT: usize = 768;
    const BCS: usize = 1024;
    const BSC: usize = 1280;
    const ACT: usize = 1536;

    fn t(src: usize, dst: usize, dims: [u32; 3]) -> Thunk {
        Thunk::Transpose(Transpose {
            src,
            dst,
            total: dims.iter().product(),
            out_dims: dims.to_vec(),
            in_strides: vec![dims[1] * dims[2], 1, dims[1]],
        })
    }

    fn conv(src: usize, dst: usize, s: u32) -> Thunk {
        Thunk::Conv2D(Conv2D {
            src,
            weight: tag_weight(0),
            dst,
            n: 1,
            c_in: C,
            h: 1,
            w: s + K - 1,
            c_out: C,
            h_out: 1,
            w_out: s,
            kh: 1,
            kw: K,
            sh: 1,
            sw: 1,
            ph: 0,
            pw: 0,
            dh: 1,
            dw: 1,
            groups: C,
        })
    }

    fn copy(src: usize, dst: usize, len: u32) -> Thunk {
        Thunk::Copy(Copy {
            src,
            dst,
            len,
            dt: HalfFlag::F32,
        })
    }

    fn silu_out(src: usize, dst: usize, len: u32) -> Thunk {
        Thunk::ActivationOut(ActivationOut {
            src,
            dst,
            len,
            act: Activation::Silu,
            dt: HalfFlag::F32,
        })
    }

    /// The chain as our lowering emits it (reshapes are views).
    fn chain(s: u32) -> Vec<Thunk> {
        let w = s + K - 1;
        vec![
            t(SRC, BCW, [1, C, w]),
            conv(BCW, COUT, s),
            t(COUT, BSC, [1, s, C]),
            silu_out(BSC, ACT, s * C),
        ]
    }

    fn fuse(thunks: Vec<Thunk>, live_out: &[ByteRange]) -> (Vec<Thunk>, usize) {
        let (_, m, t) = run_only(FuseDepthwiseConv1dBsc::NAME, thunks, live_out);
        (t, m)
    }

    fn out(o: usize) -> ByteRange {
        ByteRange::new(o, 256)
    }

    fn fused(t: &[Thunk]) -> &FusedDepthwiseConv1dBsc {
        match t {
            [Thunk::FusedDepthwiseConv1dBsc(f)] => f,
            _ => panic!("not fused: {:?}", names(t)),
        }
    }

    #[test]
    fn decode_chain_with_silu() {
        let (t, m) = fuse(chain(1), &[out(ACT)]);
        assert_eq!(m, 1);
        let f = fused(&t);
        assert_eq!(
            (f.src, f.dst, f.width, f.out_seq, f.k, f.silu),
            (SRC, ACT, 3, 1, K, true)
        );
    }

    #[test]
    fn prefill_chain_and_copies() {
        let s = 5;
        let w = s + K - 1;
        let (t, m) = fuse(
            vec![
                t(SRC, BCW, [1, C, w]),
                copy(BCW, CIN, C * w),
                conv(CIN, COUT, s),
                copy(COUT, BCS, C * s),
                t(BCS, BSC, [1, s, C]),
                Thunk::ActivationInPlace(ActivationInPlace {
                    data: BSC,
                    len: s * C,
                    act: Activation::Silu,
                    dt: HalfFlag::F32,
                }),
            ],
            &[out(BSC)],
        );
        assert_eq!(m, 1);
        let f = fused(&t);
        assert_eq!((f.dst, f.out_seq, f.silu), (BSC, s, true));
    }

    #[test]
    fn without_silu_when_the_result_is_an_output() {
        // BSC is an output: the SiLU stays, the rest fuses
        let (t, m) = fuse(chain(1), &[out(ACT), out(BSC)]);
        assert_eq!(m, 1);
        assert_eq!(
            names(&t),
            vec!["fused_depthwise_conv1d_bsc", "activation_out"]
        );
    }

    #[test]
    fn refuses_intermediate_read_later() {
        let mut c = chain(1);
        c.push(copy(BCW, 2048, 4));
        let (t, m) = fuse(c, &[out(ACT), out(2048)]);
        assert_eq!(m, 0);
        assert_eq!(names(&t).len(), 5);
    }

    #[test]
    fn refuses_conv_output_that_is_an_output() {
        let (_, m) = fuse(chain(1), &[out(ACT), out(COUT)]);
        assert_eq!(m, 0);
    }

    #[test]
    fn refuses_source_written_before_the_last_slot() {
        let mut c = chain(1);
        c.insert(2, copy(2048, SRC + 4, 1));
        let (_, m) = fuse(c, &[out(ACT), out(SRC)]);
        assert_eq!(m, 0);
    }

    #[test]
    fn refuses_non_depthwise_and_padded() {
        let mut c = chain(1);
        if let Thunk::Conv2D(cv) = &mut c[1] {
            cv.groups = 1;
        }
        assert_eq!(fuse(c, &[out(ACT)]).1, 0);
        let mut c = chain(1);
        if let Thunk::Conv2D(cv) = &mut c[1] {
            cv.pw = 1;
        }
        assert_eq!(fuse(c, &[out(ACT)]).1, 0);
    }

    #[test]
    fn refuses_wrong_transpose() {
        let mut c = chain(1);
        c[0] = Thunk::Transpose(Transpose {
            src: SRC,
            dst: BCW,
            total: C * 3,
            out_dims: vec![1, C, 3],
            in_strides: vec![C * 3, 3, 1],
        });
        assert_eq!(fuse(c, &[out(ACT)]).1, 0);
    }
}
