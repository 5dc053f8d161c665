//! The thunk set: a pre-compiled command over byte offsets, one per
//! dispatch (or host call) of a compiled schedule.
//!
//! Each [`Thunk`] variant wraps a plain-data struct from its family module
//! ([`Thunk::Sgemm`] wraps [`matmul::Sgemm`]). The structs carry offsets and
//! dimensions only; every one implements [`ThunkOp`]: the seed's name
//! string, a one-line description, the seed's active-extent predicate and
//! [`ThunkOp::io`], the exact byte ranges read and written.
//!
//! # Offsets
//!
//! Activation-arena offsets are plain byte offsets; weights offsets carry
//! bit 63 plus a segment index ([`offsets::tag_segment`]); state-buffer
//! offsets carry bit 62 ([`offsets::tag_state`]). Offsets beyond 4 GiB are
//! legal.
//!
//! # Size conventions used by `io()`
//!
//! The seed leaves many sizes implicit; these are the rules every family
//! follows (each struct's doc states its own layout):
//!
//! * Element size comes from the thunk's [`HalfFlag`] / [`DType`] field;
//!   a thunk without one is f32 (the seed's f32-only kernels).
//! * Index, label and token buffers are 4-byte i32 elements: Gather /
//!   GatherAxis / ScatterAdd / GatherBackward indices, GroupedMatMul
//!   `expert_idx`, softmax-cross-entropy labels, TopK / ArgReduce / Sample /
//!   VqAssign outputs, [`indexing::IndexingThunk`] indices.
//! * Every operand a thunk names is read in full, except optional operands
//!   whose flag is off (bias with `has_bias = false`, rope tables with
//!   `has_rope = 0`, the mask of attention kinds other than 2 and 3, zero
//!   points of symmetric schemes). Attention's `mask_kind` 2 (custom) reads
//!   `[batch, seq, kv_seq]` elements, kind 3 (bias) reads
//!   `[batch, heads, seq, kv_seq]`, both in the thunk's element type.
//! * Quantised weights read `rows * scheme.row_bytes(k)` bytes; a `k` that
//!   is not a multiple of the block size counts whole blocks (rounded up).
//! * Strided reads (Narrow, SplitLastAxis, Rope with a row stride, LogMel)
//!   are reported row by row, touching rows merged into one range; past
//!   [`io::MAX_ROW_RANGES`] rows one covering range is reported instead.
//! * Region thunks keep the seed's `u32` f32-element input indices (inputs
//!   below 16 GiB); see [`region`] for their encoding and slice layout.
//! * Dynamic gathers (embedding tables, expert stacks) report the whole
//!   table: which rows are read is only known at run time. For that,
//!   [`indexing::Gather`] carries one field the seed lacks, `table_rows`.
//! * Scatters that zero their output first (ScatterAdd, GatherBackward)
//!   write it without reading it.
//! * Ranges are listed in operand order; empty ranges are left out; an
//!   in-place operand appears in both `reads` and `writes`.
//! * Arithmetic saturates: a malformed thunk gives a huge range, never a
//!   panic.

pub mod attention;
pub mod backward;
pub mod binary;
pub mod conv;
pub mod elementwise;
pub mod fused;
pub mod host;
pub mod indexing;
pub mod io;
pub mod matmul;
pub mod norm;
pub mod offsets;
pub mod quant;
pub mod reduce;
pub mod region;
pub mod sequence;
pub mod shape;
pub mod signal;
pub mod splat;

#[cfg(test)]
mod tests;

pub use io::{ByteRange, ThunkIo};
pub use offsets::{
    buffer_of, is_arena, is_state, is_weight, raw_offset, segment, tag_segment, tag_state,
    tag_weight, Buf, Off,
};

use rlx_ir::{DType, RngOptions};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Element type of the seed's f32/f16 kernels. Every dtype other than
/// `F16` maps to `F32` (the seed's Metal kernels widen the rest to f32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HalfFlag {
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
}

impl HalfFlag {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            HalfFlag::F32 => 4,
            HalfFlag::F16 => 2,
        }
    }

    /// `F16` when `half` is set, else `F32`.
    pub fn from_half(half: bool) -> Self {
        if half {
            HalfFlag::F16
        } else {
            HalfFlag::F32
        }
    }
}

impl From<DType> for HalfFlag {
    fn from(d: DType) -> Self {
        match d {
            DType::F16 => HalfFlag::F16,
            _ => HalfFlag::F32,
        }
    }
}

impl fmt::Display for HalfFlag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HalfFlag::F32 => "f32",
            HalfFlag::F16 => "f16",
        })
    }
}

/// Behaviour shared by every thunk struct.
pub trait ThunkOp {
    /// The seed's name string (`"sgemm"`, `"split_lastax"`).
    const NAME: &'static str;

    /// Exact byte ranges read and written (see the module docs for sizes).
    fn io(&self) -> ThunkIo;

    /// True when the thunk stays correct when a schedule compiled for the
    /// full extent runs on an active (smaller) leading extent, as the seed
    /// defines per variant.
    fn safe_for_active_extent(&self) -> bool;

    /// The description after the name: key dims, then offsets
    /// (`m=1 k=576 n=1536 a=@0 b=W1@0 c=@4096`). One line.
    fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

/// Defines [`Thunk`], its dispatch methods and `From` conversions from the
/// per-family structs, from one list of `module::Variant`.
macro_rules! define_thunks {
    ($($module:ident :: $variant:ident),* $(,)?) => {
        /// One command of a compiled schedule. See the module docs.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub enum Thunk {
            /// Does nothing (the slot of a thunk a pass removed).
            Nop,
            $(
                #[doc = concat!("See [`", stringify!($module), "::", stringify!($variant), "`].")]
                $variant($module::$variant),
            )*
        }

        /// Number of thunk variants, `Nop` included.
        pub const THUNK_VARIANTS: usize = 1 $(+ { let _ = stringify!($variant); 1 })*;

        /// Every variant, `Nop` first, as `(variant identifier, seed name)`
        /// (`("Sgemm", "sgemm")`), in declaration order.
        pub const THUNK_KINDS: [(&str, &str); THUNK_VARIANTS] = [
            ("Nop", "nop"),
            $((stringify!($variant), <$module::$variant as ThunkOp>::NAME),)*
        ];

        impl Thunk {
            /// The seed's name string for this variant.
            pub fn name(&self) -> &'static str {
                match self {
                    Thunk::Nop => "nop",
                    $(Thunk::$variant(_) => <$module::$variant as ThunkOp>::NAME,)*
                }
            }

            /// Exact byte ranges read and written.
            pub fn io(&self) -> ThunkIo {
                match self {
                    Thunk::Nop => ThunkIo::new(),
                    $(Thunk::$variant(t) => t.io(),)*
                }
            }

            /// The seed's active-extent predicate.
            pub fn safe_for_active_extent(&self) -> bool {
                match self {
                    Thunk::Nop => true,
                    $(Thunk::$variant(t) => t.safe_for_active_extent(),)*
                }
            }

            fn fmt_fields(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    Thunk::Nop => Ok(()),
                    $(Thunk::$variant(t) => {
                        f.write_str(" ")?;
                        t.fmt_fields(f)
                    })*
                }
            }
        }

        $(
            impl From<$module::$variant> for Thunk {
                fn from(t: $module::$variant) -> Self {
                    Thunk::$variant(t)
                }
            }

            impl fmt::Display for $module::$variant {
                fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str(<Self as ThunkOp>::NAME)?;
                    f.write_str(" ")?;
                    self.fmt_fields(f)
                }
            }
        )*
    };
}

define_thunks! {
    elementwise::Cast,
    elementwise::CastHost,
    elementwise::CastTruncF32,
    elementwise::ActivationInPlace,
    elementwise::ActivationOut,
    elementwise::GeluApproxOut,
    elementwise::GeluApproxHost,
    binary::FusedBinaryActivation,
    binary::FusedTernaryActivation,
    binary::BinaryFull,
    binary::BinaryBroadcast,
    binary::BiasAdd,
    binary::Compare,
    binary::Where,
    binary::Fma,
    elementwise::FusedSwiGLU,
    region::ElementwiseRegion,
    region::BatchElementwiseRegion,
    matmul::Sgemm,
    matmul::BatchedSgemm,
    matmul::FusedMmBiasAct,
    matmul::GroupedMatMul,
    matmul::ScaledMatMul,
    matmul::ScaledQuantize,
    matmul::ScaledDequantize,
    matmul::ScaledQuantScale,
    quant::DequantMatMulGguf,
    quant::DequantMatMulGgufT,
    quant::DequantGroupedMatMulGguf,
    quant::DequantMatMulInt8,
    quant::DequantMatMulInt4,
    quant::DequantMatMulFp8,
    quant::DequantMatMulNvfp4,
    fused::FusedMlpGateUpSwiGLU,
    fused::FusedMlpGateUpGelu,
    fused::FusedMlpDownResidual,
    norm::LayerNorm,
    norm::RmsNorm,
    norm::GroupNorm,
    norm::LayerNorm2d,
    norm::FusedResidualLN,
    norm::FusedResidualRmsNorm,
    norm::AdaLayerNorm,
    norm::GatedResidual,
    norm::FusedRmsNormMulSilu,
    attention::Attention,
    attention::FusedAttn,
    attention::Rope,
    attention::AxialRope2dHost,
    shape::Narrow,
    shape::SplitLastAxis,
    shape::Copy,
    shape::Concat,
    shape::Transpose,
    shape::Reverse,
    indexing::Gather,
    indexing::GatherAxis,
    indexing::ScatterAdd,
    indexing::CpuIndexing,
    reduce::Softmax,
    reduce::SoftmaxCrossEntropyDense,
    reduce::SoftmaxCrossEntropyWithLogits,
    reduce::SoftmaxCrossEntropyBackward,
    reduce::Cumsum,
    reduce::Reduce,
    reduce::TopK,
    reduce::ArgReduce,
    reduce::Sample,
    conv::Conv2D,
    conv::ConvTranspose2d,
    conv::Pool2D,
    conv::Im2Col,
    conv::ResizeNearest2x,
    conv::FusedDepthwiseConv1dBsc,
    sequence::GatedDeltaNet,
    sequence::SelectiveScan,
    sequence::Mamba2,
    sequence::Lstm,
    sequence::Gru,
    sequence::Rnn,
    signal::Fft1d,
    signal::LogMel,
    signal::LogMelBackward,
    signal::WelchPeaks,
    attention::AttentionBackward,
    backward::AdaLayerNormBackward,
    backward::GatedResidualBackward,
    backward::RmsNormBackwardInput,
    backward::RmsNormBackwardGamma,
    backward::RmsNormBackwardBeta,
    backward::RopeBackward,
    backward::CumsumBackward,
    backward::GatherBackward,
    backward::MaxPool2dBackward,
    backward::Conv2dBackwardInput,
    backward::Conv2dBackwardWeight,
    splat::GaussianSplatRender,
    splat::GaussianSplatRenderBackward,
    splat::GaussianSplatPrepare,
    splat::GaussianSplatRasterize,
    host::CustomOp,
    host::CustomGpuOp,
    host::SpdHost,
    host::ScanHost,
    host::HostOp,
    host::RngNormal,
    host::RngUniform,
    host::VqAssign,
}

impl fmt::Display for Thunk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        self.fmt_fields(f)
    }
}

/// A compiled schedule: thunks in execution order plus the graph's RNG
/// settings (read by the random-fill thunks).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThunkSchedule {
    /// Thunks in execution order.
    pub thunks: Vec<Thunk>,
    /// Seed and run counter for random fills.
    pub rng: RngOptions,
}

impl fmt::Display for ThunkSchedule {
    /// One thunk per line, prefixed with its index.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self.thunks.len().saturating_sub(1).to_string().len();
        for (i, t) in self.thunks.iter().enumerate() {
            writeln!(f, "{i:>width$} {t}")?;
        }
        Ok(())
    }
}
