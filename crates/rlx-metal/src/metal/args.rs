//! Kernel argument structs, field for field the structs of
//! `kernels/args.h` (`[[buffer(0)]]` of every dispatch). All fields are
//! 4 bytes wide, so there is no padding and [`KernelArgs::as_bytes`] is
//! the exact bytes the kernel reads. Sizes are asserted below and in the
//! header; a test checks that both sides assert the same numbers.

/// Highest rank of a broadcasting binary op (`RLX_MAX_RANK`).
pub const MAX_RANK: usize = 8;

/// A `#[repr(C)]` struct of 4-byte fields that a kernel reads as its args.
pub trait KernelArgs: Copy {
    /// The struct's bytes, as `setBytes` passes them.
    fn as_bytes(&self) -> &[u8];
}

macro_rules! kernel_args {
    ($($t:ident = $size:expr),* $(,)?) => {$(
        const _: () = assert!(
            std::mem::size_of::<$t>() == $size && std::mem::align_of::<$t>() == 4
        );
        impl KernelArgs for $t {
            fn as_bytes(&self) -> &[u8] {
                // SAFETY: repr(C), only u32/f32 fields (asserted size: no
                // padding), so every byte is initialised.
                unsafe {
                    std::slice::from_raw_parts(
                        (self as *const $t).cast::<u8>(),
                        std::mem::size_of::<$t>(),
                    )
                }
            }
        }
    )*};
}

/// `UnaryArgs`: `dst[i] = act(src[i])`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UnaryArgs {
    /// Elements.
    pub len: u32,
    /// Activation code ([`act_code`]).
    pub op: u32,
}

/// `CastArgs`: `dst[i] = convert(src[i])`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CastArgs {
    /// Elements.
    pub len: u32,
}

/// `BinaryArgs`: `dst[i] = lhs[i] op rhs[i]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BinaryArgs {
    /// Elements.
    pub len: u32,
    /// Binary op code ([`binary_code`]).
    pub op: u32,
}

/// `BroadcastArgs`: broadcasting binary op over per-axis element strides.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BroadcastArgs {
    /// Output elements.
    pub len: u32,
    /// Binary op code ([`binary_code`]).
    pub op: u32,
    /// Rank (entries of the arrays that count).
    pub rank: u32,
    /// Padding (keeps the arrays 16-byte aligned).
    pub _pad: u32,
    /// Output dims.
    pub out_dims: [u32; MAX_RANK],
    /// Left operand's element stride per output axis (0 = broadcast).
    pub lhs_strides: [u32; MAX_RANK],
    /// Right operand's element stride per output axis (0 = broadcast).
    pub rhs_strides: [u32; MAX_RANK],
}

/// `RowNormArgs`: row norms over `[rows, h]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RowNormArgs {
    /// Rows.
    pub rows: u32,
    /// Features per row.
    pub h: u32,
    /// Epsilon.
    pub eps: f32,
    /// Residual norms: 1 if `bias` is added.
    pub has_bias: u32,
}

/// `SoftmaxArgs`: softmax over the last axis of `[rows, cols]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SoftmaxArgs {
    /// Rows.
    pub rows: u32,
    /// Columns (softmax axis).
    pub cols: u32,
}

/// `QuantArgs`: `dst[m, n] = x[m, k] @ dequant(w)ᵀ` on packed GGUF rows.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QuantArgs {
    /// Rows of `x`.
    pub m: u32,
    /// Reduction length.
    pub k: u32,
    /// Output features (weight rows).
    pub n: u32,
    /// Bytes of one packed weight row.
    pub row_bytes: u32,
    /// 1 if `x` is f16.
    pub x_f16: u32,
    /// 1 if `dst` is f16.
    pub dst_f16: u32,
}

/// `MlpArgs`: the fused decode-MLP GEMVs (`gate_up_*`, `down_residual_*`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MlpArgs {
    /// Reduction length.
    pub k: u32,
    /// Outputs (weight rows).
    pub n: u32,
    /// Bytes of one packed weight row.
    pub row_bytes: u32,
    /// 1 if `x` is f16.
    pub x_f16: u32,
    /// 1 if `dst` is f16.
    pub dst_f16: u32,
    /// 1 if `res` is f16 (down only).
    pub res_f16: u32,
    /// Gating of gate / up: 0 silu, 1 tanh-GELU.
    pub op: u32,
}

/// `MatmulArgs`: `c[z] = act(a[z] @ b[z] + bias)` for `z < batch`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MatmulArgs {
    /// Rows of `a` and `c`.
    pub m: u32,
    /// Reduction length.
    pub k: u32,
    /// Columns of `b` and `c`.
    pub n: u32,
    /// Batch count (grid z).
    pub batch: u32,
    /// Elements between consecutive `a` matrices (0 = shared).
    pub a_batch_stride: u32,
    /// Elements between consecutive `b` matrices (0 = shared).
    pub b_batch_stride: u32,
    /// 1 if `bias [n]` is added.
    pub has_bias: u32,
    /// 1 if `act` is applied.
    pub has_act: u32,
    /// Activation code ([`act_code`]).
    pub act: u32,
}

/// `BiasAddArgs`: `dst[i, j] = src[i, j] + bias[j]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BiasAddArgs {
    /// Rows.
    pub m: u32,
    /// Columns (bias length).
    pub n: u32,
}

/// Most inputs of a region (`RLX_REGION_INPUTS`).
pub const REGION_INPUTS: usize = 16;
/// Most steps of a region chain (`RLX_REGION_STEPS`).
pub const REGION_STEPS: usize = 32;
/// Input slots of a batched region (`RLX_REGION_SLOTS`).
pub const REGION_SLOTS: usize = 64;

/// `RegionArgs`: a chain of steps over `num_batch` slices (see `args.h`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RegionArgs {
    /// Elements per slice.
    pub slice_len: u32,
    /// Slices (grid y).
    pub num_batch: u32,
    /// Steps used.
    pub num_steps: u32,
    /// Inputs per slice.
    pub n_in: u32,
    /// Output stride between slices, in elements.
    pub slice_elems: u32,
    /// Bit `i`: input `i` is one element.
    pub scalar_mask: u32,
    /// Per input: 0 dense, `m > 0` read element `g % m`.
    pub modulus: [u32; REGION_INPUTS],
    /// Slice-major f32 arena element indices of the inputs.
    pub input_offs: [u32; REGION_SLOTS],
    /// Steps `[kind, sub, a, b]`.
    pub chain: [u32; 4 * REGION_STEPS],
}

impl Default for RegionArgs {
    fn default() -> Self {
        RegionArgs {
            slice_len: 0,
            num_batch: 0,
            num_steps: 0,
            n_in: 0,
            slice_elems: 0,
            scalar_mask: 0,
            modulus: [0; REGION_INPUTS],
            input_offs: [0; REGION_SLOTS],
            chain: [0; 4 * REGION_STEPS],
        }
    }
}

/// `FusedActArgs`: `dst = act((lhs op0 rhs0) op1 rhs1)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FusedActArgs {
    /// Elements.
    pub len: u32,
    /// First binary op code ([`binary_code`]).
    pub op0: u32,
    /// Second binary op code (ternary kernels).
    pub op1: u32,
    /// 1 if `act` is applied.
    pub has_act: u32,
    /// Activation code ([`act_code`]).
    pub act: u32,
}

/// `CompareArgs`: `dst = (lhs op rhs) ? 1 : 0`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CompareArgs {
    /// Elements.
    pub len: u32,
    /// Comparison code ([`cmp_code`]).
    pub op: u32,
    /// 1 if `lhs` is one element.
    pub lhs_scalar: u32,
    /// 1 if `rhs` is one element.
    pub rhs_scalar: u32,
}

/// `WhereArgs`: `dst = cond != 0 ? on_true : on_false`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WhereArgs {
    /// Elements.
    pub len: u32,
    /// 1 if `cond` is one element.
    pub cond_scalar: u32,
    /// 1 if `on_true` is one element.
    pub true_scalar: u32,
    /// 1 if `on_false` is one element.
    pub false_scalar: u32,
}

/// `SwigluArgs`: `[rows, 2·n_half]` → `[rows, n_half]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SwigluArgs {
    /// Output elements.
    pub total: u32,
    /// Half width of a source row.
    pub n_half: u32,
    /// 1 if the gate is the first half.
    pub gate_first: u32,
}

/// `RlxCmp` code of a comparison (`args.h`): `rlx_ir::op::CmpOp` order.
pub fn cmp_code(op: rlx_ir::op::CmpOp) -> u32 {
    use rlx_ir::op::CmpOp::*;
    match op {
        Eq => 0,
        Ne => 1,
        Lt => 2,
        Le => 3,
        Gt => 4,
        Ge => 5,
    }
}

/// `AttnArgs`: SDPA over strided q / k / v / out rows (see `args.h`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttnArgs {
    /// Batch.
    pub batch: u32,
    /// Query rows.
    pub seq: u32,
    /// Key / value capacity.
    pub kv_seq: u32,
    /// Query heads.
    pub heads: u32,
    /// Key / value heads.
    pub kv_heads: u32,
    /// Head dimension.
    pub head_dim: u32,
    /// Mask code (thunk::attention module docs).
    pub mask_kind: u32,
    /// Sliding-window lookback.
    pub window: u32,
    /// Score scale (resolved, never 0).
    pub scale: f32,
    /// Logit softcap (0 = off).
    pub softcap: f32,
    /// 1 when buffer(5) holds the run-time key length.
    pub has_kv_len: u32,
    /// 1: NeoX-rotate q and k with the cos / sin tables.
    pub rope: u32,
    /// q element stride per batch.
    pub q_sb: u32,
    /// q element stride per query row.
    pub q_ss: u32,
    /// q element stride per head.
    pub q_sh: u32,
    /// k / v element stride per batch.
    pub kv_sb: u32,
    /// k / v element stride per key row.
    pub kv_ss: u32,
    /// k / v element stride per kv head.
    pub kv_sh: u32,
    /// out element stride per batch.
    pub o_sb: u32,
    /// out element stride per query row.
    pub o_ss: u32,
    /// out element stride per head.
    pub o_sh: u32,
    /// Prefill: keys per staged block.
    pub bk: u32,
}

/// `RopeArgs`: rotary embedding into a dense `[rows, hidden]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RopeArgs {
    /// Output elements (`rows · hidden`).
    pub len: u32,
    /// Sequence length (table row = token row mod seq).
    pub seq: u32,
    /// Row width.
    pub hidden: u32,
    /// Head dimension.
    pub head_dim: u32,
    /// Rotated dims per head.
    pub n_rot: u32,
    /// Elements between source rows.
    pub src_stride: u32,
    /// 1: tables have one row per token.
    pub per_token: u32,
    /// 1: GPT-J interleaved pairs, 0: NeoX.
    pub interleaved: u32,
}

/// Most pieces of one split / concat dispatch (`RLX_MAX_PIECES`).
pub const MAX_PIECES: usize = 8;

/// `CopyArgs`: `dst[i] = src[i]` over words.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CopyArgs {
    /// Words.
    pub len: u32,
}

/// `NarrowArgs`: `dst [rows, len] = src [rows, src_cols][:, start..]` (words).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct NarrowArgs {
    /// Rows.
    pub rows: u32,
    /// Source row width.
    pub src_cols: u32,
    /// First column.
    pub start: u32,
    /// Columns kept.
    pub len: u32,
}

/// `SplitArgs`: segment `s` writes `[rows, len[s]]` from column `start[s]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SplitArgs {
    /// Rows.
    pub rows: u32,
    /// Source row width.
    pub src_cols: u32,
    /// Segments (at most [`MAX_PIECES`]).
    pub count: u32,
    /// Padding.
    pub _pad: u32,
    /// First column per segment.
    pub start: [u32; MAX_PIECES],
    /// Columns per segment.
    pub len: [u32; MAX_PIECES],
}

/// `ConcatArgs`: input `k` `[outer, cols[k]]` lands at column `at[k]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ConcatArgs {
    /// Rows.
    pub outer: u32,
    /// Destination row width.
    pub dst_cols: u32,
    /// Inputs (at most [`MAX_PIECES`]).
    pub count: u32,
    /// Padding.
    pub _pad: u32,
    /// Destination column of each input.
    pub at: [u32; MAX_PIECES],
    /// Row width of each input.
    pub cols: [u32; MAX_PIECES],
}

/// `StridedArgs`: strided gather (transpose / broadcast) of 4-byte words.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StridedArgs {
    /// Output words.
    pub len: u32,
    /// Rank.
    pub rank: u32,
    /// Padding.
    pub _pad: [u32; 2],
    /// Output dims.
    pub out_dims: [u32; MAX_RANK],
    /// Input stride per output axis (0 = broadcast).
    pub in_strides: [u32; MAX_RANK],
}

/// `ReverseArgs`: flip the axes of `rev_mask` (bit `d` = axis `d`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReverseArgs {
    /// Elements.
    pub len: u32,
    /// Rank.
    pub rank: u32,
    /// Bit `d` set: axis `d` is flipped.
    pub rev_mask: u32,
    /// Padding.
    pub _pad: u32,
    /// Dims.
    pub dims: [u32; MAX_RANK],
}

/// `GatherArgs`: `dst [outer, num_idx, trailing] = table[:, idx, :]` (words).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GatherArgs {
    /// Product of the dims before the axis.
    pub outer: u32,
    /// Length of the gathered axis.
    pub axis_dim: u32,
    /// Indices.
    pub num_idx: u32,
    /// Words per gathered row.
    pub trailing: u32,
    /// 1: negative indices count from the end.
    pub signed_idx: u32,
    /// Padding.
    pub _pad: [u32; 3],
}

/// `ScatterAddArgs`: `dst = 0; dst[idx[i], :] += updates[i, :]` (f32).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ScatterAddArgs {
    /// Update rows.
    pub num: u32,
    /// Output rows.
    pub out_dim: u32,
    /// Elements per row.
    pub trailing: u32,
}

/// `GatherElemArgs`: ONNX GatherElements of `rank`-D data.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GatherElemArgs {
    /// Elements of `dst` (and of the indices).
    pub len: u32,
    /// Dims of data and indices.
    pub rank: u32,
    /// The gathered axis.
    pub axis: u32,
    /// Data's extent along `axis`.
    pub axis_dim: u32,
    /// The indices' dims (= dst's).
    pub idx_dims: [u32; MAX_RANK],
    /// Data's element strides.
    pub data_strides: [u32; MAX_RANK],
}

/// `ScatterNdArgs`: in-place ScatterND of `block`-word blocks.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ScatterNdArgs {
    /// Index tuples (update blocks).
    pub tuples: u32,
    /// Indices per tuple.
    pub q: u32,
    /// Words per block.
    pub block: u32,
    /// Padding.
    pub _pad: u32,
    /// The first `q` data dims.
    pub dims: [u32; MAX_RANK],
}

/// `ReduceArgs`: reduce the middle axis of `[outer, reduced, inner]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReduceArgs {
    /// Product of the dims before the axis.
    pub outer: u32,
    /// Reduced axis length.
    pub reduced: u32,
    /// Product of the dims after the axis.
    pub inner: u32,
    /// Reduce op code ([`reduce_code`]).
    pub op: u32,
}

/// `ArgReduceArgs`: first arg max / min of the middle axis.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ArgReduceArgs {
    /// Product of the dims before the axis.
    pub outer: u32,
    /// Reduced axis length.
    pub reduced: u32,
    /// Product of the dims after the axis.
    pub inner: u32,
    /// 1: arg max, 0: arg min.
    pub is_max: u32,
}

/// `CumsumArgs`: running sum along the last axis of `[rows, cols]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CumsumArgs {
    /// Rows.
    pub rows: u32,
    /// Columns (scanned axis).
    pub cols: u32,
    /// 1: exclusive (shifted by one, first element 0).
    pub exclusive: u32,
}

/// `DwConv1dArgs`: depthwise causal 1-D conv on `[batch, width, channels]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DwConv1dArgs {
    /// Batch.
    pub batch: u32,
    /// Input length.
    pub width: u32,
    /// Output length (`width - k + 1`).
    pub out_seq: u32,
    /// Channels.
    pub channels: u32,
    /// Taps.
    pub k: u32,
    /// 1: SiLU of the result.
    pub silu: u32,
}

/// `TopKArgs`: top-k indices of each row of `[outer, n]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TopKArgs {
    /// Rows.
    pub outer: u32,
    /// Row length.
    pub n: u32,
    /// Indices kept per row.
    pub k: u32,
}

/// `ModNormArgs`: DiT modulated norms / gated residual over `[rows, h]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ModNormArgs {
    /// Rows.
    pub rows: u32,
    /// Features per row.
    pub h: u32,
    /// Epsilon.
    pub eps: f32,
    /// AdaLayerNorm: 1 LayerNorm, 0 RMSNorm.
    pub layer_norm: u32,
    /// 1: modulation row = x row.
    pub same: u32,
    /// Lead dims in `x_lead` / `mod_stride`.
    pub rank: u32,
    /// Padding.
    pub _pad: [u32; 2],
    /// x's lead dims.
    pub x_lead: [u32; MAX_RANK],
    /// Modulation-row stride per lead dim (0 = broadcast).
    pub mod_stride: [u32; MAX_RANK],
}

/// `GroupNormArgs`: GroupNorm over contiguous (sample, group) blocks.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GroupNormArgs {
    /// Groups in all (samples · groups).
    pub count: u32,
    /// Groups per sample.
    pub groups: u32,
    /// Channels per group.
    pub cg: u32,
    /// Positions per channel (h · w).
    pub hw: u32,
    /// Epsilon.
    pub eps: f32,
}

/// `RlxReduce` code of a reduce op (`args.h`, rlx_ir order).
pub fn reduce_code(op: rlx_ir::op::ReduceOp) -> u32 {
    use rlx_ir::op::ReduceOp::*;
    match op {
        Sum => 0,
        Mean => 1,
        Max => 2,
        Min => 3,
        Prod => 4,
    }
}

kernel_args! {
    UnaryArgs = 8,
    CastArgs = 4,
    BinaryArgs = 8,
    BroadcastArgs = 112,
    RowNormArgs = 16,
    SoftmaxArgs = 8,
    QuantArgs = 24,
    MlpArgs = 28,
    MatmulArgs = 36,
    BiasAddArgs = 8,
    RegionArgs = 856,
    FusedActArgs = 20,
    CompareArgs = 16,
    WhereArgs = 16,
    SwigluArgs = 12,
    AttnArgs = 88,
    RopeArgs = 32,
    CopyArgs = 4,
    NarrowArgs = 16,
    SplitArgs = 80,
    ConcatArgs = 80,
    StridedArgs = 80,
    ReverseArgs = 48,
    GatherArgs = 32,
    ScatterAddArgs = 12,
    ScatterNdArgs = 48,
    GatherElemArgs = 80,
    ReduceArgs = 16,
    ArgReduceArgs = 16,
    CumsumArgs = 12,
    DwConv1dArgs = 24,
    TopKArgs = 12,
    ModNormArgs = 96,
    GroupNormArgs = 20,
}

#[path = "args_sequence.rs"]
mod sequence;
pub use sequence::{GdnArgs, Mamba2Args, RnnArgs, SsmArgs};
#[path = "args_misc.rs"]
mod misc;
pub use misc::{AxialRopeArgs, RngArgs, SpdArgs, SpdBiMapArgs, VqArgs};

/// `RlxAct` / `RlxBin` codes (`args.h`): the region chain encoding's
/// codes, one table for both.
pub use crate::thunk::region::{act_code, binop_code as binary_code};
#[path = "args_vision.rs"]
mod vision;
pub use vision::{Conv2dArgs, LayerNorm2dArgs, Pool2dArgs, Resize2xArgs};
#[path = "args_quant_formats.rs"]
mod quant_formats;
pub use quant_formats::{QuantFormatArgs, ScaledArgs};
#[path = "args_moe.rs"]
mod moe;
pub use moe::MoeArgs;
#[path = "args_signal.rs"]
mod signal;
pub use signal::{FftArgs, LogMelArgs, WelchArgs};
#[path = "args_splat.rs"]
mod splat;
pub use splat::{SplatArgs, SplatBwdArgs};
#[path = "args_backward.rs"]
mod backward;
pub use backward::{
    AttnBwdArgs, CumsumBwdArgs, GatherBwdArgs, ModBwdArgs, RmsBwdArgs, RopeBwdArgs, SceArgs,
    Window2dArgs,
};
#[path = "args_decode.rs"]
mod decode;
pub use decode::{
    HeadGemvArgs, HG_BIAS, HG_CACHE, HG_CACHE_F16, HG_HNORM, HG_INTERLEAVED, HG_NORM, HG_POST,
    HG_RAW, HG_ROPE, HG_WRITE_S,
};
#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
