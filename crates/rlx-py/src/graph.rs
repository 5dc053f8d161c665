//! `rlx._rlx.Graph`: a thin handle over [`rlx_ir::Graph`].

use crate::errors::{ir_err, GraphError};
use pyo3::prelude::*;
use rlx_ir::{Dim, Graph, Op};

/// A graph under construction. Python's `rlx.Graph` wraps this.
#[pyclass(name = "Graph", module = "rlx._rlx")]
pub struct PyGraph {
    pub(crate) inner: Graph,
}

fn dim_to_py(py: Python<'_>, d: &Dim) -> PyObject {
    match d {
        Dim::Static(n) => n
            .into_pyobject(py)
            .map(|o| o.into_any().unbind())
            .unwrap_or_else(|_| py.None()),
        Dim::Sym(s) => s
            .into_pyobject(py)
            .map(|o| o.into_any().unbind())
            .unwrap_or_else(|_| py.None()),
    }
}

#[pymethods]
impl PyGraph {
    #[new]
    #[pyo3(signature = (name = "graph"))]
    fn new(name: &str) -> Self {
        PyGraph {
            inner: Graph::new(name),
        }
    }

    /// Graph name.
    #[getter]
    fn name(&self) -> String {
        self.inner.name.clone()
    }

    /// Add a node: `op_json` is the serde form of an op. Returns the node id.
    #[pyo3(signature = (op_json, inputs, name = ""))]
    fn add(&mut self, op_json: &str, inputs: Vec<usize>, name: &str) -> PyResult<usize> {
        let op: Op = serde_json::from_str(op_json).map_err(|e| {
            GraphError::new_err(format!("[graph] bad op description {op_json}: {e}"))
        })?;
        self.inner.add(op, &inputs, name).map_err(ir_err)
    }

    /// `(dims, dtype)` of node `id`; dims are ints or symbol names.
    fn shape(&self, py: Python<'_>, id: usize) -> PyResult<(Vec<PyObject>, String)> {
        let n = self.inner.node_checked("graph", id).map_err(ir_err)?;
        let dims = n.shape.dims.iter().map(|d| dim_to_py(py, d)).collect();
        Ok((dims, n.shape.dtype.name().to_string()))
    }

    /// `(op_name, inputs, name)` of node `id`.
    fn node(&self, id: usize) -> PyResult<(String, Vec<usize>, String)> {
        let n = self.inner.node_checked("graph", id).map_err(ir_err)?;
        Ok((n.op.name().to_string(), n.inputs.clone(), n.name.clone()))
    }

    /// The op of node `id` as JSON.
    fn op_json(&self, id: usize) -> PyResult<String> {
        let n = self.inner.node_checked("graph", id).map_err(ir_err)?;
        serde_json::to_string(&n.op).map_err(|e| GraphError::new_err(format!("[serde] {e}")))
    }

    /// Declare the outputs.
    fn set_outputs(&mut self, ids: Vec<usize>) -> PyResult<()> {
        self.inner.set_outputs(&ids).map_err(ir_err)
    }

    /// The declared outputs.
    fn outputs(&self) -> Vec<usize> {
        self.inner.outputs.clone()
    }

    /// Run the verifier.
    fn verify(&self) -> PyResult<()> {
        rlx_ir::verify::verify(&self.inner).map_err(ir_err)
    }

    /// Serialise to JSON.
    fn to_json(&self) -> PyResult<String> {
        self.inner.to_json().map_err(ir_err)
    }

    /// Parse (and verify) a graph from JSON.
    #[staticmethod]
    fn from_json(s: &str) -> PyResult<Self> {
        Ok(PyGraph {
            inner: Graph::from_json(s).map_err(ir_err)?,
        })
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }
}

/// Normalise a dtype spelling (`"float32"`, `"f16"`, `"long"`) to rlx's name.
#[pyfunction]
fn dtype_name(s: &str) -> PyResult<String> {
    s.parse::<rlx_ir::DType>()
        .map(|d| d.name().to_string())
        .map_err(ir_err)
}

/// The environment-variable registry as `(name, default, meaning)` rows.
#[pyfunction]
fn env_vars() -> Vec<(String, String, String)> {
    rlx_ir::env::VARS
        .iter()
        .map(|v| {
            (
                v.name.to_string(),
                v.default.to_string(),
                v.meaning.to_string(),
            )
        })
        .collect()
}

/// What is wrong with the set `RLX_*` variables, as `(name, message)` rows
/// (empty when all is well; `rlx env` prints them).
#[pyfunction]
fn env_problems() -> Vec<(String, String)> {
    rlx_ir::env::problems()
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyGraph>()?;
    m.add_function(wrap_pyfunction!(env_problems, m)?)?;
    m.add_function(wrap_pyfunction!(dtype_name, m)?)?;
    m.add_function(wrap_pyfunction!(env_vars, m)?)?;
    Ok(())
}
