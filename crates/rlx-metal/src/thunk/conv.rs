//! Convolution family on NCHW: conv2d, transposed conv2d, pooling, im2col,
//! nearest 2× upsample and the fused depthwise 1-D conv on `[B, W, C]`.
//!
//! Weights use PyTorch layouts: conv `[c_out, c_in / groups, kh, kw]`,
//! transposed conv `[c_in, c_out / groups, kh, kw]`. A `groups` of 0 is
//! read as 1. No bias operands (bias adds are separate thunks). f32 unless
//! a `dt` field says otherwise.

use super::io::{bytes, ThunkIo, F32};
use super::offsets::Off;
use super::{HalfFlag, ThunkOp};
use rlx_ir::op::ReduceOp;
use serde::{Deserialize, Serialize};
use std::fmt;

/// `c / groups` with a zero group count read as one.
pub(crate) fn per_group(c: u32, groups: u32) -> u32 {
    c / groups.max(1)
}

/// 2-D convolution, f32.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conv2D {
    /// Input `[n, c_in, h, w]`.
    pub src: usize,
    /// Weight `[c_out, c_in / groups, kh, kw]`.
    pub weight: usize,
    /// Output `[n, c_out, h_out, w_out]`.
    pub dst: usize,
    /// Batch.
    pub n: u32,
    /// Input channels.
    pub c_in: u32,
    /// Input height.
    pub h: u32,
    /// Input width.
    pub w: u32,
    /// Output channels.
    pub c_out: u32,
    /// Output height.
    pub h_out: u32,
    /// Output width.
    pub w_out: u32,
    /// Kernel height.
    pub kh: u32,
    /// Kernel width.
    pub kw: u32,
    /// Stride along h.
    pub sh: u32,
    /// Stride along w.
    pub sw: u32,
    /// Padding along h.
    pub ph: u32,
    /// Padding along w.
    pub pw: u32,
    /// Dilation along h.
    pub dh: u32,
    /// Dilation along w.
    pub dw: u32,
    /// Groups.
    pub groups: u32,
}

impl ThunkOp for Conv2D {
    const NAME: &'static str = "conv2d";
    fn io(&self) -> ThunkIo {
        let cig = per_group(self.c_in, self.groups);
        ThunkIo::new()
            .read(self.src, bytes(&[self.n, self.c_in, self.h, self.w], F32))
            .read(
                self.weight,
                bytes(&[self.c_out, cig, self.kh, self.kw], F32),
            )
            .write(
                self.dst,
                bytes(&[self.n, self.c_out, self.h_out, self.w_out], F32),
            )
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{},{},{},{}]->[{},{},{}] k={}x{} s={},{} p={},{} d={},{} g={} src={} w={} dst={}",
            self.n,
            self.c_in,
            self.h,
            self.w,
            self.c_out,
            self.h_out,
            self.w_out,
            self.kh,
            self.kw,
            self.sh,
            self.sw,
            self.ph,
            self.pw,
            self.dh,
            self.dw,
            self.groups,
            Off(self.src),
            Off(self.weight),
            Off(self.dst)
        )
    }
}

/// Transposed 2-D convolution (PyTorch layout, no bias).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConvTranspose2d {
    /// Input `[n, c_in, h, w_in]`.
    pub src: usize,
    /// Weight `[c_in, c_out / groups, kh, kw]`.
    pub weight: usize,
    /// Output `[n, c_out, h_out, w_out]`.
    pub dst: usize,
    /// Batch.
    pub n: u32,
    /// Input channels.
    pub c_in: u32,
    /// Input height.
    pub h: u32,
    /// Input width.
    pub w_in: u32,
    /// Output channels.
    pub c_out: u32,
    /// Output height.
    pub h_out: u32,
    /// Output width.
    pub w_out: u32,
    /// Kernel height.
    pub kh: u32,
    /// Kernel width.
    pub kw: u32,
    /// Stride along h.
    pub sh: u32,
    /// Stride along w.
    pub sw: u32,
    /// Padding along h.
    pub ph: u32,
    /// Padding along w.
    pub pw: u32,
    /// Dilation along h.
    pub dh: u32,
    /// Dilation along w.
    pub dw: u32,
    /// Groups.
    pub groups: u32,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for ConvTranspose2d {
    const NAME: &'static str = "conv_transpose2d";
    fn io(&self) -> ThunkIo {
        let es = self.dt.size();
        let cog = per_group(self.c_out, self.groups);
        ThunkIo::new()
            .read(self.src, bytes(&[self.n, self.c_in, self.h, self.w_in], es))
            .read(self.weight, bytes(&[self.c_in, cog, self.kh, self.kw], es))
            .write(
                self.dst,
                bytes(&[self.n, self.c_out, self.h_out, self.w_out], es),
            )
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{},{},{},{}]->[{},{},{}] k={}x{} s={},{} p={},{} g={} {} src={} w={} dst={}",
            self.n,
            self.c_in,
            self.h,
            self.w_in,
            self.c_out,
            self.h_out,
            self.w_out,
            self.kh,
            self.kw,
            self.sh,
            self.sw,
            self.ph,
            self.pw,
            self.groups,
            self.dt,
            Off(self.src),
            Off(self.weight),
            Off(self.dst)
        )
    }
}

/// Max / mean 2-D pooling, f32: `[n, c, h, w]` → `[n, c, h_out, w_out]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pool2D {
    /// Input.
    pub src: usize,
    /// Output.
    pub dst: usize,
    /// Batch.
    pub n: u32,
    /// Channels.
    pub c: u32,
    /// Input height.
    pub h: u32,
    /// Input width.
    pub w: u32,
    /// Output height.
    pub h_out: u32,
    /// Output width.
    pub w_out: u32,
    /// Window height.
    pub kh: u32,
    /// Window width.
    pub kw: u32,
    /// Stride along h.
    pub sh: u32,
    /// Stride along w.
    pub sw: u32,
    /// Padding along h.
    pub ph: u32,
    /// Padding along w.
    pub pw: u32,
    /// `Max` or `Mean`.
    pub kind: ReduceOp,
}

impl ThunkOp for Pool2D {
    const NAME: &'static str = "pool2d";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(self.src, bytes(&[self.n, self.c, self.h, self.w], F32))
            .write(
                self.dst,
                bytes(&[self.n, self.c, self.h_out, self.w_out], F32),
            )
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} [{},{},{},{}]->[{},{}] k={}x{} s={},{} p={},{} src={} dst={}",
            self.kind.name(),
            self.n,
            self.c,
            self.h,
            self.w,
            self.h_out,
            self.w_out,
            self.kh,
            self.kw,
            self.sh,
            self.sw,
            self.ph,
            self.pw,
            Off(self.src),
            Off(self.dst)
        )
    }
}

/// im2col, f32: `[n, c_in, h, w]` → `[n, c_in · kh · kw, h_out · w_out]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Im2Col {
    /// Input.
    pub x: usize,
    /// Column matrix.
    pub col: usize,
    /// Batch.
    pub n: u32,
    /// Channels.
    pub c_in: u32,
    /// Input height.
    pub h: u32,
    /// Input width.
    pub w: u32,
    /// Output height.
    pub h_out: u32,
    /// Output width.
    pub w_out: u32,
    /// Kernel height.
    pub kh: u32,
    /// Kernel width.
    pub kw: u32,
    /// Stride along h.
    pub sh: u32,
    /// Stride along w.
    pub sw: u32,
    /// Padding along h.
    pub ph: u32,
    /// Padding along w.
    pub pw: u32,
    /// Dilation along h.
    pub dh: u32,
    /// Dilation along w.
    pub dw_dil: u32,
}

impl ThunkOp for Im2Col {
    const NAME: &'static str = "im2col";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(self.x, bytes(&[self.n, self.c_in, self.h, self.w], F32))
            .write(
                self.col,
                bytes(
                    &[self.n, self.c_in, self.kh, self.kw, self.h_out, self.w_out],
                    F32,
                ),
            )
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{},{},{},{}] k={}x{} out={}x{} x={} col={}",
            self.n,
            self.c_in,
            self.h,
            self.w,
            self.kh,
            self.kw,
            self.h_out,
            self.w_out,
            Off(self.x),
            Off(self.col)
        )
    }
}

/// Nearest 2× upsample: `[n, c, h, w]` → `[n, c, 2h, 2w]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResizeNearest2x {
    /// Input.
    pub src: usize,
    /// Output.
    pub dst: usize,
    /// Batch.
    pub n: u32,
    /// Channels.
    pub c: u32,
    /// Input height.
    pub h: u32,
    /// Input width.
    pub w: u32,
    /// Element type.
    pub dt: HalfFlag,
}

impl ThunkOp for ResizeNearest2x {
    const NAME: &'static str = "resize_nearest_2x";
    fn io(&self) -> ThunkIo {
        let src = bytes(&[self.n, self.c, self.h, self.w], self.dt.size());
        ThunkIo::new()
            .read(self.src, src)
            .write(self.dst, src.saturating_mul(4))
    }
    fn safe_for_active_extent(&self) -> bool {
        false
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (n, c, h, w) = (self.n, self.c, self.h, self.w);
        write!(
            f,
            "[{n},{c},{h},{w}] {} src={} dst={}",
            self.dt,
            Off(self.src),
            Off(self.dst)
        )
    }
}

/// Depthwise 1-D conv on `[batch, width, channels]` → `[batch, out_seq,
/// channels]` with weight `[channels, k]` (+ optional SiLU), f32.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FusedDepthwiseConv1dBsc {
    /// Input `[batch, width, channels]`.
    pub src: usize,
    /// Weight `[channels, k]`.
    pub weight: usize,
    /// Output `[batch, out_seq, channels]`.
    pub dst: usize,
    /// Batch.
    pub batch: u32,
    /// Input length.
    pub width: u32,
    /// Output length.
    pub out_seq: u32,
    /// Channels.
    pub channels: u32,
    /// Kernel taps.
    pub k: u32,
    /// Apply SiLU.
    pub silu: bool,
}

impl ThunkOp for FusedDepthwiseConv1dBsc {
    const NAME: &'static str = "fused_depthwise_conv1d_bsc";
    fn io(&self) -> ThunkIo {
        ThunkIo::new()
            .read(
                self.src,
                bytes(&[self.batch, self.width, self.channels], F32),
            )
            .read(self.weight, bytes(&[self.channels, self.k], F32))
            .write(
                self.dst,
                bytes(&[self.batch, self.out_seq, self.channels], F32),
            )
    }
    fn safe_for_active_extent(&self) -> bool {
        true
    }
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let silu = if self.silu { " silu" } else { "" };
        write!(
            f,
            "b={} w={} out={} c={} k={}{silu} src={} w={} dst={}",
            self.batch,
            self.width,
            self.out_seq,
            self.channels,
            self.k,
            Off(self.src),
            Off(self.weight),
            Off(self.dst)
        )
    }
}
