//! Helpers of the native executable (`exec.rs`): a thunk as the JSON the
//! numpy reference protocol reads, and CPython memoryviews over the arena,
//! state buffer and weights segments.

use crate::errors::RlxError;
use pyo3::prelude::*;
use rlx_metal::compile::Binding;
use rlx_metal::host::buffer::{AlignedBuf, Segment};

/// The thunk as the reference protocol wants it: its fields plus `name`.
/// A custom op's own `name` field becomes `kernel` (the seed's field name),
/// and an indexing thunk's variant is flattened into `kind` + fields.
pub(crate) fn thunk_to_json(t: &rlx_metal::thunk::Thunk) -> String {
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
                let k = match k.as_str() {
                    "dtype" => "dt".into(),
                    "upd_dtype" => "upd_dt".into(),
                    _ => k,
                };
                fields.insert(k, val);
            }
        }
    }
    fields.insert("name".into(), Value::String(t.name().into()));
    Value::Object(fields).to_string()
}

/// `PyBUF_WRITE` of CPython's buffer API (not exported by pyo3::ffi).
const PYBUF_WRITE: std::os::raw::c_int = 0x200;

pub(crate) fn memview(py: Python<'_>, ptr: *mut u8, len: usize) -> PyResult<PyObject> {
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

/// `PyBUF_READ` of CPython's buffer API.
const PYBUF_READ: std::os::raw::c_int = 0x100;

pub(crate) fn readonly_memview(py: Python<'_>, ptr: *const u8, len: usize) -> PyResult<PyObject> {
    // SAFETY: the memory belongs to an owner the segment keeps alive; the
    // Python wrapper drops its view before rebinding the segment.
    unsafe {
        let raw = pyo3::ffi::PyMemoryView_FromMemory(
            ptr.cast_mut().cast::<std::os::raw::c_char>(),
            len as pyo3::ffi::Py_ssize_t,
            PYBUF_READ,
        );
        Ok(Bound::from_owned_ptr_or_err(py, raw)?.unbind())
    }
}

/// Per thunk: `(name, bytes read, bytes written, runs natively)`, the byte
/// counts summed over the ranges of its `io()` (what a trace slice shows).
pub(crate) fn thunk_table(
    thunks: &[rlx_metal::thunk::Thunk],
    exec: &rlx_metal::host::exec::HostExecutor,
) -> Vec<(&'static str, usize, usize, bool)> {
    thunks
        .iter()
        .map(|t| {
            let io = t.io();
            let total = |rs: &[rlx_metal::thunk::ByteRange]| {
                rs.iter().fold(0usize, |acc, r| acc.saturating_add(r.len))
            };
            let (read, written) = (total(&io.reads), total(&io.writes));
            (t.name(), read, written, exec.is_native(t))
        })
        .collect()
}

/// `(name, dtype, dims, offset)` of every state, in declaration order.
pub(crate) fn state_table(
    c: &rlx_metal::compile::Compiled,
) -> Vec<(String, String, Vec<usize>, usize)> {
    c.states
        .iter()
        .map(|b| {
            (
                b.name.clone(),
                b.shape.dtype.name().to_string(),
                b.shape
                    .dims
                    .iter()
                    .map(|d| d.as_static().unwrap_or(0))
                    .collect(),
                b.offset,
            )
        })
        .collect()
}

/// One line naming every state (or "no states").
pub(crate) fn describe_states(t: &[(String, String, Vec<usize>, usize)]) -> String {
    if t.is_empty() {
        return "no states".into();
    }
    t.iter()
        .map(|(n, dt, dims, off)| format!("'{n}' {dt}{dims:?} at {}", rlx_metal::thunk::Off(*off)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Where the bytes of one weights segment live.
pub(crate) enum SegStore {
    /// Not given yet (a param before `set_param` / `bind_param`).
    Unset,
    /// Owned, 64-byte aligned bytes.
    Owned(AlignedBuf),
    /// Bytes owned by a Python object, kept alive here (see the module doc).
    External {
        /// The owner (keeps the memory alive).
        _owner: PyObject,
        /// First byte.
        ptr: *const u8,
        /// Length in bytes.
        len: usize,
    },
}

// SAFETY: `External` holds an address into memory its owner keeps alive;
// the address is only dereferenced by kernels during a run (read-only).
unsafe impl Send for SegStore {}
unsafe impl Sync for SegStore {}

impl SegStore {
    pub(crate) fn segment(&mut self) -> Segment {
        match self {
            SegStore::Unset => Segment::EMPTY,
            SegStore::Owned(b) => Segment {
                ptr: b.as_mut_ptr(),
                len: b.len(),
            },
            SegStore::External { ptr, len, .. } => Segment {
                ptr: *ptr,
                len: *len,
            },
        }
    }
}

/// `(kind, name, node, offset, dims, dtype)` of one binding.
pub(crate) fn binding_tuple(
    kind: &str,
    b: &Binding,
) -> (String, String, usize, usize, Vec<usize>, String) {
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

/// `len` zeroed bytes for `what`, or an `RlxError` (never an abort) when
/// the machine cannot provide them.
pub(crate) fn alloc(what: &str, len: usize) -> PyResult<AlignedBuf> {
    AlignedBuf::try_zeroed(len).map_err(|_| {
        RlxError::new_err(format!(
            "[compile] cannot allocate the {what} of {len} bytes \
             (out of memory or past the address space)"
        ))
    })
}
