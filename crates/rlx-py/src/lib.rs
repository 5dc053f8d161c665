//! `rlx._rlx`: the native module. Bindings only — the logic lives in the
//! core crates. Ops cross the boundary as JSON (the serde form of
//! [`rlx_ir::Op`]); errors become the `rlx.RlxError` hierarchy; a Rust panic
//! becomes a Python `pyo3.PanicException` (PyO3 catches unwinds at every
//! `#[pyfunction]` / `#[pymethods]` boundary), never an abort.

mod errors;
mod exec;
mod exec_util;
mod gguf;
mod graph;
mod inspect;
mod settings;
mod step;

use pyo3::prelude::*;

/// Every thunk variant of the schedule set as `(variant, seed name)`,
/// `Nop` first (`rlx_metal::thunk::THUNK_KINDS`).
#[pyfunction]
fn thunk_variants() -> Vec<(String, String)> {
    rlx_metal::thunk::THUNK_KINDS
        .iter()
        .map(|&(v, n)| (v.to_string(), n.to_string()))
        .collect()
}

/// The native module.
#[pymodule]
fn _rlx(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    graph::register(m)?;
    exec::register(m)?;
    settings::register(m)?;
    gguf::register(m)?;
    step::register(m)?;
    m.add_function(wrap_pyfunction!(thunk_variants, m)?)?;
    Ok(())
}
