//! The Metal kernel sources, one `.metal` file per family (`kernels/`),
//! embedded with `include_str!`. Metal compiles from a string, so
//! [`source`] inlines the shared headers (`args.h`, `act.h`) where a file
//! includes them and restores the file's line numbers with `#line`, giving
//! one self-contained source per family; the simulator tests compile
//! exactly that text.

/// `kernels/args.h`, the shared argument structs.
pub const ARGS_H: &str = include_str!("../../kernels/args.h");

/// `kernels/args_backward.h`, the argument structs of `backward.metal`.
pub const ARGS_BACKWARD_H: &str = include_str!("../../kernels/args_backward.h");

/// `kernels/act.h`, the shared activation / binary-op helpers.
pub const ACT_H: &str = include_str!("../../kernels/act.h");

/// `kernels/gguf_blocks.h`, the GGUF block decoders (`quant.metal`,
/// `moe.metal`).
pub const GGUF_BLOCKS_H: &str = include_str!("../../kernels/gguf_blocks.h");

/// `kernels/spd_linalg.h`, small symmetric eigen / matrix-function helpers
/// (`spd.metal`).
pub const SPD_LINALG_H: &str = include_str!("../../kernels/spd_linalg.h");

/// The headers [`source`] inlines: `#include` name and text.
const HEADERS: [(&str, &str); 5] = [
    ("args.h", ARGS_H),
    ("args_backward.h", ARGS_BACKWARD_H),
    ("act.h", ACT_H),
    ("gguf_blocks.h", GGUF_BLOCKS_H),
    ("spd_linalg.h", SPD_LINALG_H),
];

/// A kernel family: one `.metal` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    /// Unary activations, f32 / f16 casts and the numeric casts of
    /// `CastHost`.
    Elementwise,
    /// Same-shape and broadcasting binary ops.
    Binary,
    /// RMSNorm, LayerNorm, fused residual RMSNorm.
    Norm,
    /// Softmax over the last axis.
    Softmax,
    /// GEMV / GEMM on packed GGUF blocks.
    Quant,
    /// Matmuls on block int8 / int4, FP8 and NVFP4 weights; the scaled
    /// low-precision GEMM, quantise, dequantise and scale kernels.
    QuantFormats,
    /// Tiled GEMM / GEMV with a bias + activation epilogue, bias add.
    Matmul,
    /// Fused elementwise regions, fused binary / ternary activations,
    /// compare, where, fma, SwiGLU.
    Region,
    /// SDPA (decode / prefill) and the fused RoPE + SDPA core.
    Attention,
    /// Rotary position embedding.
    Rope,
    /// Layout moves: copy, narrow, split, concat, transpose, reverse.
    Shape,
    /// Gathers, scatter-add, in-place ScatterND (KV-cache writes).
    Indexing,
    /// Axis reductions, arg max / min, cumulative sum.
    Reduce,
    /// Fused row norms: residual LayerNorm, RMSNorm·SiLU gate.
    NormFused,
    /// Depthwise causal 1-D convolution (BSC layout).
    Conv,
    /// Gated DeltaNet recurrence.
    Gdn,
    /// Mamba selective scan and Mamba-2 SSD.
    Ssm,
    /// LSTM, GRU, Elman RNN.
    Recurrent,
    /// Mixture-of-experts grouped matmuls (f32 and GGUF expert stacks).
    Moe,
    /// NCHW images: conv2d, transposed conv2d, im2col, pooling, nearest
    /// 2× upsample, LayerNorm2d.
    Vision,
    /// Philox random fills.
    Rng,
    /// Vector-quantiser assignment.
    Vq,
    /// SPD-manifold gradients (re_eig / log_eig backward).
    Spd,
    /// FFT (Stockham radix-4/2, direct DFT) and log-mel.
    Signal,
    /// Gaussian splats: prepare, rasterize and the render backward.
    Splat,
    /// Training gradients (attention, norms, RoPE, cumsum, gather, pooling,
    /// conv, adaLN, log-mel, cross-entropy).
    Backward,
}

/// Every family.
pub const ALL_FAMILIES: &[Family] = &[
    Family::Elementwise,
    Family::Binary,
    Family::Norm,
    Family::Softmax,
    Family::Quant,
    Family::QuantFormats,
    Family::Matmul,
    Family::Region,
    Family::Attention,
    Family::Rope,
    Family::Shape,
    Family::Indexing,
    Family::Reduce,
    Family::NormFused,
    Family::Conv,
    Family::Gdn,
    Family::Ssm,
    Family::Recurrent,
    Family::Moe,
    Family::Vision,
    Family::Rng,
    Family::Vq,
    Family::Spd,
    Family::Signal,
    Family::Splat,
    Family::Backward,
];

impl Family {
    /// The `.metal` file name.
    pub fn file(self) -> &'static str {
        match self {
            Family::Elementwise => "elementwise.metal",
            Family::Binary => "binary.metal",
            Family::Norm => "norm.metal",
            Family::Softmax => "softmax.metal",
            Family::Quant => "quant.metal",
            Family::QuantFormats => "quant_formats.metal",
            Family::Matmul => "matmul.metal",
            Family::Region => "region.metal",
            Family::Attention => "attention.metal",
            Family::Rope => "rope.metal",
            Family::Shape => "shape.metal",
            Family::Indexing => "indexing.metal",
            Family::Reduce => "reduce.metal",
            Family::NormFused => "norm_fused.metal",
            Family::Conv => "conv.metal",
            Family::Gdn => "gdn.metal",
            Family::Ssm => "ssm.metal",
            Family::Recurrent => "recurrent.metal",
            Family::Moe => "moe.metal",
            Family::Vision => "vision.metal",
            Family::Rng => "rng.metal",
            Family::Vq => "vq.metal",
            Family::Spd => "spd.metal",
            Family::Signal => "signal.metal",
            Family::Splat => "splat.metal",
            Family::Backward => "backward.metal",
        }
    }

    /// The file as written (including `#include "args.h"`).
    pub fn raw_source(self) -> &'static str {
        match self {
            Family::Elementwise => include_str!("../../kernels/elementwise.metal"),
            Family::Binary => include_str!("../../kernels/binary.metal"),
            Family::Norm => include_str!("../../kernels/norm.metal"),
            Family::Softmax => include_str!("../../kernels/softmax.metal"),
            Family::Quant => include_str!("../../kernels/quant.metal"),
            Family::QuantFormats => include_str!("../../kernels/quant_formats.metal"),
            Family::Matmul => include_str!("../../kernels/matmul.metal"),
            Family::Region => include_str!("../../kernels/region.metal"),
            Family::Attention => include_str!("../../kernels/attention.metal"),
            Family::Rope => include_str!("../../kernels/rope.metal"),
            Family::Shape => include_str!("../../kernels/shape.metal"),
            Family::Indexing => include_str!("../../kernels/indexing.metal"),
            Family::Reduce => include_str!("../../kernels/reduce.metal"),
            Family::NormFused => include_str!("../../kernels/norm_fused.metal"),
            Family::Conv => include_str!("../../kernels/conv.metal"),
            Family::Gdn => include_str!("../../kernels/gdn.metal"),
            Family::Ssm => include_str!("../../kernels/ssm.metal"),
            Family::Recurrent => include_str!("../../kernels/recurrent.metal"),
            Family::Moe => include_str!("../../kernels/moe.metal"),
            Family::Vision => include_str!("../../kernels/vision.metal"),
            Family::Rng => include_str!("../../kernels/rng.metal"),
            Family::Vq => include_str!("../../kernels/vq.metal"),
            Family::Spd => include_str!("../../kernels/spd.metal"),
            Family::Signal => include_str!("../../kernels/signal.metal"),
            Family::Splat => include_str!("../../kernels/splat.metal"),
            Family::Backward => include_str!("../../kernels/backward.metal"),
        }
    }
}

/// Self-contained source of a family: the headers (`args.h`,
/// `args_backward.h`, `act.h`, `gguf_blocks.h`, `spd_linalg.h`) inlined,
/// line numbers of the `.metal` file kept for diagnostics.
pub fn source(family: Family) -> String {
    let file = family.file();
    let mut out = String::new();
    for (i, line) in family.raw_source().lines().enumerate() {
        let header = HEADERS
            .iter()
            .find(|(name, _)| line.trim() == format!("#include \"{name}\""));
        if let Some((name, text)) = header {
            out.push_str(&format!("#line 1 \"{name}\"\n"));
            out.push_str(text);
            out.push_str(&format!("#line {} \"{file}\"\n", i + 2));
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_inlines_args_once_and_keeps_lines() {
        for &f in ALL_FAMILIES {
            let s = source(f);
            assert!(!s.contains("#include \"args.h\""), "{}", f.file());
            assert!(!s.contains("#include \"act.h\""), "{}", f.file());
            assert!(s.matches("static inline float rlx_act(").count() <= 1);
            assert_eq!(s.matches("struct RowNormArgs {").count(), 1);
            assert!(s.contains(&format!("\"{}\"", f.file())));
            assert!(f.raw_source().starts_with(&format!("// {}", f.file())));
        }
    }
}
