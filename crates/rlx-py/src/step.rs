//! `DecodeStep`: one decode step of a compiled decoder graph in a single
//! native call. Python's per-token work between two runs (the embedding
//! row, the RoPE angles, the cache slot and `kv_len` written into the
//! graph's inputs) costs tens of microseconds per numpy call once the
//! weights have streamed through the caches; here it is a few hundred
//! nanoseconds, then the executable runs.
//!
//! The step knows where each input lives in the executable's arena (byte
//! offsets checked against the arena at construction and before each run)
//! and keeps the embedding table (a numpy array, e.g. a view of the mapped
//! GGUF file) alive. The RoPE angles are `pos · inv_freq` in f64, their
//! cosine and sine rounded to f32, as the Python feeds compute them.

use crate::errors::{RlxError, ShapeError, WeightFormatError};
use crate::exec::PyExecutable;
use crate::gguf::raw_array_for;
use pyo3::prelude::*;
use rlx_ir::GgmlType;
use rlx_metal::host::kernels::quant::dequantize_rows;

const OP: &str = "[decode_step]";

/// One RoPE group: inverse frequencies and the arena offsets of its `cos` /
/// `sin` inputs (`inv_freq.len()` f32 each).
struct RopeGroup {
    inv_freq: Vec<f64>,
    cos: usize,
    sin: usize,
}

/// A decode step's input layout; see the module doc.
#[pyclass(name = "DecodeStep", module = "rlx._rlx")]
pub struct PyDecodeStep {
    ty: GgmlType,
    /// Keeps the embedding table alive (`table_ptr` points into it).
    _table: PyObject,
    table_ptr: usize,
    n_rows: usize,
    row_bytes: usize,
    k: usize,
    scale: f32,
    x: usize,
    rope: Vec<RopeGroup>,
    slots: usize,
    kv_len: usize,
    row: Option<usize>,
    arena_len: usize,
    /// One dequantised embedding row.
    scratch: Vec<f32>,
}

/// `off .. off + 4·n` inside `len` bytes, 4-byte aligned.
fn check_span(what: &str, off: usize, n: usize, len: usize) -> PyResult<()> {
    let end = n
        .checked_mul(4)
        .and_then(|b| off.checked_add(b))
        .ok_or_else(|| ShapeError::new_err(format!("{OP} {what}: offset {off} overflows")))?;
    if end > len || !off.is_multiple_of(4) {
        return Err(ShapeError::new_err(format!(
            "{OP} {what}: bytes {off}..{end} are not an aligned span of the {len}-byte arena"
        )));
    }
    Ok(())
}

fn put(arena: &mut [u8], off: usize, bytes: [u8; 4]) {
    arena[off..off + 4].copy_from_slice(&bytes);
}

#[pymethods]
impl PyDecodeStep {
    /// `table`: C-contiguous uint8 `[n_rows, row_bytes(k)]` of ggml type
    /// `ggml_type` (the token embedding, packed); `scale` multiplies each
    /// row; `x`, `slots`, `kv_len`, `row` (or None) and each rope group's
    /// `(inv_freq, cos, sin)`: arena byte offsets of those inputs;
    /// `arena_len`: the arena's size.
    #[new]
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (table, ggml_type, k, scale, x, rope, slots, kv_len, row, arena_len))]
    fn new(
        table: &Bound<'_, PyAny>,
        ggml_type: u32,
        k: usize,
        scale: f32,
        x: usize,
        rope: Vec<(Vec<f64>, usize, usize)>,
        slots: usize,
        kv_len: usize,
        row: Option<usize>,
        arena_len: usize,
    ) -> PyResult<Self> {
        let ty = GgmlType::from_ggml_id(ggml_type).ok_or_else(|| {
            WeightFormatError::new_err(format!("{OP} unknown ggml type {ggml_type}"))
        })?;
        let t = raw_array_for(OP, table, "table", &["|u1"])?;
        let [n_rows, row_bytes] = t.shape[..] else {
            return Err(ShapeError::new_err(format!(
                "{OP} table must be 2-D [n_rows, row_bytes], got shape {:?}",
                t.shape
            )));
        };
        let rb = ty.row_bytes(k);
        if rb != Some(row_bytes) || t.ptr == 0 || n_rows.checked_mul(row_bytes).is_none() {
            return Err(ShapeError::new_err(format!(
                "{OP} table rows of {row_bytes} bytes do not hold k={k} {} values",
                ty.name()
            )));
        }
        check_span("x", x, k, arena_len)?;
        check_span("slots", slots, 1, arena_len)?;
        check_span("kv_len", kv_len, 1, arena_len)?;
        if let Some(r) = row {
            check_span("row", r, 1, arena_len)?;
        }
        let mut groups = Vec::with_capacity(rope.len());
        for (inv_freq, cos, sin) in rope {
            check_span("cos", cos, inv_freq.len(), arena_len)?;
            check_span("sin", sin, inv_freq.len(), arena_len)?;
            groups.push(RopeGroup { inv_freq, cos, sin });
        }
        Ok(Self {
            ty,
            _table: table.clone().unbind(),
            table_ptr: t.ptr,
            n_rows,
            row_bytes,
            k,
            scale,
            x,
            rope: groups,
            slots,
            kv_len,
            row,
            arena_len,
            scratch: vec![0.0; k],
        })
    }

    /// Write token `token`'s inputs at position `pos` into `exe`'s arena and
    /// run it (`fallback` as for `Executable.run`). Errors name the input
    /// at fault; nothing runs when one is raised.
    fn run(
        &mut self,
        py: Python<'_>,
        exe: &Bound<'_, PyExecutable>,
        fallback: PyObject,
        token: i64,
        pos: u32,
    ) -> PyResult<()> {
        let kv = i32::try_from(pos)
            .ok()
            .and_then(|p| p.checked_add(1))
            .ok_or_else(|| ShapeError::new_err(format!("{OP} position {pos} out of range")))?;
        // SAFETY: `table_ptr` points at `n_rows · row_bytes` bytes (checked at
        // construction) of the array `_table` keeps alive; nothing writes it.
        let table = unsafe {
            std::slice::from_raw_parts(self.table_ptr as *const u8, self.n_rows * self.row_bytes)
        };
        dequantize_rows(
            self.ty,
            table,
            self.n_rows,
            &[token],
            self.k,
            &mut self.scratch,
        )
        .map_err(|e| ShapeError::new_err(format!("{OP} {e}")))?;
        let mut exe = exe.try_borrow_mut().map_err(|_| {
            RlxError::new_err(format!("{OP} the executable is in use by another call"))
        })?;
        let arena = exe.arena_mut();
        if arena.len() != self.arena_len {
            return Err(RlxError::new_err(format!(
                "{OP} the executable's arena has {} bytes, the step was laid out for {}",
                arena.len(),
                self.arena_len
            )));
        }
        for (i, v) in self.scratch.iter().enumerate() {
            put(arena, self.x + 4 * i, (v * self.scale).to_ne_bytes());
        }
        for g in &self.rope {
            for (i, inv) in g.inv_freq.iter().enumerate() {
                let ang = f64::from(pos) * inv;
                put(arena, g.cos + 4 * i, (ang.cos() as f32).to_ne_bytes());
                put(arena, g.sin + 4 * i, (ang.sin() as f32).to_ne_bytes());
            }
        }
        put(arena, self.slots, (kv - 1).to_ne_bytes());
        put(arena, self.kv_len, kv.to_ne_bytes());
        if let Some(r) = self.row {
            put(arena, r, 0i32.to_ne_bytes());
        }
        exe.run(py, fallback, None)
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDecodeStep>()
}
