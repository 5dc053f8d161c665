//! Argument structs of `rng.metal`, `vq.metal` and the axial RoPE kernel
//! of `rope.metal` (mirrored in `kernels/args.h`).

use super::KernelArgs;

/// `RngArgs`: a Philox fill of `len` f32, `dst[i] = a + b · draw(i)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RngArgs {
    /// Elements.
    pub len: u32,
    /// Philox key, low word.
    pub key_lo: u32,
    /// Philox key, high word.
    pub key_hi: u32,
    /// Counter word 2 (stream offset, low).
    pub offset_lo: u32,
    /// Counter word 3 (stream offset, high).
    pub offset_hi: u32,
    /// `low` or `mean`.
    pub a: f32,
    /// `high - low` or `scale`.
    pub b: f32,
    /// Padding.
    pub _pad: u32,
}

/// `VqArgs`: nearest codebook row of each of `n` vectors.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct VqArgs {
    /// Vectors.
    pub n: u32,
    /// Dimension.
    pub d: u32,
    /// Codebook rows.
    pub k: u32,
    /// 0 L2, 1 dot, 2 cosine.
    pub metric: u32,
}

/// `SpdArgs`: Daleckii–Krein gradient of `re_eig` / `log_eig` over
/// `[batch, n, n]` (`spd.metal`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpdArgs {
    /// Matrices.
    pub batch: u32,
    /// Matrix size.
    pub n: u32,
    /// 0 `re_eig`, 1 `log_eig`.
    pub kind: u32,
    /// `re_eig` floor.
    pub eps: f32,
}

/// `SpdBiMapArgs`: bi_map's gradient `W dY Wᵀ` over `[batch, n, n]`,
/// `w [n, m]` (`spd.metal`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpdBiMapArgs {
    /// Matrices.
    pub batch: u32,
    /// x's matrix size.
    pub n: u32,
    /// dy's matrix size (w's columns).
    pub m: u32,
    /// Padding.
    pub _pad: u32,
}

/// `AxialRopeArgs`: SAM 2 axial RoPE, one thread per rotated pair.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AxialRopeArgs {
    /// Pairs (`rows · hidden / 2`).
    pub pairs: u32,
    /// Tokens per batch row.
    pub seq: u32,
    /// Row width (`heads · head_dim`).
    pub hidden: u32,
    /// Head dim.
    pub head_dim: u32,
    /// Grid width.
    pub end_x: u32,
    /// Grid positions (`end_x · end_y`).
    pub grid: u32,
    /// Frequency base.
    pub theta: f32,
    /// Padding.
    pub _pad: u32,
}

kernel_args! {
    RngArgs = 32,
    VqArgs = 16,
    SpdArgs = 16,
    SpdBiMapArgs = 16,
    AxialRopeArgs = 32,
}
