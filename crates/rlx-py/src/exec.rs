//! `rlx._rlx.Executable`: a compiled graph with its arena, weights segments
//! and state buffer, run by the host executor. Python's `rlx.Executable`
//! wraps it (input checks, numpy conversion); this file only moves bytes and
//! calls.
//!
//! # Weights segments
//!
//! Segment 0 holds the compiler's constants; segment `1 + i` holds param
//! `i`. A param segment is unset until the param is given, then either
//! *owned* (an aligned buffer `set_param` copies into) or *external*: a
//! pointer into memory owned by a Python object (a numpy array, possibly a
//! read-only `np.memmap` of a model file), which the segment keeps alive.
//! Kernels only ever read weights. Safety contract of external segments:
//! the memory must not be mutated while a run is in progress and must stay
//! valid while the owner object lives (true of numpy arrays and memmaps).
//!
//! # State buffer
//!
//! States live in one buffer behind `Arc<Mutex<..>>` so that several
//! executables (a prefill and a decode graph) can share one KV cache; a run
//! holds the lock. `share_state` only accepts an identical state table.
//!
//! # Threads
//!
//! `run` releases the GIL while the schedule runs, and holds `&mut self`
//! (PyO3's borrow flag) and the state lock meanwhile: a second call on the
//! same object from another thread would fail with PyO3's "Already
//! borrowed", and a run of another executable sharing the state with an
//! `RlxError` ("state buffer in use"). This class is therefore not called
//! concurrently: the Python wrapper (`rlx.Executable`) serialises every call
//! that touches an executable's buffers under one re-entrant lock, shared by
//! the executables sharing a state buffer (`python/rlx/concurrency.py`), so
//! neither error can happen through the public API and no two runs ever
//! write one arena or one state buffer at once. Weights segments are
//! read-only during runs and may be shared by any number of executables.

use crate::errors::{
    ir_err, GraphError, KernelError, RlxError, ShapeError, UnsupportedOpError, WeightFormatError,
};
use crate::exec_util::{alloc, binding_tuple};
use crate::exec_util::{
    describe_states, memview, readonly_memview, state_table, thunk_table, thunk_to_json, SegStore,
};
use crate::graph::PyGraph;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rlx_metal::compile::active::ActivePlan;
use rlx_metal::compile::{
    compile, verify::verify_schedule, verify::VerifyContext, CompileError, CompileOptions, Compiled,
};
use rlx_metal::host::buffer::{AlignedBuf, Mem, Segment};
use rlx_metal::host::exec::{HostExecutor, Mode, RunError};
use rlx_metal::metal::plan::{Command, MetalPlan};
use rlx_metal::metal::sim::{SimBuffers, SimError, SimExecutor};
use rlx_metal::thunk::ByteRange;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The state buffer, shareable between executables.
type SharedState = Arc<Mutex<AlignedBuf>>;

/// A compiled, runnable graph.
///
/// The compiled plan (schedule, Metal plan, per-thunk JSON) is immutable
/// after compile and shared by every [`PyExecutable::instance`] of it; each
/// instance owns its arena, weights segments and state buffer.
#[pyclass(name = "Executable", module = "rlx._rlx")]
pub struct PyExecutable {
    compiled: Arc<Compiled>,
    arena: AlignedBuf,
    stores: Vec<SegStore>,
    /// `stores` as raw segments, rebuilt whenever a store changes.
    segments: Vec<Segment>,
    state: SharedState,
    exec: HostExecutor,
    /// The schedule as Metal commands (figures in `stats`; what
    /// `device="metal-sim"` runs).
    plan: Arc<MetalPlan>,
    /// Set for `device="metal-sim"`: runs `plan` through msl-sim.
    sim: Option<SimExecutor>,
    /// Per-thunk JSON handed to the fallback (built once).
    thunk_json: Arc<Vec<String>>,
    /// Whether the schedule verifier ran at compile (`RLX_VERIFY=1`).
    verified_at_compile: bool,
    /// Active-extent plan (the scaled thunks are made per run).
    active: Option<ActivePlan>,
}

fn compile_err(e: CompileError) -> PyErr {
    match e {
        CompileError::Ir(ir) => ir_err(ir),
        CompileError::Unsupported { .. } | CompileError::BadParam { .. } => {
            UnsupportedOpError::new_err(e.to_string())
        }
        CompileError::UnboundDim { .. } => ShapeError::new_err(e.to_string()),
        _ => GraphError::new_err(e.to_string()),
    }
}

#[pymethods]
impl PyExecutable {
    /// Compile `graph` for `device` (`"host"`, `"reference"` or
    /// `"metal-sim"`: the Metal plan through msl-sim, needs clang++),
    /// binding symbolic dims from `dims`.
    #[new]
    #[pyo3(signature = (graph, device = "host", dims = None, rng_seed = 0, rng_offset = 0))]
    fn new(
        graph: &PyGraph,
        device: &str,
        dims: Option<HashMap<String, usize>>,
        rng_seed: u64,
        rng_offset: u64,
    ) -> PyResult<Self> {
        let mode = match device {
            "host" | "metal-sim" => Mode::Native,
            "reference" => Mode::Reference,
            other => {
                return Err(PyValueError::new_err(format!(
                "[compile] unknown device '{other}' (expected 'host', 'reference' or 'metal-sim')"
            )))
            }
        };
        let opts = CompileOptions {
            dims: dims.unwrap_or_default(),
            rng: rlx_ir::RngOptions {
                seed: rng_seed,
                counter: rng_offset,
            },
        };
        let compiled = compile(&graph.inner, &opts).map_err(compile_err)?;
        let constants_len = compiled.segment_bytes.first().copied().unwrap_or(0);
        let mut constants = alloc("weights segment 0 (constants)", constants_len)?;
        for (off, bytes) in &compiled.constants {
            let dst = constants
                .as_mut_slice()
                .get_mut(*off..*off + bytes.len())
                .ok_or_else(|| {
                    GraphError::new_err(format!(
                        "[compile] constant at {off}..{} outside weights segment 0 of {constants_len}",
                        off + bytes.len()
                    ))
                })?;
            dst.copy_from_slice(bytes);
        }
        let mut stores = vec![SegStore::Owned(constants)];
        stores.extend((1..compiled.segment_bytes.len()).map(|_| SegStore::Unset));
        let segments = stores.iter_mut().map(SegStore::segment).collect();
        let verified_at_compile = rlx_ir::env::flag("RLX_VERIFY");
        if verified_at_compile {
            verify(&compiled).map_err(compile_err)?;
        }
        let thunk_json = Arc::new(compiled.schedule.thunks.iter().map(thunk_to_json).collect());
        let plan = Arc::new(MetalPlan::build(&compiled.schedule));
        Ok(PyExecutable {
            plan,
            sim: (device == "metal-sim").then(SimExecutor::new),
            arena: alloc("activation arena", compiled.arena_bytes)?,
            stores,
            segments,
            state: Arc::new(Mutex::new(alloc("state buffer", compiled.state_bytes)?)),
            exec: HostExecutor::new(mode),
            thunk_json,
            compiled: Arc::new(compiled),
            verified_at_compile,
            active: None,
        })
    }

    /// Another instance of this compiled plan, without compiling again: it
    /// shares the schedule, the Metal plan and the weights (owned segments
    /// are copied, zero-copy bindings point at the same memory and keep its
    /// owner alive) but has its own zeroed arena and state buffer (e.g. one
    /// KV cache per concurrent sequence), its own profiling / tracing and
    /// the active-extent plan set so far. With `state_of`, the instance uses
    /// that executable's state buffer from the start (as `share_state`
    /// would, without allocating its own first; identical state tables
    /// only).
    #[pyo3(signature = (state_of = None))]
    fn instance(
        &self,
        py: Python<'_>,
        state_of: Option<&Bound<'_, PyExecutable>>,
    ) -> PyResult<Self> {
        let shared = match state_of {
            None => None,
            Some(o) => {
                let o = o
                    .try_borrow()
                    .map_err(|_| RlxError::new_err("[instance] the state owner is in use"))?;
                let (mine, theirs) = (state_table(&self.compiled), state_table(&o.compiled));
                if mine != theirs {
                    return Err(RlxError::new_err(format!(
                        "[instance] state tables differ: this plan has {}; the owner has {}",
                        describe_states(&mine),
                        describe_states(&theirs)
                    )));
                }
                Some(Arc::clone(&o.state))
            }
        };
        let mut stores = Vec::with_capacity(self.stores.len());
        for (i, st) in self.stores.iter().enumerate() {
            stores.push(match st {
                SegStore::Unset => SegStore::Unset,
                SegStore::Owned(b) => {
                    let mut copy = alloc(&format!("weights segment {i}"), b.len())?;
                    copy.as_mut_slice().copy_from_slice(b.as_slice());
                    SegStore::Owned(copy)
                }
                SegStore::External { _owner, ptr, len } => SegStore::External {
                    _owner: _owner.clone_ref(py),
                    ptr: *ptr,
                    len: *len,
                },
            });
        }
        let segments = stores.iter_mut().map(SegStore::segment).collect();
        let mode = self.exec.mode();
        Ok(PyExecutable {
            compiled: Arc::clone(&self.compiled),
            arena: alloc("activation arena", self.compiled.arena_bytes)?,
            stores,
            segments,
            state: match shared {
                Some(st) => st,
                None => Arc::new(Mutex::new(alloc(
                    "state buffer",
                    self.compiled.state_bytes,
                )?)),
            },
            exec: HostExecutor::new(mode),
            plan: Arc::clone(&self.plan),
            sim: self.sim.as_ref().map(|_| SimExecutor::new()),
            thunk_json: Arc::clone(&self.thunk_json),
            verified_at_compile: self.verified_at_compile,
            active: self.active.clone(),
        })
    }

    /// True when `other` runs the same compiled plan (one is an
    /// [`instance`](Self::instance) of the other, or both of a third).
    fn shares_plan_with(&self, other: &Bound<'_, PyExecutable>) -> bool {
        match other.try_borrow() {
            Ok(o) => Arc::ptr_eq(&self.compiled, &o.compiled),
            Err(_) => true, // `other` is `self`
        }
    }

    /// Switch per-thunk timing of runs on (clearing earlier figures) or off.
    fn set_profiling(&mut self, on: bool) {
        self.exec.set_profiling(on);
    }

    /// Per-thunk timing since profiling was switched on: a list of
    /// `(index, thunk name, seconds, calls)` for the thunks that ran.
    fn profile(&self) -> Vec<(usize, &'static str, f64, u64)> {
        self.exec
            .profile()
            .iter()
            .enumerate()
            .filter(|(_, p)| p.1 > 0)
            .filter_map(|(i, p)| {
                let t = self.compiled.schedule.thunks.get(i)?;
                Some((i, t.name(), p.0, p.1))
            })
            .collect()
    }

    /// Switch per-thunk tracing of runs on (clearing earlier slices) or off.
    fn set_tracing(&mut self, on: bool) {
        self.exec.set_tracing(on);
    }

    /// `(index, start, seconds)` of every thunk run since tracing began or
    /// the last call (start: seconds after its run started).
    fn take_trace(&mut self) -> Vec<(usize, f64, f64)> {
        let slices = self.exec.take_trace();
        slices
            .iter()
            .map(|s| (s.index, s.start, s.seconds))
            .collect()
    }

    /// Per thunk: `(name, bytes read, bytes written, native)` from `io()`.
    fn thunk_table(&self) -> Vec<(&'static str, usize, usize, bool)> {
        thunk_table(&self.compiled.schedule.thunks, &self.exec)
    }

    /// The compile stages: `(name, start, seconds)`, start after the compile began.
    fn compile_stages(&self) -> Vec<(&'static str, f64, f64)> {
        self.compiled.stages.clone()
    }

    /// The fusion-pass report: one line per pass (matches, thunks before
    /// and after), then dispatches lowered → final.
    fn pass_report(&self) -> String {
        let m = self.plan.stats();
        let mut r = self.compiled.passes.to_string();
        if !r.is_empty() && !r.ends_with('\n') {
            r.push('\n');
        }
        r.push_str(&format!(
            "metal plan: {} dispatches, {} barriers, {} host commands\n",
            m.dispatches, m.barriers, m.host
        ));
        r
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

    /// Number of weights segments (1 + number of params).
    fn segment_count(&self) -> usize {
        self.stores.len()
    }

    /// A memoryview of weights segment `i`: writable when owned, read-only
    /// when external, `None` while unset. Invalidated when the segment is
    /// bound or owned anew.
    fn segment_view(&mut self, py: Python<'_>, i: usize) -> PyResult<Option<PyObject>> {
        match self.stores.get_mut(i) {
            None => Err(self.no_segment(i)),
            Some(SegStore::Unset) => Ok(None),
            Some(SegStore::Owned(b)) => {
                let len = b.len();
                memview(py, b.as_mut_ptr(), len).map(Some)
            }
            Some(SegStore::External { ptr, len, .. }) => readonly_memview(py, *ptr, *len).map(Some),
        }
    }

    /// Make weights segment `i` owned (allocating zeroed bytes unless it is
    /// owned already, dropping any external binding) and return a writable
    /// memoryview of it (what `set_param` copies into).
    fn own_segment(&mut self, py: Python<'_>, i: usize) -> PyResult<PyObject> {
        let len = self.segment_len(i)?;
        if !matches!(self.stores[i], SegStore::Owned(_)) {
            self.stores[i] = SegStore::Owned(alloc(&format!("weights segment {i}"), len)?);
            self.segments[i] = self.stores[i].segment();
        }
        let seg = self.segments[i];
        memview(py, seg.ptr.cast_mut(), seg.len)
    }

    /// Bind weights segment `i` to `nbytes` bytes at `address`, owned by
    /// `owner` (zero-copy; `owner` is kept alive). Internal: the caller
    /// guarantees the memory belongs to `owner`, stays valid while `owner`
    /// lives and is not mutated during a run. `nbytes` must equal the
    /// segment's size and `address` be a multiple of `align`.
    fn bind_segment(
        &mut self,
        i: usize,
        owner: PyObject,
        address: usize,
        nbytes: usize,
        align: usize,
    ) -> PyResult<()> {
        let len = self.segment_len(i)?;
        if nbytes != len {
            return Err(ShapeError::new_err(format!(
                "[bind_param] weights segment {i} holds {len} bytes, the buffer has {nbytes}"
            )));
        }
        if align > 1 && !address.is_multiple_of(align) {
            return Err(WeightFormatError::new_err(format!(
                "[bind_param] weights segment {i}: buffer address {address:#x} is not aligned to {align} bytes"
            )));
        }
        if address == 0 && nbytes > 0 {
            return Err(PyValueError::new_err(format!(
                "[bind_param] weights segment {i}: null buffer address"
            )));
        }
        self.stores[i] = SegStore::External {
            _owner: owner,
            ptr: address as *const u8,
            len: nbytes,
        };
        self.segments[i] = self.stores[i].segment();
        Ok(())
    }

    /// Writable memoryview of the state buffer (invalidated by `share_state`).
    fn state_view(&mut self, py: Python<'_>) -> PyResult<PyObject> {
        let (ptr, len) = {
            let mut st = self.lock_state()?;
            let len = st.len();
            (st.as_mut_ptr(), len)
        };
        memview(py, ptr, len)
    }

    /// Use `other`'s state buffer from now on. Both must have the same state
    /// table (names, dtypes, shapes, offsets), else `RlxError`.
    fn share_state(&mut self, other: &Bound<'_, PyExecutable>) -> PyResult<()> {
        let Ok(other) = other.try_borrow() else {
            // `other` is `self` (already mutably borrowed): nothing to do.
            return Ok(());
        };
        let mine = state_table(&self.compiled);
        let theirs = state_table(&other.compiled);
        if mine != theirs {
            return Err(RlxError::new_err(format!(
                "[share_state] state tables differ: this executable has {}; the other has {}",
                describe_states(&mine),
                describe_states(&theirs)
            )));
        }
        self.state = Arc::clone(&other.state);
        Ok(())
    }

    /// True when `other` uses the same state buffer.
    fn shares_state_with(&self, other: &Bound<'_, PyExecutable>) -> bool {
        match other.try_borrow() {
            Ok(o) => Arc::ptr_eq(&self.state, &o.state),
            Err(_) => true, // `other` is `self`
        }
    }

    /// Zero-fill the state buffer.
    fn reset_state(&mut self) -> PyResult<()> {
        self.lock_state()?.as_mut_slice().fill(0);
        Ok(())
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

    /// Plan running this schedule (compiled for `full` token rows) on a
    /// prefix of its rows; `inputs` are the inputs whose leading axis is
    /// the token axis. Returns how many thunks scale. Raises when some
    /// thunk that reads token rows has no prefix form (the error names it).
    fn set_active_extent(&mut self, full: u32, inputs: Vec<String>) -> PyResult<usize> {
        let mut ranges = Vec::new();
        for name in &inputs {
            let b = self
                .compiled
                .inputs
                .iter()
                .find(|b| &b.name == name)
                .ok_or_else(|| {
                    RlxError::new_err(format!("[active extent] no input named '{name}'"))
                })?;
            let len = b.shape.size_bytes().unwrap_or(0);
            ranges.push(ByteRange::new(b.offset, len));
        }
        let plan = ActivePlan::new(&self.compiled.schedule.thunks, &ranges, full)
            .map_err(|e| RlxError::new_err(e.to_string()))?;
        let scaled = plan.scaled();
        self.active = Some(plan);
        Ok(scaled)
    }

    /// Run once. `fallback(index, thunk_json)` is called for thunks without
    /// a native kernel; the GIL is released while native kernels run. With
    /// `active`, only the first `active` token rows are computed (after
    /// `set_active_extent`).
    #[pyo3(signature = (fallback, active = None))]
    pub(crate) fn run(
        &mut self,
        py: Python<'_>,
        fallback: PyObject,
        active: Option<u32>,
    ) -> PyResult<()> {
        let arena_len = self.arena.len();
        let arena_ptr = self.arena.as_mut_ptr() as usize;
        let overlay = match active {
            None => Vec::new(),
            Some(a) => {
                let plan = self.active.as_ref().ok_or_else(|| {
                    RlxError::new_err(
                        "[run] active rows given, but set_active_extent was not called",
                    )
                })?;
                plan.overlay(&self.compiled.schedule, a)
                    .map_err(|e| RlxError::new_err(e.to_string()))?
            }
        };
        let schedule = &self.compiled.schedule;
        let json = &self.thunk_json;
        let exec = &mut self.exec;
        let sim = self.sim.as_mut();
        // metal-sim with active rows: the plan of the scaled schedule (its
        // dispatch grids and barriers follow the scaled thunks)
        let scaled_run = match (&sim, overlay.is_empty()) {
            (Some(_), false) => {
                let mut s = self.compiled.schedule.clone();
                for (i, t) in &overlay {
                    s.thunks[*i] = t.clone();
                }
                let p = MetalPlan::build(&s);
                Some((s, p))
            }
            _ => None,
        };
        let (sim_schedule, plan) = match &scaled_run {
            Some((s, p)) => (s, p),
            None => (schedule, &*self.plan),
        };
        let segments = &self.segments;
        let state = &self.state;
        let result = py.allow_threads(|| {
            // Hold the state lock for the whole run; a run that finds it held
            // (another executable sharing the buffer, re-entered from a
            // callback) fails rather than deadlocks.
            let Some(mut guard) = try_lock_state(state) else {
                return Err(None);
            };
            let state_len = guard.len();
            let mut fb = |i: usize, t: &rlx_metal::thunk::Thunk| -> Result<(), PyErr> {
                // a scaled (active-extent) thunk differs from its compiled JSON
                let scaled = overlay.iter().any(|(k, _)| *k == i);
                let text = if scaled {
                    std::borrow::Cow::Owned(thunk_to_json(t))
                } else {
                    std::borrow::Cow::Borrowed(json[i].as_str())
                };
                Python::with_gil(|py| {
                    fallback.call1(py, (i, text.as_ref()))?;
                    Ok(())
                })
            };
            match sim {
                None => {
                    // SAFETY: the arena is owned by `self`, the state buffer
                    // is locked, the owned segments belong to `self` and the
                    // external ones to objects it keeps alive; all stay put
                    // for the call and are only touched through `mem` and the
                    // fallback in between.
                    let mem = unsafe {
                        Mem::new(
                            arena_ptr as *mut u8,
                            arena_len,
                            guard.as_mut_ptr(),
                            state_len,
                            segments,
                        )
                    };
                    exec.run_overlay(schedule, &overlay, &mem, &mut fb)
                        .map_err(|e| Some(SimError::Host(e)))
                }
                Some(sim) => {
                    // SAFETY: as for `mem` in the host arm: the segments'
                    // owners keep them alive and unmodified for the run.
                    let segs: Vec<&[u8]> = segments
                        .iter()
                        .map(|s| {
                            if s.ptr.is_null() || s.len == 0 {
                                &[][..]
                            } else {
                                unsafe { std::slice::from_raw_parts(s.ptr, s.len) }
                            }
                        })
                        .collect();
                    // SAFETY: the arena belongs to `self`, borrowed mutably.
                    let arena =
                        unsafe { std::slice::from_raw_parts_mut(arena_ptr as *mut u8, arena_len) };
                    let bufs = SimBuffers {
                        arena,
                        state: guard.as_mut_slice(),
                        segments: &segs,
                    };
                    sim.run(plan, sim_schedule, bufs, &mut fb).map_err(Some)
                }
            }
        });
        match result {
            Ok(()) => Ok(()),
            Err(None) => Err(RlxError::new_err(
                "[run] the state buffer is in use by another run (an executable sharing it)",
            )),
            Err(Some(SimError::Host(e))) => Err(run_err(py, e)),
            Err(Some(e)) => Err(KernelError::new_err(e.to_string())),
        }
    }

    /// The schedule, one thunk per line with offsets.
    fn schedule(&self) -> String {
        self.compiled.schedule.to_string()
    }

    /// Per thunk `(name, text, reads, writes, made_by)` (see `inspect.rs`).
    fn thunk_rows(&self) -> Vec<crate::inspect::ThunkRow> {
        crate::inspect::thunk_rows(&self.compiled)
    }

    /// The memory plan per node of the compiled graph (see `inspect.rs`).
    fn value_plan(&self) -> crate::inspect::ValuePlan {
        crate::inspect::value_plan(&self.compiled)
    }

    /// The Metal plan, `(kind, thunk, kernel, grid, threadgroup)` per command.
    fn metal_commands(&self) -> Vec<crate::inspect::CommandRow> {
        crate::inspect::command_rows(&self.plan)
    }

    /// The Metal plan, one command per line (`dispatch #3 rms_norm_f32 ...`).
    fn metal_plan(&self) -> String {
        self.plan.to_string()
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

    /// Figures of the compile: arena / naive / state bytes, weights bytes
    /// (`weights_bytes` declared, `weights_bytes_owned` held in owned
    /// segments, `weights_bytes_external` bound zero-copy), thunk count, whether the verifier ran at compile (`verified_at_compile`),
    /// native vs fallback thunks, a count per thunk name
    /// (`by_thunk`) and per thunk name of those run by the fallback
    /// (`fallback_by_thunk`), and per thunk name those the Metal plan runs
    /// as host commands (`metal_host_by_thunk`); `graph_passes` lists the
    /// graph fusions as `(name, enabled, matches, nodes before, after)`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = &self.compiled;
        let d = PyDict::new(py);
        d.set_item("arena_bytes", c.arena_bytes)?;
        d.set_item("naive_bytes", c.naive_bytes)?;
        d.set_item("state_bytes", c.state_bytes)?;
        d.set_item("weights_bytes", c.weights_bytes())?;
        let (mut owned, mut external) = (0usize, 0usize);
        for st in &self.stores {
            match st {
                SegStore::Unset => {}
                SegStore::Owned(b) => owned += b.len(),
                SegStore::External { len, .. } => external += len,
            }
        }
        d.set_item("weights_bytes_owned", owned)?;
        d.set_item("weights_bytes_external", external)?;
        d.set_item("segments", self.stores.len())?;
        d.set_item("thunks", c.schedule.thunks.len())?;
        d.set_item("dispatches_lowered", c.passes.dispatches_before)?;
        d.set_item("dispatches", c.passes.dispatches_after)?;
        crate::inspect::pass_stats(py, c, &d)?;
        d.set_item("verified_at_compile", self.verified_at_compile)?;
        let m = self.plan.stats();
        d.set_item("metal_dispatches", m.dispatches)?;
        d.set_item("metal_barriers", m.barriers)?;
        d.set_item("metal_host", m.host)?;
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
        let host = PyDict::new(py);
        for cmd in &self.plan.commands {
            if let Command::Host { thunk } = cmd {
                if let Some(t) = c.schedule.thunks.get(*thunk) {
                    bump(&host, t.name())?;
                }
            }
        }
        d.set_item("metal_host_by_thunk", host)?;
        Ok(d)
    }
}

impl PyExecutable {
    /// The activation arena (inputs live in it; see `crate::step`).
    pub(crate) fn arena_mut(&mut self) -> &mut [u8] {
        self.arena.as_mut_slice()
    }

    fn no_segment(&self, i: usize) -> PyErr {
        PyValueError::new_err(format!(
            "[segment] no weights segment {i} (there are {})",
            self.stores.len()
        ))
    }

    /// Declared byte length of segment `i`.
    fn segment_len(&self, i: usize) -> PyResult<usize> {
        self.compiled
            .segment_bytes
            .get(i)
            .copied()
            .ok_or_else(|| self.no_segment(i))
    }

    fn lock_state(&self) -> PyResult<std::sync::MutexGuard<'_, AlignedBuf>> {
        try_lock_state(&self.state).ok_or_else(|| {
            RlxError::new_err(
                "[state] the state buffer is in use by a run of an executable sharing it",
            )
        })
    }
}

/// Lock the state buffer unless a run holds it. A lock poisoned by a
/// panicking kernel is taken over: the bytes are plain data, valid whatever
/// the kernel left in them.
fn try_lock_state(state: &SharedState) -> Option<std::sync::MutexGuard<'_, AlignedBuf>> {
    match state.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// The Python error of a failed run.
fn run_err(py: Python<'_>, e: RunError<PyErr>) -> PyErr {
    match e {
        RunError::Fallback {
            index,
            thunk,
            source,
        } => {
            let err = KernelError::new_err(format!(
                "[{thunk}] thunk {index} failed in its host callback: {source}"
            ));
            err.set_cause(py, Some(source));
            err
        }
        e => KernelError::new_err(e.to_string()),
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
    for b in &c.inputs {
        if rlx_metal::thunk::is_arena(b.offset) {
            initialized.push(b.offset..b.offset + b.shape.size_bytes().unwrap_or(0));
        }
    }
    verify_schedule(
        &c.schedule,
        &VerifyContext {
            arena_bytes: c.arena_bytes,
            state_bytes: c.state_bytes,
            segment_bytes: c.segment_bytes.clone(),
            initialized,
            groups: Vec::new(),
        },
    )
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyExecutable>()?;
    Ok(())
}
