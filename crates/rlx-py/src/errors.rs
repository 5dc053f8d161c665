//! The Python exception hierarchy, rooted at `RlxError`, and the mapping
//! from core-crate errors onto it.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use rlx_ir::{ErrorKind, IrError};

create_exception!(
    rlx._rlx,
    RlxError,
    PyException,
    "Base class of every rlx error."
);
create_exception!(
    rlx._rlx,
    ShapeError,
    RlxError,
    "Operand shapes do not fit an op, or an input has the wrong shape."
);
create_exception!(
    rlx._rlx,
    DTypeError,
    RlxError,
    "Unknown dtype, or operand dtypes that do not fit an op."
);
create_exception!(
    rlx._rlx,
    UnsupportedOpError,
    RlxError,
    "An op this build or device cannot compile or run."
);
create_exception!(
    rlx._rlx,
    WeightFormatError,
    RlxError,
    "A weight file or tensor that cannot be read."
);
create_exception!(
    rlx._rlx,
    KernelError,
    RlxError,
    "A kernel failed to compile or run."
);
create_exception!(
    rlx._rlx,
    GraphError,
    RlxError,
    "A malformed graph: bad node id, bad attribute, failed verification."
);

/// Convert a core IR error into the matching Python exception.
pub fn ir_err(e: IrError) -> PyErr {
    let msg = e.to_string();
    match e.kind() {
        ErrorKind::Shape => ShapeError::new_err(msg),
        ErrorKind::DType => DTypeError::new_err(msg),
        ErrorKind::Unsupported => UnsupportedOpError::new_err(msg),
        ErrorKind::Graph => GraphError::new_err(msg),
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("RlxError", py.get_type::<RlxError>())?;
    m.add("ShapeError", py.get_type::<ShapeError>())?;
    m.add("DTypeError", py.get_type::<DTypeError>())?;
    m.add("UnsupportedOpError", py.get_type::<UnsupportedOpError>())?;
    m.add("WeightFormatError", py.get_type::<WeightFormatError>())?;
    m.add("KernelError", py.get_type::<KernelError>())?;
    m.add("GraphError", py.get_type::<GraphError>())?;
    Ok(())
}
