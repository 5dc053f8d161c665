//! Argument struct of the fused decode-layer kernels of the Metal plan
//! (`quant.metal` `qkv_head_*` / `norm_gate_up_*`, `norm_fused.metal`
//! `norm_residual_f32`; mirrored in `kernels/args.h`). The plan builds them
//! in `metal::fuse`.

use super::KernelArgs;

/// Prologue: RMSNorm of the (staged) input, `x·rsqrt(mean(x²)+eps)·g + b`.
pub const HG_NORM: u32 = 1;
/// Epilogue: `+ bias[j]` (Qwen2's q / k / v bias).
pub const HG_BIAS: u32 = 2;
/// Epilogue: RMSNorm of each head's `head_dim` outputs (Gemma3's q / k norm).
pub const HG_HNORM: u32 = 4;
/// Epilogue: rotary embedding of each head's first `n_rot` dims.
pub const HG_ROPE: u32 = 8;
/// RoPE pairs are GPT-J interleaved (else NeoX rotate-half).
pub const HG_INTERLEAVED: u32 = 16;
/// The result is a KV-cache row: written at row `idx[0]` of the cache.
pub const HG_CACHE: u32 = 32;
/// Prologue before the norm: `s = x + rmsnorm(y)·pg + pb` (a post-norm and
/// the residual add of the previous block).
pub const HG_POST: u32 = 64;
/// With `HG_POST`: `s = x + y`, no post-norm (a plain residual add).
pub const HG_RAW: u32 = 128;
/// With `HG_POST`: threadgroup 0 writes `s` to `s_out` (the residual
/// stream). Only one of the dispatches sharing a prologue sets it; without
/// it `s_out` is neither read nor written.
pub const HG_WRITE_S: u32 = 256;
/// With `HG_CACHE`: the cache is f16, each value rounded to nearest even
/// on write (an f16 KV cache fed f32 rows without a cast dispatch).
pub const HG_CACHE_F16: u32 = 512;

/// `HeadGemvArgs`: see the flags above and the kernels' comments.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HeadGemvArgs {
    /// Input length (the GEMV's reduction length).
    pub k: u32,
    /// Output rows.
    pub n: u32,
    /// Rows per threadgroup: the head dimension (`qkv_head_*`).
    pub head_dim: u32,
    /// Bytes of one packed weight row.
    pub row_bytes: u32,
    /// `HG_*` bits.
    pub flags: u32,
    /// Rotated dims per head (`HG_ROPE`).
    pub n_rot: u32,
    /// Cache rows (`HG_CACHE`; a negative index adds it).
    pub cache_rows: u32,
    /// Elements per cache row (`HG_CACHE`).
    pub cache_row: u32,
    /// `norm_gate_up_*`: 0 silu, 1 tanh-GELU.
    pub op: u32,
    /// Epsilon of the prologue RMSNorm.
    pub eps: f32,
    /// Epsilon of the per-head RMSNorm.
    pub head_eps: f32,
    /// Epsilon of the post-norm (`HG_POST`).
    pub post_eps: f32,
}

kernel_args! {
    HeadGemvArgs = 48,
}
