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

/// The 2-D window geometry shared by the convolution thunks ([`Conv2D`],
/// [`ConvTranspose2d`], [`Im2Col`] and the two conv gradients in
/// [`super::backward`]): input `[n, c_in, h, w]`, output `[n, c_out,
/// h_out, w_out]`, kernel `kh × kw`, stride, padding, dilation, groups.
/// Each of those thunks unpacks it with `dims()`; the Metal argument
/// structs and the host kernels' geometry are built from it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConvDims {
    /// Batch.
    pub n: u32,
    /// Input channels.
    pub c_in: u32,
    /// Input height.
    pub h: u32,
    /// Input width.
    pub w: u32,
    /// Output channels (`c_in` for im2col).
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
    /// Groups (1 for im2col; 0 is read as 1 by the sizes below).
    pub groups: u32,
}

impl ConvDims {
    /// Bytes of the input `[n, c_in, h, w]` with `es`-byte elements.
    pub fn x_bytes(&self, es: usize) -> usize {
        bytes(&[self.n, self.c_in, self.h, self.w], es)
    }

    /// Bytes of the output `[n, c_out, h_out, w_out]`.
    pub fn y_bytes(&self, es: usize) -> usize {
        bytes(&[self.n, self.c_out, self.h_out, self.w_out], es)
    }

    /// Bytes of a conv weight `[c_out, c_in / groups, kh, kw]`.
    pub fn weight_bytes(&self, es: usize) -> usize {
        let cig = per_group(self.c_in, self.groups);
        bytes(&[self.c_out, cig, self.kh, self.kw], es)
    }
}

/// Implements `dims()` and `from_dims()` for a conv thunk with operand
/// fields `[$a, $b, $c]` whose input width and width dilation are the
/// fields `$w`, `$dw` (the seed's names differ); `$f: $v` set the other
/// fields in `from_dims`.
macro_rules! conv_dims {
    ($t:ty, [$a:ident, $b:ident, $c:ident], $w:ident, $dw:ident $(, $f:ident: $v:expr)*) => {
        impl $t {
            /// The thunk's [`ConvDims`].
            pub fn dims(&self) -> ConvDims {
                ConvDims {
                    n: self.n,
                    c_in: self.c_in,
                    h: self.h,
                    w: self.$w,
                    c_out: self.c_out,
                    h_out: self.h_out,
                    w_out: self.w_out,
                    kh: self.kh,
                    kw: self.kw,
                    sh: self.sh,
                    sw: self.sw,
                    ph: self.ph,
                    pw: self.pw,
                    dh: self.dh,
                    dw: self.$dw,
                    groups: self.groups,
                }
            }

            #[doc = concat!(
                "The thunk over its three operands with geometry `d`"
                $(, "; `", stringify!($f), ": ", stringify!($v), "`")*,
                "."
            )]
            pub fn from_dims([$a, $b, $c]: [usize; 3], d: ConvDims) -> Self {
                Self {
                    $a,
                    $b,
                    $c,
                    n: d.n,
                    c_in: d.c_in,
                    h: d.h,
                    $w: d.w,
                    c_out: d.c_out,
                    h_out: d.h_out,
                    w_out: d.w_out,
                    kh: d.kh,
                    kw: d.kw,
                    sh: d.sh,
                    sw: d.sw,
                    ph: d.ph,
                    pw: d.pw,
                    dh: d.dh,
                    $dw: d.dw,
                    groups: d.groups,
                    $($f: $v,)*
                }
            }
        }
    };
}
pub(crate) use conv_dims;

conv_dims!(Conv2D, [src, weight, dst], w, dw);
conv_dims!(ConvTranspose2d, [src, weight, dst], w_in, dw, dt: HalfFlag::F32);

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
        let d = self.dims();
        ThunkIo::new()
            .read(self.src, d.x_bytes(F32))
            .read(self.weight, d.weight_bytes(F32))
            .write(self.dst, d.y_bytes(F32))
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
        let (es, d) = (self.dt.size(), self.dims());
        let cog = per_group(self.c_out, self.groups);
        ThunkIo::new()
            .read(self.src, d.x_bytes(es))
            .read(self.weight, bytes(&[self.c_in, cog, self.kh, self.kw], es))
            .write(self.dst, d.y_bytes(es))
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

impl Im2Col {
    /// The im2col of input `x` into `col` with the geometry `d` (its
    /// `c_out` and `groups` unused).
    pub fn from_dims([x, col]: [usize; 2], d: ConvDims) -> Self {
        Im2Col {
            x,
            col,
            n: d.n,
            c_in: d.c_in,
            h: d.h,
            w: d.w,
            h_out: d.h_out,
            w_out: d.w_out,
            kh: d.kh,
            kw: d.kw,
            sh: d.sh,
            sw: d.sw,
            ph: d.ph,
            pw: d.pw,
            dh: d.dh,
            dw_dil: d.dw,
        }
    }

    /// The thunk's [`ConvDims`]: one group, `c_out = c_in`.
    pub fn dims(&self) -> ConvDims {
        ConvDims {
            n: self.n,
            c_in: self.c_in,
            h: self.h,
            w: self.w,
            c_out: self.c_in,
            h_out: self.h_out,
            w_out: self.w_out,
            kh: self.kh,
            kw: self.kw,
            sh: self.sh,
            sw: self.sw,
            ph: self.ph,
            pw: self.pw,
            dh: self.dh,
            dw: self.dw_dil,
            groups: 1,
        }
    }
}

impl ThunkOp for Im2Col {
    const NAME: &'static str = "im2col";
    fn io(&self) -> ThunkIo {
        ThunkIo::new().read(self.x, self.dims().x_bytes(F32)).write(
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
