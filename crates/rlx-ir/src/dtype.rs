//! Element types, their sizes and the promotion lattice used by binary ops.
//!
//! Promotion follows the ML-framework convention (PyTorch/JAX) rather than
//! numpy's value-based one: the result category is the highest of
//! bool < unsigned/signed integer < float < complex, and within a category
//! the wider type wins. Mixing `f16` with `bf16` gives `f32`; mixing signed
//! and unsigned integers gives the smallest signed type that holds both.

use crate::error::{IrError, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// An element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16 (8-bit exponent, 7-bit mantissa).
    BF16,
    /// IEEE binary64.
    F64,
    /// Signed 8-bit integer.
    I8,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 8-bit integer (also the storage type of packed quant blocks).
    U8,
    /// Unsigned 32-bit integer.
    U32,
    /// Boolean, one byte per element.
    Bool,
    /// Complex with two f32 parts.
    C64,
}

/// Every dtype, in declaration order.
pub const ALL_DTYPES: [DType; 12] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::F64,
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U32,
    DType::Bool,
    DType::C64,
];

impl DType {
    /// Bytes per element.
    pub fn size_bytes(self) -> usize {
        match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::C64 => 8,
        }
    }

    /// Canonical short name (`f32`, `bf16`, `bool`...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U32 => "u32",
            DType::Bool => "bool",
            DType::C64 => "c64",
        }
    }

    /// The numpy name of the same type (`float32`, `bool`, `complex64`).
    /// `bf16` has no numpy type; it reports `bfloat16`.
    pub fn numpy_name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F64 => "float64",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::U8 => "uint8",
            DType::U32 => "uint32",
            DType::Bool => "bool",
            DType::C64 => "complex64",
        }
    }

    /// Floating point (f16, bf16, f32, f64).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    /// f32, f16 or bf16: the floats a ScatterND converts between when its
    /// updates and data differ (rounding to nearest even on narrowing).
    pub fn converts_on_write(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Any integer type, signed or not (not bool).
    pub fn is_int(self) -> bool {
        matches!(
            self,
            DType::I8 | DType::I16 | DType::I32 | DType::I64 | DType::U8 | DType::U32
        )
    }

    /// Signed integer.
    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// Complex.
    pub fn is_complex(self) -> bool {
        matches!(self, DType::C64)
    }

    /// Float or complex: the types on which transcendental functions are defined.
    pub fn is_inexact(self) -> bool {
        self.is_float() || self.is_complex()
    }

    fn category(self) -> u8 {
        match self {
            DType::Bool => 0,
            DType::U8 | DType::U32 | DType::I8 | DType::I16 | DType::I32 | DType::I64 => 1,
            DType::F16 | DType::BF16 | DType::F32 | DType::F64 => 2,
            DType::C64 => 3,
        }
    }

    /// Result type of a binary op on `self` and `other` (see the module doc).
    pub fn promote(self, other: DType) -> DType {
        use DType::*;
        if self == other {
            return self;
        }
        let (ca, cb) = (self.category(), other.category());
        if ca != cb {
            // The higher category wins outright (int + f16 = f16, f64 + c64 = c64).
            return if ca > cb { self } else { other };
        }
        match ca {
            2 => match (self, other) {
                (F16, BF16) | (BF16, F16) => F32,
                _ => {
                    if self.size_bytes() >= other.size_bytes() {
                        self
                    } else {
                        other
                    }
                }
            },
            1 => {
                let (sa, sb) = (self.is_signed_int(), other.is_signed_int());
                if sa == sb {
                    return if self.size_bytes() >= other.size_bytes() {
                        self
                    } else {
                        other
                    };
                }
                let (s, u) = if sa { (self, other) } else { (other, self) };
                if s.size_bytes() > u.size_bytes() {
                    s
                } else {
                    match u.size_bytes() {
                        1 => I16,
                        2 => I32,
                        _ => I64,
                    }
                }
            }
            _ => self,
        }
    }

    /// Parse a dtype from its short name or its numpy / torch spelling
    /// (`f32`, `float32`, `float`, `half`, `bfloat16`, `int64`, `long`, `bool`, ...).
    pub fn parse(s: &str) -> Result<DType> {
        let t = s.trim().to_ascii_lowercase();
        let t = t
            .strip_prefix("torch.")
            .or_else(|| t.strip_prefix("np."))
            .or_else(|| t.strip_prefix("numpy."))
            .unwrap_or(&t);
        Ok(match t {
            "f32" | "float32" | "float" | "single" | "<f4" | "f4" => DType::F32,
            "f16" | "float16" | "half" | "<f2" | "f2" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "f64" | "float64" | "double" | "<f8" | "f8" => DType::F64,
            "i8" | "int8" | "|i1" | "i1" => DType::I8,
            "i16" | "int16" | "short" | "<i2" | "i2" => DType::I16,
            "i32" | "int32" | "int" | "<i4" | "i4" => DType::I32,
            "i64" | "int64" | "long" | "<i8" => DType::I64,
            "u8" | "uint8" | "|u1" | "u1" => DType::U8,
            "u32" | "uint32" | "<u4" | "u4" => DType::U32,
            "bool" | "bool_" | "|b1" | "b1" => DType::Bool,
            "c64" | "complex64" | "<c8" | "c8" => DType::C64,
            _ => return Err(IrError::UnknownDType(s.to_string())),
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = IrError;
    fn from_str(s: &str) -> Result<Self> {
        DType::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_names_round_trip() {
        for d in ALL_DTYPES {
            assert_eq!(DType::parse(d.name()).unwrap(), d);
            assert_eq!(DType::parse(d.numpy_name()).unwrap(), d);
            assert!(d.size_bytes() >= 1);
        }
        assert_eq!(DType::C64.size_bytes(), 8);
        assert_eq!(DType::BF16.size_bytes(), 2);
    }

    #[test]
    fn promotion() {
        use DType::*;
        assert_eq!(F16.promote(BF16), F32);
        assert_eq!(F32.promote(F64), F64);
        assert_eq!(I32.promote(F16), F16);
        assert_eq!(U8.promote(I8), I16);
        assert_eq!(U32.promote(I32), I64);
        assert_eq!(U8.promote(I32), I32);
        assert_eq!(Bool.promote(U8), U8);
        assert_eq!(F64.promote(C64), C64);
        for a in ALL_DTYPES {
            for b in ALL_DTYPES {
                assert_eq!(a.promote(b), b.promote(a), "{a} {b}");
            }
        }
    }

    #[test]
    fn unknown_dtype_is_an_error() {
        let e = DType::parse("float7").unwrap_err();
        assert_eq!(e.to_string(), "[dtype] unknown dtype 'float7'");
    }
}
