//! Compile errors. Messages start with the op (or stage) in brackets.

use rlx_ir::IrError;
use thiserror::Error;

use super::plan::PlanError;

/// Errors raised while compiling a graph into a schedule.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum CompileError {
    /// The graph itself is malformed (re-raised verifier / builder error).
    #[error(transparent)]
    Ir(#[from] IrError),
    /// An op this build cannot lower yet.
    #[error("[{op}] cannot be compiled yet: {msg} (node {node} '{name}')")]
    Unsupported {
        /// Op name.
        op: String,
        /// Why.
        msg: String,
        /// Node index.
        node: usize,
        /// Node name.
        name: String,
    },
    /// An op whose parameters (scheme, group size, an operand's dtype or
    /// shape) fall outside what its kernels support; `param` names the one
    /// at fault.
    #[error("[{op}] unsupported {param}: {msg} (node {node} '{name}')")]
    BadParam {
        /// Op name.
        op: String,
        /// The parameter or operand at fault.
        param: String,
        /// Why, with the values involved.
        msg: String,
        /// Node index.
        node: usize,
        /// Node name.
        name: String,
    },
    /// A symbolic dim with no value given at compile time.
    #[error(
        "[compile] dim '{sym}' of node {node} '{name}' has no value; pass dims={{'{sym}': N}}"
    )]
    UnboundDim {
        /// Symbol.
        sym: String,
        /// Node index.
        node: usize,
        /// Node name.
        name: String,
    },
    /// A size that does not fit a thunk field (e.g. more than 2³² elements).
    #[error("[{op}] {msg} (node {node})")]
    TooLarge {
        /// Op name.
        op: String,
        /// What overflowed.
        msg: String,
        /// Node index.
        node: usize,
    },
    /// `RLX_DISABLE_PASS` names a pass that does not exist.
    #[error("[compile] RLX_DISABLE_PASS names unknown pass '{name}'; passes: {known}")]
    UnknownPass {
        /// The unknown name.
        name: String,
        /// Every pass name, comma-separated.
        known: String,
    },
    /// A graph fusion produced an inconsistent rewrite (a bug in the
    /// fusion, reported instead of miscompiling).
    #[error("[{pass}] graph fusion failed: {msg}")]
    Fusion {
        /// The fusion's name.
        pass: String,
        /// What went wrong.
        msg: String,
    },
    /// Memory planning failed.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The schedule verifier rejected the schedule.
    #[error("[verify] thunk {index} ({thunk}): {msg}")]
    Verify {
        /// Thunk index.
        index: usize,
        /// Thunk name.
        thunk: String,
        /// What is wrong.
        msg: String,
    },
}
