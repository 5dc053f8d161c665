//! The non-GGUF weight formats (block int8 / int4, FP8, NVFP4) and the
//! scaled low-precision codes (`scaled_*` ops).
//!
//! Numerics (published definitions, see `python/rlx/reference/quant.py`):
//! - OCP FP8 E4M3: bias 7, subnormals `m·2⁻⁹`, no infinities, `S.1111.111`
//!   is NaN, largest finite 448. E5M2: IEEE-like, bias 15, subnormals
//!   `m·2⁻¹⁶`, `S.11111.00` is ±inf, other `S.11111.xx` NaN, max 57344.
//! - E2M1 (NVFP4 values): bias 1, `±{0, .5, 1, 1.5, 2, 3, 4, 6}`, bit 3 the sign.
//! - Encoding onto a format: nearest representable value, ties to the even
//!   code (round-to-nearest-even), saturating to ±max (±inf too); NaN keeps
//!   its sign bit and becomes `S.1111111` (FP8) or 0 (int8).
//!
//! Matmuls decode a panel of weight rows at a time (scales applied) and
//! multiply it into all activation rows with `gemm` (see
//! `driver::gemm_decoded`); accumulation is f32.

use rlx_ir::{ScaleLayout, ScaledFormat};

use super::super::{check_len, invalid, Result};
use super::driver::gemm_decoded;

/// FP8 E4M3 code → value.
#[inline]
pub fn e4m3_to_f32(b: u8) -> f32 {
    let sign = ((b as u32) >> 7) << 31;
    let (e, m) = (((b >> 3) & 0xF) as u32, (b & 7) as u32);
    let mag = if e == 0xF && m == 7 {
        return f32::from_bits(sign | 0x7FC0_0000);
    } else if e == 0 {
        m as f32 * (1.0 / 512.0)
    } else {
        f32::from_bits((e + 120) << 23 | m << 20)
    };
    f32::from_bits(sign | mag.to_bits())
}

/// FP8 E5M2 code → value.
#[inline]
pub fn e5m2_to_f32(b: u8) -> f32 {
    let sign = ((b as u32) >> 7) << 31;
    let (e, m) = (((b >> 2) & 0x1F) as u32, (b & 3) as u32);
    let mag = if e == 0x1F {
        if m == 0 {
            f32::INFINITY
        } else {
            return f32::from_bits(sign | 0x7FC0_0000);
        }
    } else if e == 0 {
        m as f32 * (1.0 / 65536.0)
    } else {
        f32::from_bits((e + 112) << 23 | m << 21)
    };
    f32::from_bits(sign | mag.to_bits())
}

/// E2M1 values by code (bit 3 is the sign).
const E2M1: [f32; 16] = [
    0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
];

/// E2M1 (FP4) code (low nibble) → value.
#[inline]
pub fn e2m1_to_f32(c: u8) -> f32 {
    E2M1[(c & 0xF) as usize]
}

/// A scaled-format code → value.
#[inline]
pub fn decode_scaled(fmt: ScaledFormat, b: u8) -> f32 {
    match fmt {
        ScaledFormat::Fp8E4m3 => e4m3_to_f32(b),
        ScaledFormat::Fp8E5m2 => e5m2_to_f32(b),
        ScaledFormat::Int8 => b as i8 as f32,
    }
}

/// A value → scaled-format code (round to nearest, ties to even code,
/// saturating; see the module doc for NaN).
pub fn encode_scaled(fmt: ScaledFormat, x: f32) -> u8 {
    let (top, dec): (u8, fn(u8) -> f32) = match fmt {
        ScaledFormat::Int8 => {
            if x.is_nan() {
                return 0;
            }
            return x.round_ties_even().clamp(-127.0, 127.0) as i8 as u8;
        }
        ScaledFormat::Fp8E4m3 => (0x7E, e4m3_to_f32),
        ScaledFormat::Fp8E5m2 => (0x7B, e5m2_to_f32),
    };
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    if x.is_nan() {
        return 0x7F | sign;
    }
    let a = x.abs().min(dec(top));
    // smallest code whose value is >= a (positive codes increase with value)
    let (mut lo, mut hi) = (0u8, top);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if dec(mid) >= a {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let up = lo;
    let down = up.saturating_sub(1);
    // both differences are exact in f64 (f32 operands)
    let d_down = a as f64 - dec(down) as f64;
    let d_up = dec(up) as f64 - a as f64;
    let pick = if d_down < d_up || (d_down == d_up && down % 2 == 0) {
        down
    } else {
        up
    };
    pick | sign
}

/// Number of scales of `layout` for a `[rows, cols]` operand.
pub fn scale_count(layout: ScaleLayout, rows: usize, cols: usize) -> usize {
    match layout {
        ScaleLayout::PerTensor => 1,
        ScaleLayout::PerRow => rows,
        ScaleLayout::Block { size } => rows * cols.div_ceil(size.max(1) as usize),
    }
}

/// Index into the scale tensor of element `(r, c)` of a `[rows, cols]` operand.
#[inline]
fn scale_index(layout: ScaleLayout, r: usize, c: usize, cols: usize) -> usize {
    match layout {
        ScaleLayout::PerTensor => 0,
        ScaleLayout::PerRow => r,
        ScaleLayout::Block { size } => {
            let s = size.max(1) as usize;
            r * cols.div_ceil(s) + c / s
        }
    }
}

/// `out[m, n] = x[m, k] @ Wᵀ` with `decode` producing W's rows; handles the
/// empty cases.
fn matmul_rows(
    x: &[f32],
    out: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
    decode: &(dyn Fn(usize, usize, &mut [f32]) + Sync),
) {
    if m == 0 || n == 0 {
        return;
    }
    let out = &mut out[..m * n];
    if k == 0 {
        out.fill(0.0);
        return;
    }
    gemm_decoded(&x[..m * k], out, m, k, n, decode);
}

/// The low and high nibble of an int4 byte: two's complement (−8..7) when
/// `signed`, else 0..15.
#[inline(always)]
fn nibbles(byte: u8, signed: bool) -> (f32, f32) {
    if signed {
        (((byte << 4) as i8 >> 4) as f32, (byte as i8 >> 4) as f32)
    } else {
        ((byte & 0xF) as f32, (byte >> 4) as f32)
    }
}

/// 256-entry decode tables of E4M3 (`[0]`) and E5M2 (`[1]`).
fn fp8_tables() -> &'static [[f32; 256]; 2] {
    static T: std::sync::OnceLock<[[f32; 256]; 2]> = std::sync::OnceLock::new();
    T.get_or_init(|| {
        let mut t = [[0f32; 256]; 2];
        for c in 0..=255u8 {
            t[0][c as usize] = e4m3_to_f32(c);
            t[1][c as usize] = e5m2_to_f32(c);
        }
        t
    })
}

/// Shape checks shared by the weight-format matmuls.
fn check_mm(
    kernel: &'static str,
    x: &[f32],
    out: &[f32],
    m: usize,
    k: usize,
    n: usize,
) -> Result<()> {
    let mk = m
        .checked_mul(k)
        .ok_or_else(|| invalid(kernel, "m·k overflows"))?;
    let mn = m
        .checked_mul(n)
        .ok_or_else(|| invalid(kernel, "m·n overflows"))?;
    check_len(kernel, "x", x.len(), mk)?;
    check_len(kernel, "dst", out.len(), mn)
}

/// A block-int weight: codes, per-block f32 scales and optional zero points.
#[derive(Debug, Clone, Copy)]
pub struct IntWeight<'a> {
    /// Int8: `[n, k]` two's-complement bytes. Int4: `[n, ceil(k/2)]`, element
    /// `2j` in the low nibble of byte `j`; signed (−8..7) when symmetric,
    /// unsigned (0..15) when asymmetric.
    pub codes: &'a [u8],
    /// `[n, ceil(k / block_size)]` scales.
    pub scale: &'a [f32],
    /// `[n, ceil(k / block_size)]` zero points (asymmetric only).
    pub zp: Option<&'a [f32]>,
    /// Elements per block.
    pub block_size: usize,
    /// Two codes per byte.
    pub four_bit: bool,
}

/// `dst = x @ ((q − zp)·scale)ᵀ` for block int8 / int4 weights.
pub fn dequant_matmul_int(
    x: &[f32],
    w: IntWeight<'_>,
    out: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
) -> Result<()> {
    let kernel = if w.four_bit {
        "dequant_matmul_int4"
    } else {
        "dequant_matmul_int8"
    };
    check_mm(kernel, x, out, m, k, n)?;
    if w.block_size == 0 {
        return Err(invalid(kernel, "block_size must be > 0"));
    }
    let rb = if w.four_bit { k.div_ceil(2) } else { k };
    let nb = k.div_ceil(w.block_size);
    let too_big = || invalid(kernel, "weight size overflows");
    check_len(
        kernel,
        "w_q",
        w.codes.len(),
        n.checked_mul(rb).ok_or_else(too_big)?,
    )?;
    let ns = n.checked_mul(nb).ok_or_else(too_big)?;
    check_len(kernel, "scale", w.scale.len(), ns)?;
    if let Some(zp) = w.zp {
        check_len(kernel, "zp", zp.len(), ns)?;
    }
    let signed4 = w.zp.is_none();
    let decode = |j0: usize, rows: usize, panel: &mut [f32]| {
        for (r, dst) in panel.chunks_exact_mut(k).take(rows).enumerate() {
            let j = j0 + r;
            let row = &w.codes[j * rb..(j + 1) * rb];
            let (sc, zp) = (
                &w.scale[j * nb..(j + 1) * nb],
                w.zp.map(|z| &z[j * nb..(j + 1) * nb]),
            );
            // one block at a time: its scale and zero point hoisted, the
            // codes widened in a branch-free loop
            for (b, d) in dst.chunks_mut(w.block_size).enumerate() {
                let (s, z) = (sc[b], zp.map_or(0.0, |z| z[b]));
                let e0 = b * w.block_size;
                if !w.four_bit {
                    for (o, &c) in d.iter_mut().zip(&row[e0..]) {
                        *o = (c as i8 as f32 - z) * s;
                    }
                } else if e0.is_multiple_of(2) {
                    let bytes = &row[e0 / 2..];
                    for (pair, &byte) in d.chunks_mut(2).zip(bytes) {
                        let (lo, hi) = nibbles(byte, signed4);
                        pair[0] = (lo - z) * s;
                        if let Some(o) = pair.get_mut(1) {
                            *o = (hi - z) * s;
                        }
                    }
                } else {
                    // odd block size (a hand-built thunk): element by element
                    for (i, o) in d.iter_mut().enumerate() {
                        let e = e0 + i;
                        let (lo, hi) = nibbles(row[e / 2], signed4);
                        *o = (if e.is_multiple_of(2) { lo } else { hi } - z) * s;
                    }
                }
            }
        }
    };
    matmul_rows(x, out, m, k, n, &decode);
    Ok(())
}

/// `dst = x @ (fp8(w)·scale[row])ᵀ`; `scale` has one f32 per output row.
#[allow(clippy::too_many_arguments)]
pub fn dequant_matmul_fp8(
    x: &[f32],
    w: &[u8],
    scale: &[f32],
    out: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
    e5m2: bool,
) -> Result<()> {
    let kernel = "dequant_matmul_fp8";
    check_mm(kernel, x, out, m, k, n)?;
    let nk = n
        .checked_mul(k)
        .ok_or_else(|| invalid(kernel, "n·k overflows"))?;
    check_len(kernel, "w_q", w.len(), nk)?;
    check_len(kernel, "scale", scale.len(), n)?;
    let table = &fp8_tables()[e5m2 as usize];
    let decode = |j0: usize, rows: usize, panel: &mut [f32]| {
        for (r, dst) in panel.chunks_exact_mut(k).take(rows).enumerate() {
            let j = j0 + r;
            let s = scale[j];
            for (d, &c) in dst.iter_mut().zip(&w[j * k..(j + 1) * k]) {
                *d = table[c as usize] * s;
            }
        }
    };
    matmul_rows(x, out, m, k, n, &decode);
    Ok(())
}

/// `dst = x @ (e2m1(w)·e4m3(block_scale)·global)ᵀ`, 16-element blocks.
#[allow(clippy::too_many_arguments)]
pub fn dequant_matmul_nvfp4(
    x: &[f32],
    w: &[u8],
    block_scale: &[u8],
    global: f32,
    out: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
) -> Result<()> {
    let kernel = "dequant_matmul_nvfp4";
    check_mm(kernel, x, out, m, k, n)?;
    let (rb, nb) = (k.div_ceil(2), k.div_ceil(16));
    let over = || invalid(kernel, "weight size overflows");
    check_len(kernel, "w_q", w.len(), n.checked_mul(rb).ok_or_else(over)?)?;
    check_len(
        kernel,
        "scale",
        block_scale.len(),
        n.checked_mul(nb).ok_or_else(over)?,
    )?;
    let decode = |j0: usize, rows: usize, panel: &mut [f32]| {
        for (r, dst) in panel.chunks_exact_mut(k).take(rows).enumerate() {
            let j = j0 + r;
            let row = &w[j * rb..(j + 1) * rb];
            let bs = &block_scale[j * nb..(j + 1) * nb];
            let e4m3 = &fp8_tables()[0];
            for (b, d) in dst.chunks_mut(16).enumerate() {
                // (E2M1 · E4M3) is exact in f32: one rounding for the global scale
                let be = e4m3[bs[b] as usize];
                for (pair, &byte) in d.chunks_mut(2).zip(&row[8 * b..]) {
                    pair[0] = e2m1_to_f32(byte & 0xF) * be * global;
                    if let Some(o) = pair.get_mut(1) {
                        *o = e2m1_to_f32(byte >> 4) * be * global;
                    }
                }
            }
        }
    };
    matmul_rows(x, out, m, k, n, &decode);
    Ok(())
}

/// One operand of [`scaled_matmul`]: `[rows, k]` codes and their scales.
#[derive(Debug, Clone, Copy)]
pub struct ScaledOperand<'a> {
    /// Codes, row-major.
    pub codes: &'a [u8],
    /// Scales under the matmul's layout.
    pub scale: &'a [f32],
    /// Code format.
    pub fmt: ScaledFormat,
}

impl ScaledOperand<'_> {
    fn check(
        &self,
        kernel: &'static str,
        rows: usize,
        k: usize,
        layout: ScaleLayout,
    ) -> Result<()> {
        let n = rows
            .checked_mul(k)
            .ok_or_else(|| invalid(kernel, "operand size overflows"))?;
        check_len(kernel, "codes", self.codes.len(), n)?;
        check_len(
            kernel,
            "scale",
            self.scale.len(),
            scale_count(layout, rows, k),
        )
    }

    /// Decodes rows `r0..r0 + rows` into `dst` (`k` each), scales applied.
    fn decode(&self, layout: ScaleLayout, r0: usize, k: usize, dst: &mut [f32]) {
        for (i, d) in dst.chunks_exact_mut(k).enumerate() {
            let r = r0 + i;
            for (c, (v, &b)) in d
                .iter_mut()
                .zip(&self.codes[r * k..(r + 1) * k])
                .enumerate()
            {
                *v = decode_scaled(self.fmt, b) * self.scale[scale_index(layout, r, c, k)];
            }
        }
    }
}

/// Low-precision TN GEMM: `dst[m, n] = (lhs·s_l) @ (rhs·s_r)ᵀ (+ bias)`.
pub fn scaled_matmul(
    lhs: ScaledOperand<'_>,
    rhs: ScaledOperand<'_>,
    bias: Option<&[f32]>,
    layout: ScaleLayout,
    out: &mut [f32],
    (m, k, n): (usize, usize, usize),
) -> Result<()> {
    let kernel = "scaled_matmul";
    lhs.check(kernel, m, k, layout)?;
    rhs.check(kernel, n, k, layout)?;
    let mn = m
        .checked_mul(n)
        .ok_or_else(|| invalid(kernel, "m·n overflows"))?;
    check_len(kernel, "dst", out.len(), mn)?;
    if let Some(b) = bias {
        check_len(kernel, "bias", b.len(), n)?;
    }
    let mut a = vec![0f32; m * k];
    lhs.decode(layout, 0, k, &mut a);
    let decode = |j0: usize, rows: usize, panel: &mut [f32]| {
        rhs.decode(layout, j0, k, &mut panel[..rows * k]);
    };
    matmul_rows(&a, out, m, k, n, &decode);
    if let Some(b) = bias {
        for row in out[..mn].chunks_exact_mut(n.max(1)) {
            row.iter_mut().zip(b).for_each(|(o, &bv)| *o += bv);
        }
    }
    Ok(())
}

/// `codes = encode(x / scale)` over a `[rows, cols]` operand.
pub fn scaled_quantize(
    x: &[f32],
    scale: &[f32],
    out: &mut [u8],
    rc: (usize, usize),
    fmt: ScaledFormat,
    layout: ScaleLayout,
) -> Result<()> {
    let f = |v: f32, s: f32| encode_scaled(fmt, v / s);
    map_scaled("scaled_quantize", x, scale, out, rc, layout, f)
}

/// `dst = decode(codes) · scale` over a `[rows, cols]` operand.
pub fn scaled_dequantize(
    codes: &[u8],
    scale: &[f32],
    out: &mut [f32],
    rc: (usize, usize),
    fmt: ScaledFormat,
    layout: ScaleLayout,
) -> Result<()> {
    let f = |c: u8, s: f32| decode_scaled(fmt, c) * s;
    map_scaled("scaled_dequantize", codes, scale, out, rc, layout, f)
}

/// `out[r, c] = f(input[r, c], scale of (r, c))` with the length checks.
fn map_scaled<I: Copy + Sync, O: Send>(
    kernel: &'static str,
    input: &[I],
    scale: &[f32],
    out: &mut [O],
    (rows, cols): (usize, usize),
    layout: ScaleLayout,
    f: impl Fn(I, f32) -> O + Sync,
) -> Result<()> {
    let len = rows
        .checked_mul(cols)
        .ok_or_else(|| invalid(kernel, "size overflows"))?;
    check_len(kernel, "input", input.len(), len)?;
    let ns = scale_count(layout, rows, cols);
    check_len(kernel, "scale", scale.len(), ns)?;
    check_len(kernel, "dst", out.len(), len)?;
    for_rows(&mut out[..len], cols, |r, row| {
        for (c, o) in row.iter_mut().enumerate() {
            *o = f(input[r * cols + c], scale[scale_index(layout, r, c, cols)]);
        }
    });
    Ok(())
}

/// Per scale group `max|x| / fmt_max`, or 1 where the group is all zeros
/// (NaN propagates).
pub fn scaled_quant_scale(
    x: &[f32],
    out: &mut [f32],
    (rows, cols): (usize, usize),
    fmt: ScaledFormat,
    layout: ScaleLayout,
) -> Result<()> {
    let kernel = "scaled_quant_scale";
    let len = rows
        .checked_mul(cols)
        .ok_or_else(|| invalid(kernel, "size overflows"))?;
    check_len(kernel, "x", x.len(), len)?;
    let ns = scale_count(layout, rows, cols);
    check_len(kernel, "dst", out.len(), ns)?;
    let amax = |v: &[f32]| {
        v.iter().fold(0f32, |a, &e| {
            if a.is_nan() || e.is_nan() {
                f32::NAN
            } else {
                a.max(e.abs())
            }
        })
    };
    let finish = |a: f32| {
        if a == 0.0 {
            1.0
        } else {
            a / fmt.max_value()
        }
    };
    let x = &x[..len];
    match layout {
        ScaleLayout::PerTensor => out[0] = finish(amax(x)),
        ScaleLayout::PerRow => {
            for (o, row) in out.iter_mut().zip(x.chunks_exact(cols.max(1))) {
                *o = finish(amax(row));
            }
        }
        ScaleLayout::Block { size } => {
            let s = size.max(1) as usize;
            let nb = cols.div_ceil(s);
            for r in 0..rows {
                let row = &x[r * cols..(r + 1) * cols];
                for (b, chunk) in row.chunks(s).enumerate() {
                    out[r * nb + b] = finish(amax(chunk));
                }
            }
        }
    }
    Ok(())
}

/// Runs `f(r, row)` over the `cols`-long rows of `out`, in parallel when
/// the operand is large.
fn for_rows<T: Send>(out: &mut [T], cols: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    use rayon::prelude::*;
    if cols == 0 {
        return;
    }
    let per = super::super::rows_per_task(out.len() / cols, cols);
    out.par_chunks_mut(per * cols)
        .enumerate()
        .for_each(|(t, chunk)| {
            for (i, row) in chunk.chunks_exact_mut(cols).enumerate() {
                f(t * per + i, row);
            }
        });
}

#[cfg(test)]
#[path = "formats_tests.rs"]
mod tests;
