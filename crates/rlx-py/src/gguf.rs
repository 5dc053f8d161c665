//! `gguf_dequantize_rows`: embedding lookups on packed GGUF rows with the
//! host's native row decoders; `ggml_types`: the GGUF type table of
//! `rlx_ir::GgmlType` (names and block geometry) for the Python parser;
//! `gguf_string_offsets`: where each item of a metadata string array
//! starts. Arrays cross as numpy arrays, read through
//! `__array_interface__` (the module is abi3, without the buffer API), so
//! no bytes are copied: a memory-mapped GGUF tensor is decoded in place.

use crate::errors::{KernelError, ShapeError, WeightFormatError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rlx_ir::GgmlType;
use rlx_metal::host::kernels::quant::dequantize_rows;

/// A C-contiguous numpy array seen through `__array_interface__`.
pub(crate) struct RawArray {
    /// Address of the first element.
    pub(crate) ptr: usize,
    /// Dims.
    pub(crate) shape: Vec<usize>,
    readonly: bool,
}

fn raw_array(obj: &Bound<'_, PyAny>, what: &str, typestr: &[&str]) -> PyResult<RawArray> {
    raw_array_for("[gguf_dequantize_rows]", obj, what, typestr)
}

/// `obj` (argument `what` of `op`) as a C-contiguous array of one of the
/// `typestr` dtypes, else a ShapeError naming `op` and `what`.
pub(crate) fn raw_array_for(
    op: &str,
    obj: &Bound<'_, PyAny>,
    what: &str,
    typestr: &[&str],
) -> PyResult<RawArray> {
    let bad = |msg: String| ShapeError::new_err(format!("{op} {what}: {msg}"));
    let ai = obj
        .getattr("__array_interface__")
        .map_err(|_| bad("expected a numpy array".into()))?;
    let ai = ai
        .downcast::<PyDict>()
        .map_err(|_| bad("__array_interface__ is not a dict".into()))?;
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        ai.get_item(k)?
            .ok_or_else(|| bad(format!("__array_interface__ has no '{k}'")))
    };
    let ts: String = get("typestr")?.extract()?;
    if !typestr.contains(&ts.as_str()) {
        return Err(bad(format!("dtype {ts} is not one of {typestr:?}")));
    }
    if let Some(st) = ai.get_item("strides")? {
        if !st.is_none() {
            return Err(bad("must be C-contiguous".into()));
        }
    }
    let (ptr, readonly): (usize, bool) = get("data")?.extract()?;
    let shape: Vec<usize> = get("shape")?.extract()?;
    Ok(RawArray {
        ptr,
        shape,
        readonly,
    })
}

/// Decode `rows` of a packed GGUF tensor `data` (uint8 `[n_rows,
/// row_bytes]`) of ggml type id `ggml_type` into `out` (float32
/// `[len(rows), k]`, written in place). `rows` is any integer sequence.
#[pyfunction]
fn gguf_dequantize_rows(
    ggml_type: u32,
    data: &Bound<'_, PyAny>,
    rows: Vec<i64>,
    k: usize,
    out: &Bound<'_, PyAny>,
) -> PyResult<()> {
    const K: &str = "[gguf_dequantize_rows]";
    let ty = GgmlType::from_ggml_id(ggml_type)
        .ok_or_else(|| WeightFormatError::new_err(format!("{K} unknown ggml type {ggml_type}")))?;
    let d = raw_array(data, "data", &["|u1"])?;
    let o = raw_array(out, "out", &["<f4"])?;
    if o.readonly {
        return Err(ShapeError::new_err(format!("{K} out is read-only")));
    }
    let rb = ty.row_bytes(k).ok_or_else(|| {
        ShapeError::new_err(format!(
            "{K} {}: k={k} is not a multiple of the block size {}",
            ty.name(),
            ty.block_size()
        ))
    })?;
    let [n_rows, row_bytes] = d.shape[..] else {
        return Err(ShapeError::new_err(format!(
            "{K} data must be 2-D [n_rows, row_bytes], got shape {:?}",
            d.shape
        )));
    };
    if row_bytes != rb {
        return Err(ShapeError::new_err(format!(
            "{K} {}: rows of k={k} take {rb} bytes, data rows have {row_bytes}",
            ty.name()
        )));
    }
    if o.shape != [rows.len(), k] {
        return Err(ShapeError::new_err(format!(
            "{K} out must be [{}, {k}], got {:?}",
            rows.len(),
            o.shape
        )));
    }
    // sizes of arrays that exist, but the shapes come from Python: checked
    let size = |a: usize, b: usize, what: &str| {
        a.checked_mul(b)
            .ok_or_else(|| ShapeError::new_err(format!("{K} {what}: {a}·{b} overflows")))
    };
    let n_out = size(rows.len(), k, "out")?;
    let (w_len, o_bytes) = (size(n_rows, row_bytes, "data")?, size(n_out, 4, "out")?);
    let (d_end, o_end) = (
        d.ptr
            .checked_add(w_len)
            .ok_or_else(|| ShapeError::new_err(format!("{K} bad data")))?,
        o.ptr
            .checked_add(o_bytes)
            .ok_or_else(|| ShapeError::new_err(format!("{K} bad out")))?,
    );
    if w_len > 0 && o_bytes > 0 && d.ptr < o_end && o.ptr < d_end {
        return Err(ShapeError::new_err(format!("{K} out overlaps data")));
    }
    if d.ptr == 0 || o.ptr == 0 || o.ptr % 4 != 0 {
        return Err(ShapeError::new_err(format!(
            "{K} data / out must be allocated and out 4-byte aligned"
        )));
    }
    // SAFETY: both arrays are C-contiguous with the shapes checked above,
    // non-null, `out` aligned for f32, writable and disjoint from `data`
    // (checked); both stay alive for the whole call (borrowed from the
    // caller, which holds the GIL).
    let (w, dst) = unsafe {
        (
            std::slice::from_raw_parts(d.ptr as *const u8, w_len),
            std::slice::from_raw_parts_mut(o.ptr as *mut f32, n_out),
        )
    };
    dequantize_rows(ty, w, n_rows, &rows, k, dst).map_err(|e| KernelError::new_err(e.to_string()))
}

/// `{ggml type id: (name, elements per block, bytes per block)}` of every
/// GGUF type rlx runs: `rlx_ir::GgmlType`, the one table of these facts.
#[pyfunction]
fn ggml_types() -> std::collections::BTreeMap<u32, (&'static str, usize, usize)> {
    rlx_ir::quant::ALL_GGML_TYPES
        .into_iter()
        .filter_map(|t| Some((t.ggml_id()?, (t.name(), t.block_size(), t.block_bytes()))))
        .collect()
}

/// Walk the GGUF ARRAY of STRING whose first item starts at byte `start`
/// of `data` (uint8, the memory-mapped file): each item is a u64 byte
/// length (`big_endian` or little) and that many bytes. Writes item `i`'s
/// start offset to `out[i]` and the end of the last scanned item to
/// `out[n]` (`out`: uint64 `[count + 1]`), and returns `n`, the items that
/// lie wholly inside `data` (`n < count`: the file is truncated there).
/// The Python parser needs this for every vocabulary array it skips or
/// searches; done item by item in Python it was a third of a small
/// model's load time.
#[pyfunction]
fn gguf_string_offsets(
    data: &Bound<'_, PyAny>,
    start: usize,
    count: usize,
    big_endian: bool,
    out: &Bound<'_, PyAny>,
) -> PyResult<usize> {
    const K: &str = "[gguf_string_offsets]";
    let d = raw_array_for(K, data, "data", &["|u1"])?;
    let o = raw_array_for(K, out, "out", &["<u8"])?;
    let [len] = d.shape[..] else {
        return Err(ShapeError::new_err(format!(
            "{K} data must be 1-D, got {:?}",
            d.shape
        )));
    };
    let n_out = count
        .checked_add(1)
        .ok_or_else(|| ShapeError::new_err(format!("{K} count {count} overflows")))?;
    if o.readonly || o.shape != [n_out] {
        return Err(ShapeError::new_err(format!(
            "{K} out must be a writable [{n_out}] array, got {:?}",
            o.shape
        )));
    }
    if (len > 0 && d.ptr == 0) || o.ptr == 0 || o.ptr % 8 != 0 {
        return Err(ShapeError::new_err(format!(
            "{K} data / out must be allocated and out 8-byte aligned"
        )));
    }
    let o_bytes = n_out
        .checked_mul(8)
        .ok_or_else(|| ShapeError::new_err(format!("{K} count {count} overflows")))?;
    let overlap = |a: usize, an: usize, b: usize, bn: usize| {
        a.checked_add(an).is_none_or(|ae| b < ae) && b.checked_add(bn).is_none_or(|be| a < be)
    };
    if len > 0 && overlap(d.ptr, len, o.ptr, o_bytes) {
        return Err(ShapeError::new_err(format!("{K} out overlaps data")));
    }
    // SAFETY: `data` is a C-contiguous u8 array of `len` bytes and `out` a
    // writable, aligned, C-contiguous u64 array of `n_out` items, disjoint
    // from `data` (all checked above); both are borrowed from the caller,
    // which holds the GIL, for the whole call.
    let (bytes, dst) = unsafe {
        (
            if len == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(d.ptr as *const u8, len)
            },
            std::slice::from_raw_parts_mut(o.ptr as *mut u64, n_out),
        )
    };
    let mut pos = start;
    for (i, slot) in dst.iter_mut().enumerate().take(count) {
        *slot = pos as u64;
        let Some(head) = pos.checked_add(8).filter(|&e| e <= len) else {
            return Ok(i);
        };
        let raw: [u8; 8] = bytes[pos..head].try_into().expect("8 bytes");
        let n = if big_endian {
            u64::from_be_bytes(raw)
        } else {
            u64::from_le_bytes(raw)
        };
        match usize::try_from(n)
            .ok()
            .and_then(|n| head.checked_add(n))
            .filter(|&e| e <= len)
        {
            Some(end) => pos = end,
            None => return Ok(i),
        }
    }
    dst[count] = pos as u64;
    Ok(count)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(gguf_dequantize_rows, m)?)?;
    m.add_function(wrap_pyfunction!(gguf_string_offsets, m)?)?;
    m.add_function(wrap_pyfunction!(ggml_types, m)?)
}
