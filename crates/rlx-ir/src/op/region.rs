//! Steps of an `ElementwiseRegion`: a straight-line chain of unary, binary
//! and cast steps over the region's inputs and earlier steps' results.

use super::attrs::{Activation, BinaryOp};
use crate::dtype::DType;
use serde::{Deserialize, Serialize};

/// Most steps a region may hold (the seed's chain has 32 four-word slots).
pub const MAX_REGION_STEPS: usize = 32;
/// Most inputs a region may read.
pub const MAX_REGION_INPUTS: usize = 16;

/// Where a step reads an operand from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegionOperand {
    /// The region's input number `i`.
    Input(u32),
    /// The result of an earlier step `i`.
    Step(u32),
}

/// One step of a region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum RegionStep {
    /// `act(a)`.
    Unary {
        /// Function.
        act: Activation,
        /// Operand.
        a: RegionOperand,
    },
    /// `a <kind> b`.
    Binary {
        /// Op.
        kind: BinaryOp,
        /// Left operand.
        a: RegionOperand,
        /// Right operand.
        b: RegionOperand,
    },
    /// Convert `a` to `to`.
    Cast {
        /// Target dtype.
        to: DType,
        /// Operand.
        a: RegionOperand,
    },
}

impl RegionStep {
    /// The operands this step reads.
    pub fn operands(&self) -> Vec<RegionOperand> {
        match self {
            RegionStep::Unary { a, .. } | RegionStep::Cast { a, .. } => vec![*a],
            RegionStep::Binary { a, b, .. } => vec![*a, *b],
        }
    }
}
