//! `rlx._rlx.Executable`: a compiled graph with its arena and weights
//! buffer, run by the host executor. Python's `rlx.Executable` wraps it
//! (input checks, numpy conversion); this file only moves bytes and calls.

use crate::errors::{ir_err, GraphError, KernelError, ShapeError, UnsupportedOpError};
use crate::graph::PyGraph;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rlx_metal::compile::{
    compile, verify::verify_schedule, verify::VerifyContext, Binding, CompileError, CompileOptions,
    Compiled,
};
use rlx_metal::host::buffer::{AlignedBuf, Mem};
use rlx_metal::host::exec::{HostExecutor, Mode, RunError};
use std::collections::HashMap;

/// A compiled, runnable graph.
#[pyclass(name = "Executable", module = "rlx._rlx")]
pub struct PyExecutable {
    compiled: Compiled,
    arena: AlignedBuf,
    weights: AlignedBuf,
    exec: HostExecutor,
    /// Per-thunk JSON handed to the fallback (built once).
    thunk_json: Vec<String>,
    /// Whether the schedule verifier ran at compile (`RLX_VERIFY=1`).
    verified_at_compile: bool,
}

fn compile_err(e: CompileError) -> PyErr {
    match e {
        CompileError::Ir(ir) => ir_err(ir),
        CompileError::Unsupported { .. } => UnsupportedOpError::new_err(e.to_string()),
        CompileError::UnboundDim { .. } => ShapeError::new_err(e.to_string()),
        _ => GraphError::new_err(e.to_string()),
    }
}

/// The thunk as the reference protocol wants it: its fields plus `name`.
/// A custom op's own `name` field becomes `kernel` (the seed's field name),
/// and an indexing thunk's variant is flattened into `kind` + fields.
fn thunk_to_json(t: &rlx_metal::thunk::Thunk) -> String {
    use serde_json::Value;
    let mut v = serde_json::to_value(t).unwrap_or(Value::Null);
    let mut fields = match v.as_object_mut().and_then(|o| o.values_mut().next()) {
        Some(Value::Object(m)) => std::mem::take(m),
        _ => serde_json::Map::new(),
    };
    if let Some(kernel) = fields.remove("name") {
        fields.insert("kernel".into(), kernel);
    }
    if let Some(Value::Object(inner)) = fields.remove("thunk") {
        // CpuIndexing { thunk: IndexingThunk::Variant { .. } }
        if let Some((variant, Value::Object(body))) = inner.into_iter().next() {
            let kind = variant
                .chars()
                .enumerate()
                .flat_map(|(i, c)| {
                    let lower = c.to_ascii_lowercase();
                    if c.is_ascii_uppercase() && i > 0 {
                        vec!['_', lower]
                    } else {
                        vec![lower]
                    }
                })
                .collect::<String>();
            fields.insert("kind".into(), Value::String(kind));
            for (k, val) in body {
                fields.insert(if k == "dtype" { "dt".into() } else { k }, val);
            }
        }
    }
    fields.insert("name".into(), Value::String(t.name().into()));
    Value::Object(fields).to_string()
}

/// `PyBUF_WRITE` of CPython's buffer API (not exported by pyo3::ffi).
const PYBUF_WRITE: std::os::raw::c_int = 0x200;

fn memview(py: Python<'_>, ptr: *mut u8, len: usize) -> PyResult<PyObject> {
    // SAFETY: the memory belongs to the executable, which the Python wrapper
    // keeps alive as long as any view of it (it holds both).
    unsafe {
        let raw = pyo3::ffi::PyMemoryView_FromMemory(
            ptr.cast::<std::os::raw::c_char>(),
            len as pyo3::ffi::Py_ssize_t,
            PYBUF_WRITE,
        );
        Ok(Bound::from_owned_ptr_or_err(py, raw)?.unbind())
    }
}

fn binding_tuple(kind: &str, b: &Binding) -> (String, String, usize, usize, Vec<usize>, String) {
    (
        kind.to_string(),
        b.name.clone(),
        b.node,
        b.offset,
        b.shape
            .dims
            .iter()
            .map(|d| d.as_static().unwrap_or(0))
            .collect(),
        b.shape.dtype.name().to_string(),
    )
}

#[pymethods]
impl PyExecutable {
    /// Compile `graph` for `device` (`"host"` or `"reference"`), binding
    /// symbolic dims from `dims`.
    #[new]
    #[pyo3(signature = (graph, device = "host", dims = None))]
    fn new(graph: &PyGraph, device: &str, dims: Option<HashMap<String, usize>>) -> PyResult<Self> {
        let mode = match device {
            "host" => Mode::Native,
            "reference" => Mode::Reference,
            other => {
                return Err(PyValueError::new_err(format!(
                    "[compile] unknown device '{other}' (expected 'host' or 'reference')"
                )))
            }
        };
        let opts = CompileOptions {
            dims: dims.unwrap_or_default(),
        };
        let compiled = compile(&graph.inner, &opts).map_err(compile_err)?;
        let mut weights = AlignedBuf::zeroed(compiled.weights_bytes);
        for (off, bytes) in &compiled.constants {
            weights.as_mut_slice()[*off..*off + bytes.len()].copy_from_slice(bytes);
        }
        let verified_at_compile = rlx_ir::env::flag("RLX_VERIFY");
        if verified_at_compile {
            verify(&compiled).map_err(compile_err)?;
        }
        let thunk_json = compiled.schedule.thunks.iter().map(thunk_to_json).collect();
        Ok(PyExecutable {
            arena: AlignedBuf::zeroed(compiled.arena_bytes),
            weights,
            exec: HostExecutor::new(mode),
            thunk_json,
            compiled,
            verified_at_compile,
        })
    }

    /// Run the schedule verifier (raises on the first problem).
    fn verify(&self) -> PyResult<()> {
        verify(&self.compiled).map_err(compile_err)
    }

    /// Writable memoryview of the arena.
    fn arena_view(&mut self, py: Python<'_>) -> PyResult<PyObject> {
        let len = self.arena.len();
        memview(py, self.arena.as_mut_ptr(), len)
    }

    /// Writable memoryview of the weights buffer.
    fn weights_view(&mut self, py: Python<'_>) -> PyResult<PyObject> {
        let len = self.weights.len();
        memview(py, self.weights.as_mut_ptr(), len)
    }

    /// `(kind, name, node, offset, dims, dtype)` for every input, param,
    /// state and output; kind is `"input"`, `"param"`, `"state"` or `"output"`.
    fn bindings(&self) -> Vec<(String, String, usize, usize, Vec<usize>, String)> {
        let c = &self.compiled;
        let mut out = Vec::new();
        out.extend(c.inputs.iter().map(|b| binding_tuple("input", b)));
        out.extend(c.params.iter().map(|b| binding_tuple("param", b)));
        out.extend(c.states.iter().map(|b| binding_tuple("state", b)));
        out.extend(c.outputs.iter().map(|b| binding_tuple("output", b)));
        out
    }

    /// Run once. `fallback(index, thunk_json)` is called for thunks without
    /// a native kernel; the GIL is released while native kernels run.
    fn run(&mut self, py: Python<'_>, fallback: PyObject) -> PyResult<()> {
        let arena_len = self.arena.len();
        let weights_len = self.weights.len();
        let arena_ptr = self.arena.as_mut_ptr() as usize;
        let weights_ptr = self.weights.as_mut_ptr() as usize;
        let schedule = &self.compiled.schedule;
        let json = &self.thunk_json;
        let exec = &mut self.exec;
        let result = py.allow_threads(|| {
            // SAFETY: both buffers are owned by `self`, alive for the call,
            // and only touched through `mem` and the fallback in between.
            let mem = unsafe {
                Mem::new(
                    arena_ptr as *mut u8,
                    arena_len,
                    weights_ptr as *const u8,
                    weights_len,
                )
            };
            let mut fb = |i: usize, _t: &rlx_metal::thunk::Thunk| -> Result<(), PyErr> {
                Python::with_gil(|py| {
                    fallback.call1(py, (i, json[i].as_str()))?;
                    Ok(())
                })
            };
            exec.run(schedule, &mem, &mut fb)
        });
        match result {
            Ok(()) => Ok(()),
            Err(RunError::Fallback {
                index,
                thunk,
                source,
            }) => {
                let err = KernelError::new_err(format!(
                    "[{thunk}] thunk {index} failed in its host callback: {source}"
                ));
                err.set_cause(py, Some(source));
                Err(err)
            }
            Err(e) => Err(KernelError::new_err(e.to_string())),
        }
    }

    /// The schedule, one thunk per line with offsets.
    fn schedule(&self) -> String {
        self.compiled.schedule.to_string()
    }

    /// Number of thunks.
    fn num_thunks(&self) -> usize {
        self.compiled.schedule.thunks.len()
    }

    /// Thunk `i` as reference-protocol JSON.
    fn thunk_json(&self, i: usize) -> PyResult<String> {
        self.thunk_json
            .get(i)
            .cloned()
            .ok_or_else(|| PyValueError::new_err(format!("[schedule] no thunk {i}")))
    }

    /// Figures of the compile: arena / naive / state / weights bytes, thunk
    /// count, whether the verifier ran at compile (`verified_at_compile`),
    /// native vs fallback thunks, a count per thunk name
    /// (`by_thunk`) and per thunk name of those run by the fallback
    /// (`fallback_by_thunk`).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = &self.compiled;
        let d = PyDict::new(py);
        d.set_item("arena_bytes", c.arena_bytes)?;
        d.set_item("naive_bytes", c.naive_bytes)?;
        d.set_item("state_bytes", c.state_bytes)?;
        d.set_item("weights_bytes", c.weights_bytes)?;
        d.set_item("thunks", c.schedule.thunks.len())?;
        d.set_item("verified_at_compile", self.verified_at_compile)?;
        let native = c
            .schedule
            .thunks
            .iter()
            .filter(|t| self.exec.is_native(t))
            .count();
        d.set_item("native_thunks", native)?;
        d.set_item("fallback_thunks", c.schedule.thunks.len() - native)?;
        let counts = PyDict::new(py);
        let fallback = PyDict::new(py);
        for t in &c.schedule.thunks {
            bump(&counts, t.name())?;
            if !self.exec.is_native(t) {
                bump(&fallback, t.name())?;
            }
        }
        d.set_item("by_thunk", counts)?;
        d.set_item("fallback_by_thunk", fallback)?;
        Ok(d)
    }
}

/// Add one to `counts[key]`.
fn bump(counts: &Bound<'_, PyDict>, key: &str) -> PyResult<()> {
    let n: usize = counts
        .get_item(key)?
        .map(|v| v.extract())
        .transpose()?
        .unwrap_or(0);
    counts.set_item(key, n + 1)
}

fn verify(c: &Compiled) -> Result<(), CompileError> {
    let mut initialized = Vec::new();
    for b in c.inputs.iter().chain(c.states.iter()) {
        if !rlx_metal::thunk::is_weight(b.offset) {
            initialized.push(b.offset..b.offset + b.shape.size_bytes().unwrap_or(0));
        }
    }
    verify_schedule(
        &c.schedule,
        &VerifyContext {
            arena_bytes: c.arena_bytes,
            weights_bytes: c.weights_bytes,
            initialized,
            groups: Vec::new(),
        },
    )
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyExecutable>()?;
    Ok(())
}
