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
    CopyArgs = 4,
    NarrowArgs = 16,
    SplitArgs = 80,
    ConcatArgs = 80,
    StridedArgs = 80,
    ReverseArgs = 48,
    GatherArgs = 32,
    ScatterAddArgs = 12,
    ScatterNdArgs = 48,
    ReduceArgs = 16,
    ArgReduceArgs = 16,
    CumsumArgs = 12,
    DwConv1dArgs = 24,
    TopKArgs = 12,
    ModNormArgs = 96,
    GroupNormArgs = 20,
}

/// `RlxAct` / `RlxBin` codes (`args.h`): the region chain encoding's
/// codes, one table for both.
pub use crate::thunk::region::{act_code, binop_code as binary_code};

#[cfg(test)]
mod tests {
    use super::*;
    use rlx_ir::op::BinaryOp;
    use rlx_ir::op::ALL_ACTIVATIONS;

    /// `static_assert(sizeof(Name) == N && alignof(Name) == 4` lines of args.h.
    fn header_sizes() -> Vec<(String, usize)> {
        super::super::kernels::ARGS_H
            .lines()
            .filter_map(|l| {
                let rest = l.trim().strip_prefix("static_assert(sizeof(")?;
                let (name, rest) = rest.split_once(')')?;
                let n = rest.trim().strip_prefix("==")?.split_whitespace().next()?;
                assert!(l.contains(&format!("alignof({name}) == 4")), "{l}");
                Some((name.to_string(), n.parse().ok()?))
            })
            .collect()
    }

    #[test]
    fn header_and_rust_assert_the_same_layouts() {
        use std::mem::size_of;
        let rust = [
            ("UnaryArgs", size_of::<UnaryArgs>()),
            ("CastArgs", size_of::<CastArgs>()),
            ("BinaryArgs", size_of::<BinaryArgs>()),
            ("BroadcastArgs", size_of::<BroadcastArgs>()),
            ("RowNormArgs", size_of::<RowNormArgs>()),
            ("SoftmaxArgs", size_of::<SoftmaxArgs>()),
            ("CopyArgs", size_of::<CopyArgs>()),
            ("NarrowArgs", size_of::<NarrowArgs>()),
            ("SplitArgs", size_of::<SplitArgs>()),
            ("ConcatArgs", size_of::<ConcatArgs>()),
            ("StridedArgs", size_of::<StridedArgs>()),
            ("ReverseArgs", size_of::<ReverseArgs>()),
            ("GatherArgs", size_of::<GatherArgs>()),
            ("ScatterAddArgs", size_of::<ScatterAddArgs>()),
            ("ScatterNdArgs", size_of::<ScatterNdArgs>()),
            ("ReduceArgs", size_of::<ReduceArgs>()),
            ("ArgReduceArgs", size_of::<ArgReduceArgs>()),
            ("CumsumArgs", size_of::<CumsumArgs>()),
            ("DwConv1dArgs", size_of::<DwConv1dArgs>()),
            ("TopKArgs", size_of::<TopKArgs>()),
            ("ModNormArgs", size_of::<ModNormArgs>()),
            ("GroupNormArgs", size_of::<GroupNormArgs>()),
        ];
        let header = header_sizes();
        assert_eq!(header.len(), rust.len(), "{header:?}");
        for (name, size) in rust {
            let h = header.iter().find(|(n, _)| n == name);
            assert_eq!(h.map(|x| x.1), Some(size), "{name}");
        }
    }

    #[test]
    fn codes_match_the_header_enums() {
        for a in ALL_ACTIVATIONS {
            let line = format!("RLX_ACT_{} = {},", a.name().to_uppercase(), act_code(a));
            assert!(super::super::kernels::ARGS_H.contains(&line), "{line}");
        }
        for op in [
            BinaryOp::Add,
            BinaryOp::Sub,
            BinaryOp::Mul,
            BinaryOp::Div,
            BinaryOp::Max,
            BinaryOp::Min,
            BinaryOp::Pow,
        ] {
            let line = format!(
                "RLX_BIN_{} = {},",
                op.name().to_uppercase(),
                binary_code(op)
            );
            assert!(super::super::kernels::ARGS_H.contains(&line), "{line}");
        }
    }

    #[test]
    fn reduce_codes_match_the_header() {
        use rlx_ir::op::ReduceOp;
        for op in [
            ReduceOp::Sum,
            ReduceOp::Mean,
            ReduceOp::Max,
            ReduceOp::Min,
            ReduceOp::Prod,
        ] {
            let line = format!(
                "RLX_RED_{} = {},",
                op.name().to_uppercase(),
                reduce_code(op)
            );
            assert!(super::super::kernels::ARGS_H.contains(&line), "{line}");
        }
    }

    #[test]
    fn as_bytes_is_the_field_order() {
        let a = RowNormArgs {
            rows: 3,
            h: 5,
            eps: 1e-6,
            has_bias: 1,
        };
        let b = a.as_bytes();
        assert_eq!(&b[0..4], 3u32.to_ne_bytes());
        assert_eq!(&b[4..8], 5u32.to_ne_bytes());
        assert_eq!(&b[8..12], 1e-6f32.to_ne_bytes());
        assert_eq!(&b[12..16], 1u32.to_ne_bytes());
    }
}
