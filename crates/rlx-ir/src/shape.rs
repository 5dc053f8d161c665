//! Dimensions (static or symbolic), shapes, and numpy broadcasting.
//!
//! A symbolic dimension (`Dim::Sym("seq")`) stands for a size bound at run
//! time. Broadcasting treats two dims as compatible when they are equal, or
//! when one is the static size 1. A symbol against a static size other than 1
//! is refused rather than guessed: the symbol might be bound to 1 at run time
//! and the result shape would then be wrong.

use crate::dtype::DType;
use crate::error::{IrError, Result};
use serde::{Deserialize, Serialize};
use std::fmt;

/// One dimension: a static size or a named symbol bound at run time.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Dim {
    /// A size known when the graph is built.
    Static(usize),
    /// A size named by a symbol (e.g. `"seq"`), bound when the graph runs.
    Sym(String),
}

impl Dim {
    /// The static size, if any.
    pub fn as_static(&self) -> Option<usize> {
        match self {
            Dim::Static(n) => Some(*n),
            Dim::Sym(_) => None,
        }
    }

    /// True when this is the static size 1.
    pub fn is_one(&self) -> bool {
        matches!(self, Dim::Static(1))
    }
}

impl From<usize> for Dim {
    fn from(n: usize) -> Self {
        Dim::Static(n)
    }
}

impl From<&str> for Dim {
    fn from(s: &str) -> Self {
        Dim::Sym(s.to_string())
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}

/// The most bytes one tensor may hold: 2^48 (256 TiB). Far past any
/// memory, far below where byte offsets (tagged at bits 62 and 63) and the
/// planner's sums of sizes could overflow.
pub const MAX_TENSOR_BYTES: u64 = 1 << 48;

/// Dimensions plus element type.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shape {
    /// Dimensions, outermost first (row-major).
    pub dims: Vec<Dim>,
    /// Element type.
    pub dtype: DType,
}

impl Shape {
    /// A shape from dims and dtype.
    pub fn new(dims: Vec<Dim>, dtype: DType) -> Self {
        Shape { dims, dtype }
    }

    /// A fully static shape.
    pub fn of(dims: &[usize], dtype: DType) -> Self {
        Shape {
            dims: dims.iter().map(|&d| Dim::Static(d)).collect(),
            dtype,
        }
    }

    /// A rank-0 shape.
    pub fn scalar(dtype: DType) -> Self {
        Shape {
            dims: Vec::new(),
            dtype,
        }
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// Dimension `i` (panics on a bad index; use only with a checked axis).
    pub fn dim(&self, i: usize) -> &Dim {
        &self.dims[i]
    }

    /// All dims as static sizes, or `None` if any is symbolic.
    pub fn static_dims(&self) -> Option<Vec<usize>> {
        self.dims.iter().map(Dim::as_static).collect()
    }

    /// True when no dim is symbolic.
    pub fn is_static(&self) -> bool {
        self.dims.iter().all(|d| d.as_static().is_some())
    }

    /// Element count, or `None` if any dim is symbolic.
    pub fn numel(&self) -> Option<usize> {
        self.dims.iter().try_fold(1usize, |acc, d| {
            d.as_static().map(|n| acc.saturating_mul(n))
        })
    }

    /// Bytes of a dense buffer of this shape, or `None` if symbolic.
    /// Saturates instead of wrapping; [`Shape::check_bytes`] (run on every
    /// node the builder adds and on every bound shape at compile) keeps
    /// real shapes far below that.
    pub fn size_bytes(&self) -> Option<usize> {
        self.numel()
            .map(|n| n.saturating_mul(self.dtype.size_bytes()))
    }

    /// Check that a dense buffer of this shape fits [`MAX_TENSOR_BYTES`],
    /// with symbols bound by `bind` (an unbound symbol counts as 1). The
    /// error, a shape error of `op`, names `what` and the dim at which the
    /// size passes the limit. Checked arithmetic throughout: no overflow.
    pub fn check_bytes(
        &self,
        op: &str,
        what: &str,
        bind: &dyn Fn(&str) -> Option<usize>,
    ) -> Result<()> {
        let mut bytes = self.dtype.size_bytes() as u64;
        for (i, d) in self.dims.iter().enumerate() {
            let (n, label) = match d {
                Dim::Static(n) => (*n, format!("dim {i} ({n})")),
                Dim::Sym(s) => match bind(s) {
                    Some(n) => (n, format!("dim {i} ('{s}' = {n})")),
                    None => continue,
                },
            };
            match bytes.checked_mul(n as u64) {
                Some(b) if b <= MAX_TENSOR_BYTES => bytes = b,
                _ => {
                    return Err(IrError::shape(
                        op,
                        format!(
                            "{what} {self}: {label} takes the size past {MAX_TENSOR_BYTES} bytes \
                             (2^48, the most one tensor may hold)"
                        ),
                    ))
                }
            }
        }
        Ok(())
    }

    /// Same dims, another dtype.
    pub fn with_dtype(&self, dtype: DType) -> Shape {
        Shape {
            dims: self.dims.clone(),
            dtype,
        }
    }

    /// Same dtype, other dims.
    pub fn with_dims(&self, dims: Vec<Dim>) -> Shape {
        Shape {
            dims,
            dtype: self.dtype,
        }
    }

    /// The last dim, or an error naming `op` for rank-0 shapes.
    pub fn last(&self, op: &str) -> Result<&Dim> {
        self.dims
            .last()
            .ok_or_else(|| IrError::shape(op, format!("needs rank >= 1, got scalar {self}")))
    }

    /// Normalise a possibly negative axis against this shape's rank.
    pub fn axis(&self, op: &str, axis: i64) -> Result<usize> {
        normalize_axis(op, axis, self.rank())
    }

    /// `[2, seq, 576]` without the dtype.
    pub fn dims_string(&self) -> String {
        dims_string(&self.dims)
    }
}

/// `[2, seq, 576]`.
pub fn dims_string(dims: &[Dim]) -> String {
    let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.dims_string())
    }
}

/// Map `axis` in `[-rank, rank)` to `[0, rank)`.
pub fn normalize_axis(op: &str, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return Err(IrError::Axis {
            op: op.to_string(),
            axis,
            rank,
        });
    }
    Ok(a as usize)
}

/// Broadcast two dims (numpy rules; see the module doc for symbols).
pub fn broadcast_dim(a: &Dim, b: &Dim) -> Option<Dim> {
    if a == b {
        return Some(a.clone());
    }
    if a.is_one() {
        return Some(b.clone());
    }
    if b.is_one() {
        return Some(a.clone());
    }
    None
}

/// Numpy broadcast of two dim lists; `Err` carries a message naming both.
pub fn broadcast_dims(a: &[Dim], b: &[Dim]) -> std::result::Result<Vec<Dim>, String> {
    let r = a.len().max(b.len());
    let mut out = Vec::with_capacity(r);
    for i in 0..r {
        let da = if i + a.len() >= r {
            a[i + a.len() - r].clone()
        } else {
            Dim::Static(1)
        };
        let db = if i + b.len() >= r {
            b[i + b.len() - r].clone()
        } else {
            Dim::Static(1)
        };
        match broadcast_dim(&da, &db) {
            Some(d) => out.push(d),
            None => {
                return Err(format!(
                    "cannot broadcast {} with {} (dim {i}: {da} vs {db})",
                    dims_string(a),
                    dims_string(b)
                ))
            }
        }
    }
    Ok(out)
}

/// Broadcast any number of shapes' dims, naming `op` in the error.
pub fn broadcast_all(op: &str, shapes: &[&Shape]) -> Result<Vec<Dim>> {
    let mut acc: Vec<Dim> = Vec::new();
    for s in shapes {
        acc = broadcast_dims(&acc, &s.dims).map_err(|m| IrError::shape(op, m))?;
    }
    Ok(acc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(v: &[usize]) -> Vec<Dim> {
        v.iter().map(|&x| Dim::Static(x)).collect()
    }

    #[test]
    fn broadcast_basic() {
        assert_eq!(
            broadcast_dims(&d(&[2, 1, 4]), &d(&[3, 1])).unwrap(),
            d(&[2, 3, 4])
        );
        assert_eq!(broadcast_dims(&d(&[]), &d(&[5])).unwrap(), d(&[5]));
        assert!(broadcast_dims(&d(&[2, 3]), &d(&[4, 3])).is_err());
    }

    #[test]
    fn broadcast_symbols() {
        let a = vec![Dim::from("seq"), Dim::Static(8)];
        let b = vec![Dim::Static(1), Dim::Static(8)];
        assert_eq!(broadcast_dims(&a, &b).unwrap(), a);
        let c = vec![Dim::Static(4), Dim::Static(8)];
        let e = broadcast_dims(&a, &c).unwrap_err();
        assert!(e.contains("[seq, 8]") && e.contains("[4, 8]"), "{e}");
    }

    #[test]
    fn display_and_serde() {
        let s = Shape::new(vec![Dim::Static(2), Dim::from("seq")], DType::F16);
        assert_eq!(s.to_string(), "f16[2, seq]");
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(j, r#"{"dims":[2,"seq"],"dtype":"f16"}"#);
        let back: Shape = serde_json::from_str(&j).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn byte_size_is_checked() {
        let none = |_: &str| None;
        let big = |dims: &[usize]| Shape::of(dims, DType::F32);
        assert!(big(&[1 << 20, 1 << 20])
            .check_bytes("input", "x", &none)
            .is_ok());
        let e = big(&[1 << 62, 4])
            .check_bytes("input", "x", &none)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("[input] x f32[4611686018427387904, 4]: dim 0"),
            "{e}"
        );
        let e = big(&[1 << 32, 1 << 32, 16])
            .check_bytes("input", "x", &none)
            .unwrap_err()
            .to_string();
        assert!(e.contains("dim 1 (4294967296)"), "{e}");
        let sym = Shape::new(vec!["seq".into(), 4.into()], DType::F32);
        assert!(sym.check_bytes("input", "x", &none).is_ok());
        let e = sym
            .check_bytes("compile", "x", &|_| Some(1 << 62))
            .unwrap_err()
            .to_string();
        assert!(e.contains("dim 0 ('seq' = 4611686018427387904)"), "{e}");
        assert_eq!(big(&[usize::MAX, 4]).size_bytes(), Some(usize::MAX));
    }

    #[test]
    fn axis_normalisation() {
        assert_eq!(normalize_axis("x", -1, 3).unwrap(), 2);
        assert!(normalize_axis("x", 3, 3).is_err());
        assert!(normalize_axis("x", -4, 3).is_err());
    }
}
