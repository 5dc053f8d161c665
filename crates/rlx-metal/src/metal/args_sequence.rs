//! Argument structs of the sequence kernels (`gdn.metal`, `ssm.metal`,
//! `recurrent.metal`), field for field the structs of `kernels/args.h`.

use super::KernelArgs;

/// `GdnArgs`: gated DeltaNet over `[batch, seq, heads · n]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GdnArgs {
    /// Batch.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// Heads.
    pub heads: u32,
    /// Key / value dim per head (state `[n, n]`).
    pub n: u32,
}

/// `SsmArgs`: Mamba selective scan over `[batch, seq, hidden]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SsmArgs {
    /// Batch.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// Channels.
    pub hidden: u32,
    /// State size.
    pub n: u32,
    /// 1: start from `state` and write the final state back.
    pub has_state: u32,
}

/// `Mamba2Args`: Mamba-2 SSD over `[batch, seq, heads · head_dim]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Mamba2Args {
    /// Batch.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// Heads.
    pub heads: u32,
    /// Channels per head.
    pub head_dim: u32,
    /// State size.
    pub n: u32,
    /// 1: start from `state` and write the final state back.
    pub has_state: u32,
}

/// `RnnArgs`: packed LSTM / GRU / RNN (layout in `recurrent.metal`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RnnArgs {
    /// Batch.
    pub batch: u32,
    /// Sequence length.
    pub seq: u32,
    /// Input features of layer 0.
    pub input_size: u32,
    /// Hidden size.
    pub hidden: u32,
    /// Stacked layers.
    pub layers: u32,
    /// Directions (1 or 2).
    pub dirs: u32,
    /// Row stride of layer 0's `w_ih` blocks.
    pub ih_cols0: u32,
    /// Row stride of later layers' `w_ih` blocks.
    pub ih_cols: u32,
    /// Rows of `dst` per batch item (`seq` + carry rows).
    pub out_rows: u32,
    /// 1: append the final h (and c) rows.
    pub carry: u32,
    /// 1: ReLU instead of tanh (RNN).
    pub relu: u32,
    /// Padding (keeps the struct a multiple of 16 bytes).
    pub _pad: u32,
}

kernel_args! {
    GdnArgs = 16,
    SsmArgs = 20,
    Mamba2Args = 24,
    RnnArgs = 48,
}
