//! rlx-ir: the graph intermediate representation of rlx.
//!
//! A [`Graph`] is an append-only list of [`Node`]s, each an [`Op`] applied to
//! earlier nodes, with an inferred [`Shape`]. The builder checks every node
//! as it is added ([`infer::infer_shape`]); [`verify::verify`] re-checks a
//! whole graph (e.g. one read from JSON). Nothing here knows about thunks,
//! devices or Python.

pub mod dtype;
pub mod env;
pub mod error;
pub mod graph;
pub mod infer;
pub mod op;
pub mod quant;
pub mod rng;
pub mod shape;
pub mod verify;

pub use dtype::DType;
pub use error::{ErrorKind, IrError, Result};
pub use graph::{Graph, Node, NodeId};
pub use op::Op;
pub use quant::{GgmlType, QuantScheme, ScaleLayout, ScaledFormat};
pub use rng::RngOptions;
pub use shape::{Dim, Shape};
