//! Argument struct of `moe.metal`: the grouped (mixture-of-experts)
//! matmuls (mirrored in `kernels/args.h`).

use super::KernelArgs;

/// `MoeArgs`: the grouped (mixture-of-experts) matmuls of `moe.metal`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MoeArgs {
    /// Rows of `x`.
    pub m: u32,
    /// Reduction length.
    pub k: u32,
    /// Output features.
    pub n: u32,
    /// Experts in the stack.
    pub num_experts: u32,
    /// Bytes of one packed expert row (GGUF kernels; 0 for f32).
    pub row_bytes: u32,
}

kernel_args! {
    MoeArgs = 20,
}
