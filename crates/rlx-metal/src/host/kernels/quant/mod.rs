//! Quantised matmuls over packed GGUF blocks: `dst[m, n] = x[m, k] @
//! dequant(W)[n, k]ᵀ`, with W's rows stored as ggml blocks
//! (`GgmlType::row_bytes(k)` bytes per row).
//!
//! The packed weight is read directly; no dequantised copy of the matrix
//! is ever made:
//! - `m = 1` (decode GEMV, module `driver`): each task owns a chunk of output
//!   rows. On x86-64 with AVX2 + FMA, the formats real models use (Q4_0,
//!   Q4_1, Q5_0, Q8_0, Q8_1, Q4_K, Q6_K, F32) have fused kernels (module
//!   `avx2`): codes split with byte-wide integer ops, widened 8 at a time
//!   and multiplied into `x` in registers. Every other format (and every
//!   format on other CPUs) unpacks a block into a stack buffer (`w = a·q`
//!   per element plus the block's additive mins) and dots it with `x` in
//!   runs of 32 with four independent 8-lane accumulators. Mins are applied
//!   once per sub-block as `b · Σx`, with per-sub-block sums of `x`
//!   computed once per call.
//! - `m ≤ 8` on CPUs with AVX-512 VNNI (module `vnni`): for Q4_0, Q4_1,
//!   Q5_0, Q5_1, Q8_0 and Q2_K … Q6_K the activations are rounded once per
//!   call to 8-bit blocks of 32 and dotted with the weight codes by integer
//!   multiply-adds (`vpdpbusd`); see that module for the error bound. This
//!   takes precedence over the two paths below. Q4_0, Q4_1, Q5_0, Q5_1,
//!   Q8_0, Q4_K, Q5_K and Q6_K run on 512-bit tiles (module `vnni_zmm`:
//!   64 codes per `vpdpbusd`, a 256-element group's scales as vectors),
//!   the other k-quants on 256-bit kernels.
//! - `m > 8` on the same CPUs and formats (module `vnni_gemm`): the
//!   activations rounded on the same two levels, weight panels decoded to
//!   byte codes once per call and multiplied in 4 × 4 register tiles by
//!   integer multiply-adds. This takes precedence over the path below.
//! - `m ≥ 16` on CPUs that also have AMX-INT8 (module `amx_gemm`, Linux,
//!   the tile state granted by `arch_prctl` once per process): the same
//!   activation codes and scales, the integer dots of each block of 16 or
//!   32 elements done by the tile unit (`tdpbssd` / `tdpbusd` on 16 × 16
//!   tiles), equal to the VNNI GEMM up to f32 summation order. It takes
//!   precedence over `vnni_gemm` when both are on
//!   ([`set_amx_prefill_gemm`]; off, or without AMX, `vnni_gemm` runs).
//! - `m > 1` (prefill): each task decodes a small panel of W rows (tens of
//!   rows, a few hundred KiB at most) into a thread-local buffer and
//!   multiplies all `m` rows of `x` against it with the `gemm` crate, so
//!   every block is decoded once per call however large `m` is.
//!
//! - Grouped (MoE) products (module `grouped`): each chosen expert's rows
//!   through the paths above (int8 GEMM for prefill groups); a decode
//!   step's few rows as one parallel region of f32 GEMVs over (row, chunk
//!   of output rows).
//!
//! One module per block family: `legacy` (32-element Q4_0 … Q8_1),
//! `kquants` (256-element Q2_K … Q8_K), `seed` (the seed's 128-element
//! Q1_0 / Q2_0) and `float` (F32 / F16 / BF16). Accumulation is f32.
//!
//! The formats whose scales live in separate tensors (block int8 / int4,
//! FP8, NVFP4) and the scaled low-precision codes are in [`formats`].

#[cfg(target_arch = "x86_64")]
mod amx_gemm;
#[cfg(target_arch = "x86_64")]
mod avx2;
mod driver;
mod float;
pub mod formats;
mod kquants;
mod legacy;
mod seed;
#[cfg(target_arch = "x86_64")]
mod vnni;
#[cfg(target_arch = "x86_64")]
mod vnni_gemm;

use half::f16;
use rlx_ir::GgmlType;

use super::{check_len, invalid, numel, Elem, Result};

pub use grouped::dequant_grouped_matmul;

/// Largest block (elements) of any format: the k-quants' 256.
pub(crate) const MAX_BS: usize = 256;
/// Most sub-blocks (separate scales) in one block: 16.
pub(crate) const MAX_SUB: usize = 16;

/// A block format: `BS` elements in `BB` bytes, split into sub-blocks of
/// `SUB` elements that each have a multiplicative scale and (when
/// `HAS_MIN`) an additive offset.
pub(crate) trait Block: Sync + 'static {
    /// Elements per block.
    const BS: usize;
    /// Bytes per block.
    const BB: usize;
    /// Elements per sub-block (divides `BS`).
    const SUB: usize;
    /// Whether sub-blocks carry an additive offset.
    const HAS_MIN: bool;
    /// Unpacks block `b` (`BB` bytes) into `w[..BS]` (scaled values without
    /// the offsets) and, when `HAS_MIN`, `mins[..BS / SUB]` (the offset of
    /// each sub-block): weight `e` is `w[e] + mins[e / SUB]`.
    fn unpack(b: &[u8], w: &mut [f32; MAX_BS], mins: &mut [f32; MAX_SUB]);

    /// AVX2 fused dot of one block with `x` (see [`avx2`]): adds into `acc`
    /// and `macc` and returns `true`, or returns `false` (the default) when
    /// the format has no such kernel.
    ///
    /// # Safety
    /// The CPU must support AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_avx2(
        _b: &[u8],
        _x: &[f32],
        _xs: &[f32],
        _acc: &mut std::arch::x86_64::__m256,
        _macc: &mut f32,
    ) -> bool {
        false
    }
}

/// A row format the drivers can run: dot one packed row with `x`, or
/// decode it.
pub(crate) trait RowFmt: Sync + 'static {
    /// Elements per group of `x` sums the dot needs (`0`: none).
    const SUB: usize;
    /// `Σ_e dequant(row)[e]·x[e]`; `xsum[g]` is `Σ x` over group `g` of
    /// `SUB` elements.
    fn dot_row(row: &[u8], x: &[f32], xsum: &[f32]) -> f32;
    /// Decodes the row into `out` (`k` elements).
    fn decode_row(row: &[u8], out: &mut [f32]);
    /// [`RowFmt::dot_row`] using the AVX2 block kernels where they exist.
    ///
    /// # Safety
    /// The CPU must support AVX2, FMA and F16C.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_row_avx2(row: &[u8], x: &[f32], xsum: &[f32]) -> f32 {
        Self::dot_row(row, x, xsum)
    }
}

/// Rows made of whole blocks of `B`.
pub(crate) struct Blocks<B>(std::marker::PhantomData<B>);

impl<B: Block> RowFmt for Blocks<B> {
    const SUB: usize = if B::HAS_MIN { B::SUB } else { 0 };

    #[inline(always)]
    fn dot_row(row: &[u8], x: &[f32], xsum: &[f32]) -> f32 {
        let mut w = [0f32; MAX_BS];
        let mut mins = [0f32; MAX_SUB];
        let mut acc = [[0f32; 8]; 4];
        let mut macc = 0f32;
        let nsub = B::BS / B::SUB;
        let blocks = row.chunks_exact(B::BB).zip(x.chunks_exact(B::BS));
        for (bi, (blk, xb)) in blocks.enumerate() {
            B::unpack(blk, &mut w, &mut mins);
            dot_acc(&mut acc, &w[..B::BS], xb);
            if B::HAS_MIN {
                let xs = xsum.get(bi * nsub..(bi + 1) * nsub).unwrap_or(&[]);
                for (&mn, &s) in mins.iter().zip(xs) {
                    macc += mn * s;
                }
            }
        }
        hsum(&acc) + macc
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn dot_row_avx2(row: &[u8], x: &[f32], xsum: &[f32]) -> f32 {
        let mut w = [0f32; MAX_BS];
        let mut mins = [0f32; MAX_SUB];
        let mut acc4 = [[0f32; 8]; 4];
        let mut macc = 0f32;
        // SAFETY: the caller guarantees AVX2 / FMA.
        let mut acc = unsafe { std::arch::x86_64::_mm256_setzero_ps() };
        let nsub = B::BS / B::SUB;
        let blocks = row.chunks_exact(B::BB).zip(x.chunks_exact(B::BS));
        for (bi, (blk, xb)) in blocks.enumerate() {
            let xs = xsum.get(bi * nsub..(bi + 1) * nsub).unwrap_or(&[]);
            // SAFETY: as above.
            if unsafe { B::dot_avx2(blk, xb, xs, &mut acc, &mut macc) } {
                continue;
            }
            B::unpack(blk, &mut w, &mut mins);
            dot_acc(&mut acc4, &w[..B::BS], xb);
            if B::HAS_MIN {
                for (&mn, &s) in mins.iter().zip(xs) {
                    macc += mn * s;
                }
            }
        }
        // SAFETY: as above.
        unsafe { avx2::hsum8(acc) + hsum(&acc4) + macc }
    }

    #[inline(always)]
    fn decode_row(row: &[u8], out: &mut [f32]) {
        let mut w = [0f32; MAX_BS];
        let mut mins = [0f32; MAX_SUB];
        for (blk, o) in row.chunks_exact(B::BB).zip(out.chunks_exact_mut(B::BS)) {
            B::unpack(blk, &mut w, &mut mins);
            if B::HAS_MIN {
                for ((os, ws), &mn) in o
                    .chunks_exact_mut(B::SUB)
                    .zip(w.chunks_exact(B::SUB))
                    .zip(&mins)
                {
                    for (ov, &wv) in os.iter_mut().zip(ws) {
                        *ov = wv + mn;
                    }
                }
            } else {
                o.copy_from_slice(&w[..B::BS]);
            }
        }
    }
}

/// `acc += w·x` over runs of 32 (`w`, `x` the same length, a multiple of
/// 32; a shorter tail is ignored): four independent 8-lane accumulators.
#[inline(always)]
pub(crate) fn dot_acc(acc: &mut [[f32; 8]; 4], w: &[f32], x: &[f32]) {
    for (wc, xc) in w.chunks_exact(32).zip(x.chunks_exact(32)) {
        for (a, (wv, xv)) in acc
            .iter_mut()
            .zip(wc.chunks_exact(8).zip(xc.chunks_exact(8)))
        {
            for l in 0..8 {
                a[l] += wv[l] * xv[l];
            }
        }
    }
}

/// Sum of the four accumulators' lanes.
#[inline(always)]
pub(crate) fn hsum(acc: &[[f32; 8]; 4]) -> f32 {
    let mut t = [0f32; 8];
    for a in acc {
        for l in 0..8 {
            t[l] += a[l];
        }
    }
    ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]))
}

/// Little-endian f16 at `b[at..at + 2]` widened to f32 (0 if out of range).
#[inline(always)]
pub(crate) fn f16_at(b: &[u8], at: usize) -> f32 {
    match b.get(at..at + 2) {
        Some(&[lo, hi]) => f16::from_bits(u16::from_le_bytes([lo, hi])).to_f32(),
        _ => 0.0,
    }
}

/// `b[at..at + N]` as an array; zeros if out of range (the drivers only
/// pass whole blocks, so that never happens).
#[inline(always)]
pub(crate) fn arr<const N: usize>(b: &[u8], at: usize) -> &[u8; N] {
    match b.get(at..).and_then(|s| s.first_chunk::<N>()) {
        Some(a) => a,
        None => &[0; N],
    }
}

/// Activations: f32 or f16 `[m, k]`.
#[derive(Debug, Clone, Copy)]
pub enum Act<'a> {
    /// f32 activations.
    F32(&'a [f32]),
    /// f16 activations (widened once per call).
    F16(&'a [f16]),
}

/// Result buffer: f32 or f16 `[m, n]`.
#[derive(Debug)]
pub enum Out<'a> {
    /// f32 result.
    F32(&'a mut [f32]),
    /// f16 result (accumulated in f32, rounded once on store).
    F16(&'a mut [f16]),
}

/// Runs `$body` with `$F` bound to the [`RowFmt`] of `$ty`.
macro_rules! with_fmt {
    ($ty:expr, $F:ident => $body:expr) => {{
        use GgmlType as G;
        match $ty {
            G::F32 => {
                type $F = float::F32Row;
                $body
            }
            G::F16 => {
                type $F = float::F16Row;
                $body
            }
            G::BF16 => {
                type $F = float::Bf16Row;
                $body
            }
            G::Q4_0 => {
                type $F = Blocks<legacy::Q4_0>;
                $body
            }
            G::Q4_1 => {
                type $F = Blocks<legacy::Q4_1>;
                $body
            }
            G::Q5_0 => {
                type $F = Blocks<legacy::Q5_0>;
                $body
            }
            G::Q5_1 => {
                type $F = Blocks<legacy::Q5_1>;
                $body
            }
            G::Q8_0 => {
                type $F = Blocks<legacy::Q8_0>;
                $body
            }
            G::Q8_1 => {
                type $F = Blocks<legacy::Q8_1>;
                $body
            }
            G::Q2K => {
                type $F = Blocks<kquants::Q2K>;
                $body
            }
            G::Q3K => {
                type $F = Blocks<kquants::Q3K>;
                $body
            }
            G::Q4K => {
                type $F = Blocks<kquants::Q4K>;
                $body
            }
            G::Q5K => {
                type $F = Blocks<kquants::Q5K>;
                $body
            }
            G::Q6K => {
                type $F = Blocks<kquants::Q6K>;
                $body
            }
            G::Q8K => {
                type $F = Blocks<kquants::Q8K>;
                $body
            }
            G::Q1_0 => {
                type $F = Blocks<seed::Q1_0>;
                $body
            }
            G::Q2_0 => {
                type $F = Blocks<seed::Q2_0>;
                $body
            }
        }
    }};
}

/// Bytes of one packed row, checking that `k` is whole blocks.
fn row_bytes(kernel: &'static str, ty: GgmlType, k: usize) -> Result<usize> {
    ty.row_bytes(k).ok_or_else(|| {
        invalid(
            kernel,
            format!(
                "k={k} is not a multiple of the {} block size {}",
                ty.name(),
                ty.block_size()
            ),
        )
    })
}

/// `dst[m, k] = x[m, n] @ dequant(W)` with W `[n, k]` in packed GGUF
/// blocks: the transposed product of [`dequant_matmul`] (the input
/// gradient of a frozen quantised weight). Strips of W's columns are
/// decoded a panel of rows at a time into thread-local buffers and
/// multiplied with `gemm` (see `driver::run_t`); no dense copy of W is made.
pub fn dequant_matmul_t(
    ty: GgmlType,
    x: &[f32],
    w: &[u8],
    out: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
) -> Result<()> {
    const K: &str = "dequant_matmul_gguf_t";
    let rb = row_bytes(K, ty, k)?;
    check_len(K, "w", w.len(), numel(K, &[n, rb])?)?;
    check_len(K, "x", x.len(), numel(K, &[m, n])?)?;
    check_len(K, "dst", out.len(), numel(K, &[m, k])?)?;
    let bs = ty.block_size();
    with_fmt!(ty, F => driver::run_t::<F>(x, w, rb, bs, out, m, k, n));
    Ok(())
}

/// Turns the int8-activation paths on or off for the whole process and
/// returns the previous setting. On (the default), the matmuls (any `m`:
/// `vnni` for `m ≤ 8`, `vnni_gemm` above) and the fused decode-MLP GEMVs on
/// CPUs with AVX-512 VNNI round the activations to 8-bit blocks of 32 (as
/// llama.cpp's CPU backend does, on two levels by default; error bounds in
/// those modules); off, every quantised matmul dots the f32 activations
/// with the decoded weights, like the Metal kernels. A no-op on CPUs
/// without VNNI.
pub fn set_int8_activations(on: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        vnni::set_enabled(on)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = on;
        false
    }
}

/// Selects the 512-bit integer-dot tiles (on, the default) or the 256-bit
/// kernels for the formats that have both, and returns the previous
/// setting: an A/B switch for benchmarks (both compute the same integer
/// dots; the f32 accumulation order differs). A no-op without VNNI.
#[doc(hidden)]
pub fn set_wide_int_dots(on: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        vnni::set_wide(on)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = on;
        false
    }
}

/// Turns the integer-dot prefill GEMM (`m > 8`, module `vnni_gemm`) on or
/// off for the process and returns the previous setting; off, `m > 8`
/// quantised matmuls decode weight panels to f32 and multiply them with
/// the `gemm` crate (f32 activations). It also needs
/// [`set_int8_activations`] on and a CPU with AVX-512 VNNI.
pub fn set_int8_prefill_gemm(on: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        vnni_gemm::set_enabled(on)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = on;
        false
    }
}

/// Turns the AMX tile path of the integer-dot prefill GEMM (`m ≥ 16`,
/// module `amx_gemm`) on or off for the process and returns the previous
/// setting; on (the default), it runs wherever the CPU has AMX-INT8 and
/// the kernel grants the tile state, with the same results as the VNNI
/// GEMM up to f32 summation order. It also needs
/// [`set_int8_prefill_gemm`] on. A no-op elsewhere.
pub fn set_amx_prefill_gemm(on: bool) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        amx_gemm::set_enabled(on)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = on;
        false
    }
}

/// Whether the AMX tile path can run on this machine: the CPU has
/// AMX-TILE and AMX-INT8 and the kernel granted the tile state (asked on
/// the first call); whatever [`set_amx_prefill_gemm`] says.
pub fn amx_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        amx_gemm::ready()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Sets how many code levels the int8-activation paths use (m ≤ 8:
/// decode GEMVs, the fused decode MLP, batched decode; the prefill GEMM,
/// `m > 8`, always uses two) and returns the previous count: 2 (the
/// default) adds a residual level, `x ≈ dx·qx + (dx/256)·qx2` with both
/// codes in `−127..=127`, which cuts the rounding error 256-fold (from
/// `dx/2` to `dx/512` per element) for one more `vpdpbusd` per 32
/// elements; 1 rounds to `dx·qx` alone, as llama.cpp does. `levels` other
/// than 1 or 2 are taken as 2.
pub fn set_int8_activation_levels(levels: u32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if vnni::set_residual(levels != 1) {
            2
        } else {
            1
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = levels;
        2
    }
}

/// `out[m, n] = x[m, k] @ dequant(w)ᵀ` for packed GGUF rows of type `ty`.
///
/// Needs `k` a multiple of `ty`'s block size, `x ≥ m·k`, `w ≥ n ·
/// row_bytes(k)` bytes, `out ≥ m·n`.
pub fn dequant_matmul(
    ty: GgmlType,
    x: Act<'_>,
    w: &[u8],
    out: Out<'_>,
    m: usize,
    k: usize,
    n: usize,
) -> Result<()> {
    const K: &str = "dequant_matmul_gguf";
    let rb = row_bytes(K, ty, k)?;
    let xn = numel(K, &[m, k])?;
    check_len(K, "w", w.len(), numel(K, &[n, rb])?)?;
    let xlen = match x {
        Act::F32(v) => v.len(),
        Act::F16(v) => v.len(),
    };
    check_len(K, "x", xlen, xn)?;
    let olen = match &out {
        Out::F32(v) => v.len(),
        Out::F16(v) => v.len(),
    };
    check_len(K, "dst", olen, numel(K, &[m, n])?)?;
    driver::with_x(x, xn, |xf| matmul_checked(ty, xf, w, rb, out, m, k, n));
    Ok(())
}

/// The body of [`dequant_matmul`] on checked operands with f32
/// activations: the integer-dot kernels where the CPU and `ty` have them
/// (`m ≤ 8`: `vnni`; above: `amx_gemm`, then `vnni_gemm`), else the
/// driver's f32 GEMV / panel GEMM.
#[allow(clippy::too_many_arguments)]
pub(super) fn matmul_checked(
    ty: GgmlType,
    xf: &[f32],
    w: &[u8],
    rb: usize,
    out: Out<'_>,
    m: usize,
    k: usize,
    n: usize,
) {
    #[cfg(target_arch = "x86_64")]
    let mut out = out;
    #[cfg(target_arch = "x86_64")]
    if m > 0 && m <= vnni::MAX_M && n > 0 && k > 0 {
        let tasks = driver::tasks_for(m.saturating_mul(n).saturating_mul(k));
        if vnni::try_run(ty, xf, w, rb, &mut out, m, k, n, tasks) {
            return;
        }
    }
    #[cfg(target_arch = "x86_64")]
    if m > vnni::MAX_M && n > 0 && k > 0 {
        let tasks = driver::tasks_for(m.saturating_mul(n).saturating_mul(k));
        if amx_gemm::try_run(ty, xf, w, rb, &mut out, m, k, n, tasks)
            || vnni_gemm::try_run(ty, xf, w, rb, &mut out, m, k, n, tasks)
        {
            return;
        }
    }
    with_fmt!(ty, F => match out {
        Out::F32(o) => driver::run::<F, f32>(xf, w, rb, o, m, k, n),
        Out::F16(o) => driver::run::<F, f16>(xf, w, rb, o, m, k, n),
    })
}

/// The gating of a fused gate / up decode GEMV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gating {
    /// `silu(gate) · up` (SwiGLU).
    Silu,
    /// `gelu_tanh(gate) · up` (GeGLU with the tanh approximation).
    GeluTanh,
}

/// Decode MLP gate / up (`m = 1`): `out[j] = act(gate_w[j]·x) · (up_w[j]·x)`
/// for two packed matrices of `n` rows of `k` elements of type `ty`. One
/// pass over `x` (rounded to 8-bit blocks once on the integer-dot path),
/// both matrices in one parallel region, row for row the same dots as
/// [`dequant_matmul`] and the same activation as the elementwise kernels.
#[allow(clippy::too_many_arguments)]
pub fn gate_up_gemv(
    ty: GgmlType,
    x: Act<'_>,
    gate_w: &[u8],
    up_w: &[u8],
    out: Out<'_>,
    k: usize,
    n: usize,
    gating: Gating,
) -> Result<()> {
    const K: &str = "fused_mlp_gate_up";
    let mats = check_fused(K, ty, &x, &[("gate_w", gate_w), ("up_w", up_w)], &out, k, n)?;
    fused_gemv(ty, x, &mats, out, k, n, &Epi::Gate(gating));
    Ok(())
}

/// Decode MLP down with the residual (`m = 1`): `out[j] = res[j] +
/// w[j]·x` for `n` packed rows of `k` elements of type `ty`; the add is the
/// GEMV's epilogue. `res` must not alias `out` (the caller stages it).
pub fn down_residual_gemv(
    ty: GgmlType,
    x: Act<'_>,
    w: &[u8],
    res: Act<'_>,
    out: Out<'_>,
    k: usize,
    n: usize,
) -> Result<()> {
    const K: &str = "fused_mlp_down_residual";
    let mats = check_fused(K, ty, &x, &[("w", w)], &out, k, n)?;
    let rlen = match res {
        Act::F32(v) => v.len(),
        Act::F16(v) => v.len(),
    };
    check_len(K, "res", rlen, n)?;
    fused_gemv(ty, x, &mats, out, k, n, &Epi::Residual(res));
    Ok(())
}

/// What a fused GEMV does with its dots.
enum Epi<'a> {
    Gate(Gating),
    Residual(Act<'a>),
}

/// Checks the operands of a fused GEMV; returns the matrices cut to `n`
/// rows.
fn check_fused<'w>(
    kernel: &'static str,
    ty: GgmlType,
    x: &Act<'_>,
    mats: &[(&'static str, &'w [u8])],
    out: &Out<'_>,
    k: usize,
    n: usize,
) -> Result<Vec<&'w [u8]>> {
    let rb = row_bytes(kernel, ty, k)?;
    let xlen = match x {
        Act::F32(v) => v.len(),
        Act::F16(v) => v.len(),
    };
    check_len(kernel, "x", xlen, k)?;
    let olen = match out {
        Out::F32(v) => v.len(),
        Out::F16(v) => v.len(),
    };
    check_len(kernel, "dst", olen, n)?;
    let bytes = numel(kernel, &[n, rb])?;
    mats.iter()
        .map(|&(what, w)| {
            check_len(kernel, what, w.len(), bytes)?;
            Ok(&w[..bytes])
        })
        .collect()
}

/// Runs a checked fused GEMV (see [`driver::gemv_fused`]).
fn fused_gemv(
    ty: GgmlType,
    x: Act<'_>,
    mats: &[&[u8]],
    out: Out<'_>,
    k: usize,
    n: usize,
    epi: &Epi<'_>,
) {
    driver::with_x(x, k, |xf| match out {
        Out::F32(o) => fused_typed(ty, xf, mats, o, k, n, epi),
        Out::F16(o) => fused_typed(ty, xf, mats, o, k, n, epi),
    })
}

fn fused_typed<T: Elem>(
    ty: GgmlType,
    x: &[f32],
    mats: &[&[u8]],
    out: &mut [T],
    k: usize,
    n: usize,
    epi: &Epi<'_>,
) {
    use crate::host::kernels::elementwise::{gelu_approx, silu};
    let store = |j0: usize, a: &[f32], b: &[f32], o: &mut [T]| match epi {
        Epi::Gate(Gating::Silu) => {
            for ((o, &g), &u) in o.iter_mut().zip(a).zip(b) {
                *o = T::from_f32(silu(g) * u);
            }
        }
        Epi::Gate(Gating::GeluTanh) => {
            for ((o, &g), &u) in o.iter_mut().zip(a).zip(b) {
                *o = T::from_f32(gelu_approx(g) * u);
            }
        }
        Epi::Residual(Act::F32(r)) => {
            for ((o, &d), &r) in o.iter_mut().zip(a).zip(&r[j0..]) {
                *o = T::from_f32(r + d);
            }
        }
        Epi::Residual(Act::F16(r)) => {
            for ((o, &d), r) in o.iter_mut().zip(a).zip(&r[j0..]) {
                *o = T::from_f32(r.to_f32() + d);
            }
        }
    };
    if n == 0 {
        return;
    }
    let rb = ty.row_bytes(k).unwrap_or(0);
    if k == 0 || rb == 0 {
        let zeros = |_: &[u8], o: &mut [f32]| o.fill(0.0);
        return driver::gemv_fused(mats, 0, n, out, 1, &zeros, &store);
    }
    #[cfg(target_arch = "x86_64")]
    if vnni::try_fused(ty, x, mats, rb, out, k, n, &store) {
        return;
    }
    with_fmt!(ty, F => driver::gemv_fused_fmt::<F, T>(x, mats, rb, out, k, n, &store))
}

/// Embedding lookup on packed GGUF rows: `out[i, :] = dequant(w[rows[i]])`
/// for `w [n_rows, row_bytes(k)]` of type `ty` (the matmuls' own row
/// decoders). Needs `w ≥ n_rows · row_bytes(k)` bytes and `out ≥
/// rows.len() · k`; a row outside `0..n_rows` is an error naming the type
/// and the row, raised before anything is written.
pub fn dequantize_rows(
    ty: GgmlType,
    w: &[u8],
    n_rows: usize,
    rows: &[i64],
    k: usize,
    out: &mut [f32],
) -> Result<()> {
    const K: &str = "gguf_dequantize_rows";
    let rb = row_bytes(K, ty, k)?;
    check_len(K, "data", w.len(), numel(K, &[n_rows, rb])?)?;
    check_len(K, "out", out.len(), numel(K, &[rows.len(), k])?)?;
    if let Some((i, &r)) = rows
        .iter()
        .enumerate()
        .find(|&(_, &r)| r < 0 || r as u64 >= n_rows as u64)
    {
        return Err(invalid(
            K,
            format!("{} row {r} (rows[{i}]) out of range 0..{n_rows}", ty.name()),
        ));
    }
    if k == 0 {
        return Ok(());
    }
    let decode = |(o, &r): (&mut [f32], &i64)| {
        let at = r as usize * rb;
        with_fmt!(ty, F => F::decode_row(&w[at..at + rb], o));
    };
    let out = &mut out[..rows.len() * k];
    if rows.len() * k >= super::PAR_MIN {
        use rayon::prelude::*;
        out.par_chunks_mut(k).zip(rows.par_iter()).for_each(decode);
    } else {
        out.chunks_mut(k).zip(rows.iter()).for_each(decode);
    }
    Ok(())
}

// after `with_fmt!`, which it uses
mod grouped;

#[cfg(test)]
mod fused_tests;
#[cfg(test)]
mod tests;
