//! The `metal-sim` executor: runs a whole [`MetalPlan`] on the CPU, each
//! `Dispatch` through msl-sim (the very `.metal` kernels, compiled by
//! clang against msl-sim's `metal_stdlib` shim) over the schedule's arena,
//! state buffer and weights segments, each `Host` command through the host
//! executor (native kernel or fallback callback), each `Check` over the
//! bytes the dispatches left.
//!
//! msl-sim runs dispatches one after another, so `Barrier` commands are
//! no-ops here: barrier placement is checked by the plan's own tests, not
//! by this executor. Weights are bound read-only (msl-sim copies them in
//! and never back); arena and state bytes are bound as views at the
//! dispatch's offsets, so in-place kernels see their own writes.
//!
//! Built with the `metal-sim` feature (and in this crate's tests); needs
//! `clang++` at run time (see msl-sim).

use super::kernels::{source, Family};
use super::plan::{Command, Dispatch, MetalPlan, UserDispatch};
use crate::host::buffer::{Mem, Segment};
use crate::host::exec::{HostExecutor, Mode, RunError};
use crate::thunk::{Buf, Thunk, ThunkSchedule};
use msl_sim::{Binding, Grid, Library};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// A failed metal-sim run; names the thunk.
#[derive(Debug, thiserror::Error)]
pub enum SimError<E: std::fmt::Display> {
    /// msl-sim could not compile the family or run the kernel.
    #[error("[{thunk}] thunk {index} on metal-sim: {source}")]
    Kernel {
        /// Thunk index.
        index: usize,
        /// Thunk name.
        thunk: &'static str,
        /// msl-sim's error.
        source: msl_sim::Error,
    },
    /// A binding names a weights segment the run does not have.
    #[error("[{thunk}] thunk {index}: binding {binding} names weights segment {segment}, but there are {count}")]
    Segment {
        /// Thunk index.
        index: usize,
        /// Thunk name.
        thunk: &'static str,
        /// Binding position.
        binding: usize,
        /// The segment named.
        segment: usize,
        /// Segments present.
        count: usize,
    },
    /// A command names a thunk the schedule does not have (plan and
    /// schedule do not belong together).
    #[error("[metal-sim] the plan names thunk {index}, the schedule has {len}")]
    NoThunk {
        /// The index named.
        index: usize,
        /// Thunks in the schedule.
        len: usize,
    },
    /// A validating kernel tagged an invalid operand (a `Check` command).
    #[error(transparent)]
    Check(#[from] super::check::CheckError),
    /// A host command failed.
    #[error(transparent)]
    Host(#[from] RunError<E>),
}

/// The memory of one run: the activation arena, the state buffer and the
/// weights segments (segment 0 = the compiler's constants).
pub struct SimBuffers<'a> {
    /// The arena.
    pub arena: &'a mut [u8],
    /// The state buffer.
    pub state: &'a mut [u8],
    /// Weights segments, read only.
    pub segments: &'a [&'a [u8]],
}

/// The family's library, compiled once per process.
fn library(f: Family) -> Result<Library, msl_sim::Error> {
    static LIBS: OnceLock<Mutex<HashMap<Family, Library>>> = OnceLock::new();
    let mut libs = LIBS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(l) = libs.get(&f) {
        return Ok(l.clone());
    }
    let lib = Library::from_source(f.file(), &source(f))?;
    libs.insert(f, lib.clone());
    Ok(lib)
}

/// Runs [`MetalPlan`]s through msl-sim (see the module docs).
pub struct SimExecutor {
    host: HostExecutor,
}

impl Default for SimExecutor {
    fn default() -> Self {
        SimExecutor::new()
    }
}

impl SimExecutor {
    /// An executor whose host commands run natively where they can.
    pub fn new() -> Self {
        SimExecutor {
            host: HostExecutor::new(Mode::Native),
        }
    }

    /// Run `plan` (built from `schedule`) over `bufs`; host commands
    /// without a native kernel go to `fallback(index, thunk)`.
    pub fn run<E: std::fmt::Display>(
        &mut self,
        plan: &MetalPlan,
        schedule: &ThunkSchedule,
        bufs: SimBuffers<'_>,
        fallback: &mut dyn FnMut(usize, &Thunk) -> Result<(), E>,
    ) -> Result<(), SimError<E>> {
        let SimBuffers {
            arena,
            state,
            segments,
        } = bufs;
        let thunk_of = |index: usize| {
            schedule.thunks.get(index).ok_or(SimError::NoThunk {
                index,
                len: schedule.thunks.len(),
            })
        };
        for c in &plan.commands {
            match c {
                Command::Barrier => {}
                Command::Dispatch(d) => {
                    let t = thunk_of(d.thunk)?;
                    dispatch(d, t.name(), arena, state, segments)?;
                }
                Command::User(u) => {
                    let t = thunk_of(u.thunk)?;
                    user_dispatch(u, t.name(), arena, state, segments)?;
                }
                Command::Check(k) => {
                    thunk_of(k.thunk)?;
                    let buf: &[u8] = match k.status.buffer {
                        Buf::Arena => arena,
                        Buf::State => state,
                        Buf::Weights(_) => &[],
                    };
                    k.verify(buf)?;
                }
                Command::Host { thunk } => {
                    thunk_of(*thunk)?;
                    let segs: Vec<Segment> = segments
                        .iter()
                        .map(|s| Segment {
                            ptr: s.as_ptr(),
                            len: s.len(),
                        })
                        .collect();
                    // SAFETY: arena and state are exclusively borrowed for
                    // the call, the segments are shared borrows that outlive
                    // `mem`; nothing else touches them meanwhile.
                    let mem = unsafe {
                        Mem::new(
                            arena.as_mut_ptr(),
                            arena.len(),
                            state.as_mut_ptr(),
                            state.len(),
                            &segs,
                        )
                    };
                    self.host.run_thunk(*thunk, schedule, &mem, fallback)?;
                }
            }
        }
        Ok(())
    }
}

/// One dispatch through msl-sim: args at `[[buffer(0)]]`, arena (region 0)
/// and state (region 1) bound as views, weights as read-only bytes.
fn dispatch<E: std::fmt::Display>(
    d: &Dispatch,
    thunk: &'static str,
    arena: &mut [u8],
    state: &mut [u8],
    segments: &[&[u8]],
) -> Result<(), SimError<E>> {
    let index = d.thunk;
    let kernel_err = |source| SimError::Kernel {
        index,
        thunk,
        source,
    };
    let lib = library(d.kernel.family).map_err(kernel_err)?;
    let mut bindings = Vec::with_capacity(d.bindings.len() + 1);
    bindings.push(Binding::Bytes(&d.args));
    for (k, b) in d.bindings.iter().enumerate() {
        bindings.push(match b.buffer {
            Buf::Arena => Binding::View {
                region: 0,
                offset: b.offset,
            },
            Buf::State => Binding::View {
                region: 1,
                offset: b.offset,
            },
            Buf::Weights(s) => {
                let seg = segments.get(s).ok_or(SimError::Segment {
                    index,
                    thunk,
                    binding: k,
                    segment: s,
                    count: segments.len(),
                })?;
                // an offset past the end binds nothing: msl-sim reports it
                seg.get(b.offset..).map_or(Binding::Unbound, Binding::Bytes)
            }
        });
    }
    let grid = Grid {
        groups: d.grid,
        threads: d.threadgroup,
    };
    let mut regions: [&mut [u8]; 2] = [arena, state];
    lib.dispatch_views(
        &d.kernel.function,
        &mut bindings,
        &mut regions,
        grid,
        &d.threadgroup_memory,
    )
    .map_err(kernel_err)
}

/// A user's library, compiled once per process and source text.
fn user_library(label: &str, source: &str) -> Result<Library, msl_sim::Error> {
    static LIBS: OnceLock<Mutex<HashMap<String, Library>>> = OnceLock::new();
    let mut libs = LIBS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(l) = libs.get(source) {
        return Ok(l.clone());
    }
    let lib = Library::from_source(label, source)?;
    libs.insert(source.to_string(), lib.clone());
    Ok(lib)
}

/// A user kernel through msl-sim. Each operand is bound as a buffer of its
/// own length (inputs copied, the output written back), so msl-sim's guard
/// bytes catch a write past the end of any of them.
fn user_dispatch<E: std::fmt::Display>(
    u: &UserDispatch,
    thunk: &'static str,
    arena: &mut [u8],
    state: &mut [u8],
    segments: &[&[u8]],
) -> Result<(), SimError<E>> {
    let index = u.thunk;
    let kernel_err = |source| SimError::Kernel {
        index,
        thunk,
        source,
    };
    let bad = |message: String| {
        kernel_err(msl_sim::Error::Dispatch {
            kernel: u.op.clone(),
            message,
        })
    };
    let lib = user_library(&format!("{}.metal", u.op), &u.source).map_err(kernel_err)?;
    let range = |o: &super::plan::UserOperand| {
        let end = o.binding.offset.saturating_add(o.len);
        o.binding.offset..end
    };
    let mut inputs = Vec::with_capacity(u.inputs.len());
    for (k, o) in u.inputs.iter().enumerate() {
        let src: &[u8] = match o.binding.buffer {
            Buf::Arena => &*arena,
            Buf::State => &*state,
            Buf::Weights(s) => segments.get(s).copied().unwrap_or_default(),
        };
        let bytes = src
            .get(range(o))
            .ok_or_else(|| bad(format!("input {k} lies outside its buffer")))?;
        inputs.push(bytes.to_vec());
    }
    let out_buf: &mut [u8] = match u.output.binding.buffer {
        Buf::Arena => arena,
        Buf::State => state,
        Buf::Weights(_) => return Err(bad("the output is in a read-only weights segment".into())),
    };
    let out = out_buf
        .get_mut(range(&u.output))
        .ok_or_else(|| bad("the output lies outside its buffer".into()))?;
    let count = u.count.to_le_bytes();
    let mut bindings: Vec<Binding<'_>> = inputs
        .iter_mut()
        .map(|b| Binding::Buffer(b.as_mut_slice()))
        .collect();
    bindings.push(Binding::Buffer(out));
    bindings.push(Binding::Bytes(&count));
    let grid = Grid {
        groups: u.grid,
        threads: u.threadgroup,
    };
    lib.dispatch_bindings(&u.function, &mut bindings, grid, &[])
        .map_err(kernel_err)
}

#[cfg(test)]
#[path = "sim_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "sim_tests_quant.rs"]
mod tests_quant;

#[cfg(test)]
#[path = "sim_tests_matmul.rs"]
mod tests_matmul;

#[cfg(test)]
#[path = "sim_tests_attention.rs"]
mod tests_attention;

#[cfg(test)]
#[path = "sim_tests_shape.rs"]
mod tests_shape;

#[cfg(test)]
#[path = "sim_tests_indexing.rs"]
mod tests_indexing;

#[cfg(test)]
#[path = "sim_tests_reduce.rs"]
mod tests_reduce;

#[cfg(test)]
#[path = "sim_tests_norm_fused.rs"]
mod tests_norm_fused;

#[cfg(test)]
#[path = "sim_tests_conv.rs"]
mod tests_conv;

#[cfg(test)]
#[path = "sim_tests_sequence.rs"]
mod tests_sequence;

#[cfg(test)]
#[path = "sim_tests_misc.rs"]
mod tests_misc;

#[cfg(test)]
#[path = "sim_tests_vision.rs"]
mod tests_vision;

#[cfg(test)]
#[path = "sim_tests_quant_formats.rs"]
mod tests_quant_formats;

#[cfg(test)]
#[path = "sim_tests_backward.rs"]
mod tests_backward;

#[cfg(test)]
#[path = "sim_tests_splat.rs"]
mod tests_splat;

#[cfg(test)]
#[path = "sim_tests_spd.rs"]
mod tests_spd;
