//! Quantised weight formats: every GGUF tensor type that real files use, the
//! seed's 128-element `Q1_0` / `Q2_0`, legacy block Int8/Int4, FP8 and NVFP4,
//! plus the scaled-matmul formats and scale layouts.
//!
//! Block geometry facts (elements per block, bytes per block) follow ggml's
//! `ggml_type_traits` and the GGUF specification.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A GGUF / ggml tensor type.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
    /// bfloat16.
    #[serde(rename = "bf16")]
    BF16,
    /// 32 weights: f16 scale + 16 bytes of 4-bit values (offset 8).
    Q4_0,
    /// 32 weights: f16 scale, f16 min + 16 bytes of 4-bit values.
    Q4_1,
    /// 32 weights: f16 scale, 4 bytes of high bits, 16 bytes of low nibbles.
    Q5_0,
    /// 32 weights: f16 scale, f16 min, 4 bytes high bits, 16 bytes nibbles.
    Q5_1,
    /// 32 weights: f16 scale + 32 int8.
    Q8_0,
    /// 32 weights: f16 scale, f16 sum + 32 int8 (activation format).
    Q8_1,
    /// 256 weights: 16 4-bit scale/min pairs, 2-bit values, f16 d and dmin.
    #[serde(rename = "q2_k")]
    Q2K,
    /// 256 weights: high-bit mask, 2-bit low bits, 12 bytes of 6-bit scales, f16 d.
    #[serde(rename = "q3_k")]
    Q3K,
    /// 256 weights: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 4-bit values.
    #[serde(rename = "q4_k")]
    Q4K,
    /// 256 weights: as Q4_K plus 32 bytes of fifth bits.
    #[serde(rename = "q5_k")]
    Q5K,
    /// 256 weights: 4-bit low, 2-bit high, 16 int8 scales, f16 d.
    #[serde(rename = "q6_k")]
    Q6K,
    /// 256 weights: f32 d, 256 int8, 16 int16 block sums (activation format).
    #[serde(rename = "q8_k")]
    Q8K,
    /// The seed's 1-bit format: 128 weights, f16 scale + 16 bytes of sign bits.
    Q1_0,
    /// The seed's 2-bit format: 128 weights, f16 scale + 32 bytes of 2-bit codes.
    Q2_0,
}

/// Every [`GgmlType`].
pub const ALL_GGML_TYPES: [GgmlType; 17] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
    GgmlType::Q8K,
    GgmlType::Q1_0,
    GgmlType::Q2_0,
];

impl GgmlType {
    /// Elements per block.
    pub fn block_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 => 32,
            Q2K | Q3K | Q4K | Q5K | Q6K | Q8K => 256,
            Q1_0 | Q2_0 => 128,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        use GgmlType::*;
        match self {
            F32 => 4,
            F16 | BF16 => 2,
            Q4_0 => 18,
            Q4_1 => 20,
            Q5_0 => 22,
            Q5_1 => 24,
            Q8_0 => 34,
            Q8_1 => 36,
            Q2K => 84,
            Q3K => 110,
            Q4K => 144,
            Q5K => 176,
            Q6K => 210,
            Q8K => 292,
            Q1_0 => 18,
            Q2_0 => 34,
        }
    }

    /// The numeric type id in GGUF files; `None` for the seed's own formats.
    pub fn ggml_id(self) -> Option<u32> {
        use GgmlType::*;
        Some(match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q5_0 => 6,
            Q5_1 => 7,
            Q8_0 => 8,
            Q8_1 => 9,
            Q2K => 10,
            Q3K => 11,
            Q4K => 12,
            Q5K => 13,
            Q6K => 14,
            Q8K => 15,
            BF16 => 30,
            Q1_0 | Q2_0 => return None,
        })
    }

    /// Inverse of [`GgmlType::ggml_id`].
    pub fn from_ggml_id(id: u32) -> Option<GgmlType> {
        ALL_GGML_TYPES.into_iter().find(|t| t.ggml_id() == Some(id))
    }

    /// Name as GGUF tools print it (`Q4_K`, `F16`).
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            BF16 => "BF16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2K => "Q2_K",
            Q3K => "Q3_K",
            Q4K => "Q4_K",
            Q5K => "Q5_K",
            Q6K => "Q6_K",
            Q8K => "Q8_K",
            Q1_0 => "Q1_0",
            Q2_0 => "Q2_0",
        }
    }

    /// Bytes of one row of `k` elements, or `None` if `k` is not a multiple
    /// of the block size.
    pub fn row_bytes(self, k: usize) -> Option<usize> {
        k.is_multiple_of(self.block_size())
            .then(|| k / self.block_size() * self.block_bytes())
    }
}

/// How a quantised matmul's weight is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QuantScheme {
    /// GGUF packed blocks, rows of `k` along the reduction axis (ggml layout).
    Gguf(GgmlType),
    /// Block int8 with a per-block f32 scale (and zero point if asymmetric).
    Int8 {
        /// Elements sharing a scale.
        block_size: u32,
        /// Has a per-block zero point.
        asymmetric: bool,
    },
    /// Block int4 (two per byte) with per-block f32 scale (and zero point).
    Int4 {
        /// Elements sharing a scale.
        block_size: u32,
        /// Has a per-block zero point.
        asymmetric: bool,
    },
    /// FP8 E4M3 codes with an f32 scale per output row.
    Fp8E4m3,
    /// FP8 E5M2 codes with an f32 scale per output row.
    Fp8E5m2,
    /// NVFP4: E2M1 codes in 16-element blocks, an E4M3 scale per block and one
    /// f32 global scale.
    Nvfp4,
}

impl QuantScheme {
    /// Elements per block.
    pub fn block_size(self) -> usize {
        match self {
            QuantScheme::Gguf(t) => t.block_size(),
            QuantScheme::Int8 { block_size, .. } | QuantScheme::Int4 { block_size, .. } => {
                block_size as usize
            }
            QuantScheme::Fp8E4m3 | QuantScheme::Fp8E5m2 => 1,
            QuantScheme::Nvfp4 => 16,
        }
    }

    /// Bytes of packed codes per block (scales kept in separate tensors are
    /// not counted, GGUF's in-block scales are).
    pub fn block_bytes(self) -> usize {
        match self {
            QuantScheme::Gguf(t) => t.block_bytes(),
            QuantScheme::Int8 { block_size, .. } => block_size as usize,
            QuantScheme::Int4 { block_size, .. } => (block_size as usize).div_ceil(2),
            QuantScheme::Fp8E4m3 | QuantScheme::Fp8E5m2 => 1,
            QuantScheme::Nvfp4 => 8,
        }
    }

    /// Bytes of one packed row of `k` elements, or `None` if `k` is not a
    /// multiple of the block size.
    pub fn row_bytes(self, k: usize) -> Option<usize> {
        let b = self.block_size();
        (b > 0 && k.is_multiple_of(b)).then(|| k / b * self.block_bytes())
    }

    /// Number of extra tensors (scales, zero points) the matmul takes after
    /// the packed weight.
    pub fn aux_inputs(self) -> usize {
        match self {
            QuantScheme::Gguf(_) => 0,
            QuantScheme::Int8 { asymmetric, .. } | QuantScheme::Int4 { asymmetric, .. } => {
                1 + asymmetric as usize
            }
            QuantScheme::Fp8E4m3 | QuantScheme::Fp8E5m2 => 1,
            QuantScheme::Nvfp4 => 2,
        }
    }
}

impl fmt::Display for QuantScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuantScheme::Gguf(t) => f.write_str(t.name()),
            QuantScheme::Int8 {
                block_size,
                asymmetric,
            } => write!(f, "int8/{block_size}{}", if *asymmetric { "a" } else { "" }),
            QuantScheme::Int4 {
                block_size,
                asymmetric,
            } => write!(f, "int4/{block_size}{}", if *asymmetric { "a" } else { "" }),
            QuantScheme::Fp8E4m3 => f.write_str("fp8_e4m3"),
            QuantScheme::Fp8E5m2 => f.write_str("fp8_e5m2"),
            QuantScheme::Nvfp4 => f.write_str("nvfp4"),
        }
    }
}

/// Element format of a scaled (low-precision) matmul operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScaledFormat {
    /// FP8 E4M3 (max 448), one byte per element.
    Fp8E4m3,
    /// FP8 E5M2 (max 57344), one byte per element.
    Fp8E5m2,
    /// Symmetric int8, one byte per element.
    Int8,
}

impl ScaledFormat {
    /// Largest finite magnitude the format represents.
    pub fn max_value(self) -> f32 {
        match self {
            ScaledFormat::Fp8E4m3 => 448.0,
            ScaledFormat::Fp8E5m2 => 57344.0,
            ScaledFormat::Int8 => 127.0,
        }
    }
}

/// Where scaled-format scales live relative to a `[rows, cols]` operand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScaleLayout {
    /// One scale for the whole tensor: scale shape `[1]`.
    PerTensor,
    /// One scale per row: scale shape `[rows]`.
    PerRow,
    /// One scale per `size` consecutive elements of a row:
    /// scale shape `[rows, ceil(cols / size)]`.
    Block {
        /// Elements per scale block.
        size: u32,
    },
}

impl ScaleLayout {
    /// Scale tensor dims for a `[rows, cols]` operand.
    pub fn scale_dims(self, rows: usize, cols: usize) -> Vec<usize> {
        match self {
            ScaleLayout::PerTensor => vec![1],
            ScaleLayout::PerRow => vec![rows],
            ScaleLayout::Block { size } => vec![rows, cols.div_ceil(size.max(1) as usize)],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ggml_geometry() {
        // bits per weight of the common types, from the block geometry
        let bpw = |t: GgmlType| t.block_bytes() as f64 * 8.0 / t.block_size() as f64;
        assert_eq!(bpw(GgmlType::Q4_0), 4.5);
        assert_eq!(bpw(GgmlType::Q8_0), 8.5);
        assert_eq!(bpw(GgmlType::Q4K), 4.5);
        assert_eq!(bpw(GgmlType::Q6K), 6.5625);
        assert_eq!(GgmlType::Q4K.row_bytes(576), None);
        assert_eq!(GgmlType::Q4_1.row_bytes(576), Some(18 * 20));
        for t in ALL_GGML_TYPES {
            if let Some(id) = t.ggml_id() {
                assert_eq!(GgmlType::from_ggml_id(id), Some(t));
            }
        }
    }

    #[test]
    fn ggml_names_serialise_as_python_spells_them() {
        let j = serde_json::to_string(&GgmlType::BF16).unwrap();
        assert_eq!(j, r#""bf16""#);
        assert_eq!(serde_json::to_string(&GgmlType::Q4_0).unwrap(), r#""q4_0""#);
    }

    #[test]
    fn scheme_serde() {
        let s = QuantScheme::Gguf(GgmlType::Q4K);
        assert_eq!(serde_json::to_string(&s).unwrap(), r#"{"gguf":"q4_k"}"#);
        let s = QuantScheme::Int8 {
            block_size: 32,
            asymmetric: true,
        };
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<QuantScheme>(&j).unwrap(), s);
        assert_eq!(s.aux_inputs(), 2);
    }
}
