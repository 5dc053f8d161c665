//! Argument structs of `vision.metal` (the NCHW image kernels), field for
//! field the structs of `kernels/args.h`.

use super::KernelArgs;
use crate::thunk::conv::ConvDims;

/// `Conv2dArgs`: conv2d, transposed conv2d and im2col on NCHW data, and
/// (as [`Window2dArgs`](super::Window2dArgs)) the conv2d gradients
/// (`h`, `w` are the input's size in every case).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Conv2dArgs {
    /// Batch.
    pub n: u32,
    /// Input channels.
    pub c_in: u32,
    /// Input height.
    pub h: u32,
    /// Input width.
    pub w: u32,
    /// Output channels (unused by im2col).
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
    /// Groups (at least 1; unused by im2col).
    pub groups: u32,
}

/// `Pool2dArgs`: max / mean pooling, the max-pool argmax and gradient.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Pool2dArgs {
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
}

/// `Resize2xArgs`: nearest 2× upsample of `planes` `[h, w]` planes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Resize2xArgs {
    /// Planes (`n · c`).
    pub planes: u32,
    /// Input height.
    pub h: u32,
    /// Input width.
    pub w: u32,
}

/// `LayerNorm2dArgs`: LayerNorm across the channels of NCHW data.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LayerNorm2dArgs {
    /// Batch.
    pub n: u32,
    /// Channels.
    pub c: u32,
    /// Positions per channel (`h · w`).
    pub hw: u32,
    /// Epsilon.
    pub eps: f32,
}

impl From<ConvDims> for Conv2dArgs {
    fn from(d: ConvDims) -> Self {
        Conv2dArgs {
            n: d.n,
            c_in: d.c_in,
            h: d.h,
            w: d.w,
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
            dw: d.dw,
            groups: d.groups,
        }
    }
}

kernel_args! {
    Conv2dArgs = 64,
    Pool2dArgs = 48,
    Resize2xArgs = 12,
    LayerNorm2dArgs = 16,
}
