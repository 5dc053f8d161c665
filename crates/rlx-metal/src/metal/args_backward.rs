//! Argument structs of `backward.metal`: the training gradients (mirrored
//! in `kernels/args.h`).

use super::KernelArgs;

/// `AttnBwdArgs`: attention gradient w.r.t. q, k or v.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttnBwdArgs {
    /// Batch.
    pub batch: u32,
    /// Query length.
    pub seq: u32,
    /// Key length.
    pub kv_seq: u32,
    /// Heads (k / v have as many).
    pub heads: u32,
    /// Head dimension.
    pub head_dim: u32,
    /// Mask code (0 none, 1 causal, 2 binary, 3 bias, 4 sliding window).
    pub mask_kind: u32,
    /// Window lookback.
    pub window: u32,
    /// 0 q, 1 k, 2 v.
    pub wrt: u32,
    /// 1 iff `[b, heads, L, d]`.
    pub bhsd: u32,
    /// Score scale `1/√head_dim`.
    pub scale: f32,
}

/// `RmsBwdArgs`: RMSNorm gradient over `[rows, h]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RmsBwdArgs {
    /// Rows.
    pub rows: u32,
    /// Features per row.
    pub h: u32,
    /// Epsilon.
    pub eps: f32,
    /// 0 input, 1 gamma, 2 beta.
    pub wrt: u32,
}

/// `RopeBwdArgs`: RoPE gradient on `[batch, seq, hidden]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RopeBwdArgs {
    /// Batch.
    pub batch: u32,
    /// Sequence.
    pub seq: u32,
    /// Row width.
    pub hidden: u32,
    /// Head dimension.
    pub head_dim: u32,
    /// Rotated dims per head.
    pub n_rot: u32,
    /// Elements of cos (and sin).
    pub cos_len: u32,
}

/// `CumsumBwdArgs`: reverse prefix sum over `[rows, cols]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CumsumBwdArgs {
    /// Rows.
    pub rows: u32,
    /// Columns.
    pub cols: u32,
    /// 1: the forward was exclusive.
    pub exclusive: u32,
}

/// `GatherBwdArgs`: scatter-add of gathered rows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GatherBwdArgs {
    /// Product of dims before the axis.
    pub outer: u32,
    /// Table axis length.
    pub axis_dim: u32,
    /// Indices.
    pub num_idx: u32,
    /// Product of dims after the axis.
    pub trailing: u32,
}

/// `Window2dArgs`: conv2d gradient geometry (NCHW), laid out exactly as
/// [`Conv2dArgs`](super::Conv2dArgs) (the header's `c` is `c_in` here; the
/// header asserts its size).
pub type Window2dArgs = super::Conv2dArgs;

/// `ModBwdArgs`: adaLN / gated-residual gradient geometry.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ModBwdArgs {
    /// Features per row.
    pub h: u32,
    /// Rows per modulation row.
    pub seq_per_mod: u32,
    /// Modulation rows.
    pub mod_rows: u32,
    /// Epsilon (adaLN).
    pub eps: f32,
    /// 1: LayerNorm, 0: RMSNorm (adaLN).
    pub layer_norm: u32,
}

/// `SceArgs`: integer-label softmax cross-entropy over `[n, c]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SceArgs {
    /// Rows.
    pub n: u32,
    /// Classes.
    pub c: u32,
}

kernel_args! {
    AttnBwdArgs = 40,
    RmsBwdArgs = 16,
    RopeBwdArgs = 24,
    CumsumBwdArgs = 12,
    GatherBwdArgs = 16,
    ModBwdArgs = 20,
    SceArgs = 8,
}
