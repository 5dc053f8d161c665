//! The host executor: runs a thunk schedule on the CPU over the arena.
//!
//! Each thunk runs through its native kernel when it has one
//! ([`super::native`]); any other thunk — and every thunk in reference mode —
//! goes to the caller's fallback (the Python bindings route it to the numpy
//! reference). The executor allocates nothing per run once warm: staging
//! buffers for in-place-aliased operands are reused.

use super::buffer::{Mem, MemError};
use super::kernels::KernelError;
use crate::thunk::{Thunk, ThunkSchedule};
use thiserror::Error;

/// Which thunks run natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Native kernels where they exist, the fallback for the rest.
    Native,
    /// Every thunk through the fallback (the numpy reference).
    Reference,
}

/// A failed run; names the thunk.
#[derive(Debug, Error)]
pub enum RunError<E: std::fmt::Display> {
    /// A native kernel rejected its operands.
    #[error("[{thunk}] thunk {index}: {source}")]
    Kernel {
        /// Thunk index.
        index: usize,
        /// Thunk name.
        thunk: &'static str,
        /// The kernel's error.
        source: KernelError,
    },
    /// An operand range could not be mapped.
    #[error("[{thunk}] thunk {index}: {source}")]
    Mem {
        /// Thunk index.
        index: usize,
        /// Thunk name.
        thunk: &'static str,
        /// The mapping error.
        source: MemError,
    },
    /// The fallback failed.
    #[error("[{thunk}] thunk {index}: {source}")]
    Fallback {
        /// Thunk index.
        index: usize,
        /// Thunk name.
        thunk: &'static str,
        /// The fallback's error.
        source: E,
    },
}

/// Errors of one native thunk (before the executor adds the thunk index).
#[derive(Debug, Error)]
pub enum NativeError {
    /// Kernel precondition failed.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// Operand mapping failed.
    #[error(transparent)]
    Mem(#[from] MemError),
}

/// Reusable scratch for operands that alias the thunk's output (one
/// buffer per operand slot; 8-byte words so any element type fits aligned).
#[derive(Default)]
pub struct Staging {
    /// First operand slot.
    pub a: Vec<u64>,
    /// Second operand slot.
    pub b: Vec<u64>,
    /// Third operand slot.
    pub c: Vec<u64>,
}

/// One thunk of a traced run ([`HostExecutor::set_tracing`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThunkSlice {
    /// Thunk index in the schedule.
    pub index: usize,
    /// Seconds from the start of its run to the thunk's start.
    pub start: f64,
    /// Seconds the thunk took (native kernel or fallback call).
    pub seconds: f64,
}

/// Runs schedules on the CPU.
pub struct HostExecutor {
    mode: Mode,
    staging: Staging,
    /// How many thunks of the last run went to the fallback.
    pub last_fallbacks: usize,
    /// Per-thunk wall time of every run since profiling was switched on
    /// (`None` = off): seconds and calls by thunk index.
    profile: Option<Vec<(f64, u64)>>,
    /// One slice per thunk run since tracing was switched on (`None` = off:
    /// no clock is read).
    trace: Option<Vec<ThunkSlice>>,
}

/// Size rayon's global pool from `RLX_NUM_THREADS` (0 or unset: one
/// worker per core; at most [`rlx_ir::env::max_threads`]), once per process. Later calls do nothing; a pool some
/// other code built first is kept.
pub fn init_threads() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // the worker team's spin budget is read when the team starts (on
        // the first parallel quantised matmul); read it here too, so that a
        // bad value warns with the first executor rather than maybe never
        let _ = rlx_ir::env::int_at_most("RLX_SPIN_US", rlx_ir::env::MAX_SPIN_US);
        // one per core when unset; clamped to four per core (with a warning)
        let n = rlx_ir::env::threads("RLX_NUM_THREADS");
        if n > 0 {
            // An error only means a global pool exists already.
            let _ = rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build_global();
        }
    });
}

impl HostExecutor {
    /// An executor in `mode`. The first one sizes the worker pool
    /// ([`init_threads`]).
    pub fn new(mode: Mode) -> Self {
        init_threads();
        HostExecutor {
            mode,
            staging: Staging::default(),
            last_fallbacks: 0,
            profile: None,
            trace: None,
        }
    }

    /// Switch per-thunk tracing on (clearing earlier slices) or off.
    pub fn set_tracing(&mut self, on: bool) {
        self.trace = on.then(Vec::new);
    }

    /// The slices recorded since tracing was switched on or last taken
    /// (empty when off); tracing stays on.
    pub fn take_trace(&mut self) -> Vec<ThunkSlice> {
        self.trace.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Switch per-thunk timing on (clearing what was gathered) or off.
    pub fn set_profiling(&mut self, on: bool) {
        self.profile = on.then(Vec::new);
    }

    /// Seconds and calls per thunk index gathered since profiling was
    /// switched on (empty when off).
    pub fn profile(&self) -> &[(f64, u64)] {
        self.profile.as_deref().unwrap_or(&[])
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// True when thunk `t` has a native kernel (in native mode it runs natively).
    pub fn is_native(&self, t: &Thunk) -> bool {
        self.mode == Mode::Native && super::native::has_native(t)
    }

    /// Run every thunk of `schedule` in order.
    pub fn run<E: std::fmt::Display>(
        &mut self,
        schedule: &ThunkSchedule,
        mem: &Mem,
        fallback: &mut dyn FnMut(usize, &Thunk) -> Result<(), E>,
    ) -> Result<(), RunError<E>> {
        self.run_overlay(schedule, &[], mem, fallback)
    }

    /// Run `schedule` with some thunks replaced: `overlay` holds
    /// `(index, thunk)` pairs in increasing index order (the active-extent
    /// scaled thunks); the fallback sees the replacement.
    pub fn run_overlay<E: std::fmt::Display>(
        &mut self,
        schedule: &ThunkSchedule,
        overlay: &[(usize, Thunk)],
        mem: &Mem,
        fallback: &mut dyn FnMut(usize, &Thunk) -> Result<(), E>,
    ) -> Result<(), RunError<E>> {
        self.last_fallbacks = 0;
        let run_start = self.trace.is_some().then(std::time::Instant::now);
        let timed = run_start.is_some() || self.profile.is_some();
        let mut replaced = overlay.iter().peekable();
        for (index, t) in schedule.thunks.iter().enumerate() {
            let t = match replaced.next_if(|(i, _)| *i == index) {
                Some((_, r)) => r,
                None => t,
            };
            if matches!(t, Thunk::Nop) {
                continue;
            }
            let started = timed.then(std::time::Instant::now);
            let result = self.run_one(index, t, mem, schedule, fallback);
            if let Some(t0) = started {
                let seconds = t0.elapsed().as_secs_f64();
                if let Some(p) = self.profile.as_mut() {
                    if p.len() < schedule.thunks.len() {
                        p.resize(schedule.thunks.len(), (0.0, 0));
                    }
                    p[index].0 += seconds;
                    p[index].1 += 1;
                }
                if let (Some(r0), Some(tr)) = (run_start, self.trace.as_mut()) {
                    let start = t0.duration_since(r0).as_secs_f64();
                    tr.push(ThunkSlice {
                        index,
                        start,
                        seconds,
                    });
                }
            }
            result?;
        }
        Ok(())
    }

    /// Run thunk `index` of `schedule` alone, natively or through
    /// `fallback` (the metal-sim executor's host commands).
    pub fn run_thunk<E: std::fmt::Display>(
        &mut self,
        index: usize,
        schedule: &ThunkSchedule,
        mem: &Mem,
        fallback: &mut dyn FnMut(usize, &Thunk) -> Result<(), E>,
    ) -> Result<(), RunError<E>> {
        match schedule.thunks.get(index) {
            Some(Thunk::Nop) | None => Ok(()),
            Some(t) => self.run_one(index, t, mem, schedule, fallback),
        }
    }

    /// Run thunk `index` natively or through the fallback.
    fn run_one<E: std::fmt::Display>(
        &mut self,
        index: usize,
        t: &Thunk,
        mem: &Mem,
        schedule: &ThunkSchedule,
        fallback: &mut dyn FnMut(usize, &Thunk) -> Result<(), E>,
    ) -> Result<(), RunError<E>> {
        let thunk = t.name();
        {
            if self.mode == Mode::Native {
                match super::native::run(t, mem, &mut self.staging, schedule) {
                    Some(Ok(())) => return Ok(()),
                    Some(Err(NativeError::Kernel(source))) => {
                        return Err(RunError::Kernel {
                            index,
                            thunk,
                            source,
                        })
                    }
                    Some(Err(NativeError::Mem(source))) => {
                        return Err(RunError::Mem {
                            index,
                            thunk,
                            source,
                        })
                    }
                    None => {}
                }
            }
            self.last_fallbacks += 1;
            fallback(index, t).map_err(|source| RunError::Fallback {
                index,
                thunk,
                source,
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::{compile, CompileOptions};
    use crate::host::buffer::{AlignedBuf, Segment};
    use rlx_ir::op::{Activation, BinaryOp};
    use rlx_ir::{DType, Graph, Op, Shape};

    /// `relu(x + x)` over f32[4, 8]: two native thunks.
    fn two_thunks() -> crate::compile::Compiled {
        let mut g = Graph::new("t");
        let shape = Shape::of(&[4, 8], DType::F32);
        let x = g.add(Op::Input { shape }, &[], "x").unwrap();
        let kind = BinaryOp::Add;
        let s = g.add(Op::Binary { kind }, &[x, x], "s").unwrap();
        let kind = Activation::Relu;
        let r = g.add(Op::Activation { kind }, &[s], "r").unwrap();
        g.set_outputs(&[r]).unwrap();
        compile(&g, &CompileOptions::default()).unwrap()
    }

    fn run(exec: &mut HostExecutor, c: &crate::compile::Compiled) {
        let mut arena = AlignedBuf::try_zeroed(c.arena_bytes).unwrap();
        let mut seg0 = AlignedBuf::try_zeroed(c.segment_bytes[0]).unwrap();
        let segs = [Segment {
            ptr: seg0.as_mut_ptr(),
            len: seg0.len(),
        }];
        // SAFETY: both buffers live for the call and are touched only here.
        let mem = unsafe {
            Mem::new(
                arena.as_mut_ptr(),
                arena.len(),
                std::ptr::null_mut(),
                0,
                &segs,
            )
        };
        let mut fb = |_: usize, t: &Thunk| -> Result<(), String> { Err(t.name().into()) };
        exec.run(&c.schedule, &mem, &mut fb).unwrap();
    }

    #[test]
    fn tracing_records_one_slice_per_thunk_only_when_on() {
        let c = two_thunks();
        let live = dispatches(&c);
        assert!(live >= 1);
        let mut exec = HostExecutor::new(Mode::Native);
        run(&mut exec, &c);
        assert!(exec.take_trace().is_empty(), "tracing is off by default");
        exec.set_tracing(true);
        run(&mut exec, &c);
        run(&mut exec, &c);
        let slices = exec.take_trace();
        assert_eq!(slices.len(), 2 * live);
        for run in slices.chunks(live) {
            let mut prev_end = 0.0;
            for s in run {
                assert!(s.start >= prev_end && s.seconds >= 0.0, "{s:?}");
                prev_end = s.start + s.seconds;
            }
        }
        assert!(exec.take_trace().is_empty(), "taken");
        exec.set_tracing(false);
        run(&mut exec, &c);
        assert!(exec.take_trace().is_empty());
    }

    #[test]
    fn compile_reports_its_stages_in_order() {
        let c = two_thunks();
        let names: Vec<_> = c.stages.iter().map(|s| s.0).collect();
        assert_eq!(names, ["check", "fuse", "lower + plan", "passes"]);
        let mut prev_end = 0.0;
        for &(_, start, secs) in &c.stages {
            assert!(start >= prev_end && secs >= 0.0);
            prev_end = start + secs;
        }
    }

    fn dispatches(c: &crate::compile::Compiled) -> usize {
        c.schedule
            .thunks
            .iter()
            .filter(|t| !matches!(t, Thunk::Nop))
            .count()
    }
}
