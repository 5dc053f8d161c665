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

kernel_args! {
    UnaryArgs = 8,
    CastArgs = 4,
    BinaryArgs = 8,
    BroadcastArgs = 112,
    RowNormArgs = 16,
    SoftmaxArgs = 8,
    AttnArgs = 88,
    RopeArgs = 32,
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
            ("AttnArgs", size_of::<AttnArgs>()),
            ("RopeArgs", size_of::<RopeArgs>()),
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
