//! The crate's error type. Every message starts with the op (or the
//! subsystem) in brackets, e.g. `[matmul] inner dims differ: [2, 3] @ [4, 5]`.

use thiserror::Error;

/// Coarse class of an [`IrError`]; the Python bindings map each class to an
/// exception type (`ShapeError`, `DTypeError`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Incompatible shapes, wrong arity, axis out of range.
    Shape,
    /// Unknown or unsupported dtype.
    DType,
    /// An op or feature that this build cannot handle.
    Unsupported,
    /// A malformed graph (unknown node, cycle, bad serialisation) or a bad attribute.
    Graph,
}

/// Errors raised while building, checking or (de)serialising a graph.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum IrError {
    /// Operand shapes do not fit the op.
    #[error("[{op}] {msg}")]
    Shape {
        /// Op name (snake case).
        op: String,
        /// What is wrong, naming the shapes.
        msg: String,
    },
    /// Operand dtypes do not fit the op.
    #[error("[{op}] {msg}")]
    DType {
        /// Op name.
        op: String,
        /// What is wrong, naming the dtypes.
        msg: String,
    },
    /// Wrong number of inputs.
    #[error("[{op}] expects {expected} input(s), got {got}")]
    Arity {
        /// Op name.
        op: String,
        /// Human description of the accepted counts ("2", "2 or 3", "at least 1").
        expected: String,
        /// Number given.
        got: usize,
    },
    /// An axis outside `[-rank, rank)`.
    #[error("[{op}] axis {axis} out of range for rank {rank}")]
    Axis {
        /// Op name.
        op: String,
        /// The axis as given (may be negative).
        axis: i64,
        /// Rank of the operand.
        rank: usize,
    },
    /// An attribute value the op cannot accept (zero heads, empty perm...).
    #[error("[{op}] {msg}")]
    Attr {
        /// Op name.
        op: String,
        /// What is wrong.
        msg: String,
    },
    /// A dtype string that names no dtype.
    #[error("[dtype] unknown dtype '{0}'")]
    UnknownDType(String),
    /// A node id that is not (yet) in the graph.
    #[error("[{op}] unknown node id {id} (graph has {len} nodes)")]
    UnknownNode {
        /// Op being built, or `graph`.
        op: String,
        /// The bad id.
        id: usize,
        /// Number of nodes in the graph.
        len: usize,
    },
    /// The verifier rejected a graph.
    #[error("[verify] node {node} ({op}): {msg}")]
    Verify {
        /// Index of the offending node.
        node: usize,
        /// Its op name.
        op: String,
        /// What is wrong.
        msg: String,
    },
    /// An op the current stage does not support.
    #[error("[{op}] {msg}")]
    Unsupported {
        /// Op name.
        op: String,
        /// Why.
        msg: String,
    },
    /// JSON (de)serialisation failed.
    #[error("[serde] {0}")]
    Serde(String),
}

impl IrError {
    /// The class of this error, for mapping onto exception types.
    pub fn kind(&self) -> ErrorKind {
        match self {
            IrError::Shape { .. } | IrError::Arity { .. } | IrError::Axis { .. } => {
                ErrorKind::Shape
            }
            IrError::DType { .. } | IrError::UnknownDType(_) => ErrorKind::DType,
            IrError::Unsupported { .. } => ErrorKind::Unsupported,
            IrError::Attr { .. }
            | IrError::UnknownNode { .. }
            | IrError::Verify { .. }
            | IrError::Serde(_) => ErrorKind::Graph,
        }
    }

    /// Shorthand for [`IrError::Shape`].
    pub fn shape(op: impl Into<String>, msg: impl Into<String>) -> Self {
        IrError::Shape {
            op: op.into(),
            msg: msg.into(),
        }
    }

    /// Shorthand for [`IrError::DType`].
    pub fn dtype(op: impl Into<String>, msg: impl Into<String>) -> Self {
        IrError::DType {
            op: op.into(),
            msg: msg.into(),
        }
    }

    /// Shorthand for [`IrError::Attr`].
    pub fn attr(op: impl Into<String>, msg: impl Into<String>) -> Self {
        IrError::Attr {
            op: op.into(),
            msg: msg.into(),
        }
    }
}

/// Result alias used throughout the crate.
pub type Result<T, E = IrError> = std::result::Result<T, E>;
