//! `MetalPlan`: a compiled [`ThunkSchedule`] as the commands a Metal
//! compute encoder (or msl-sim) issues, with no platform code.
//!
//! Each thunk becomes one of:
//!
//! * [`Command::Dispatch`]: a kernel of `kernels/*.metal` with its
//!   `#[repr(C)]` args bytes ([`super::args`]), buffer bindings (arena,
//!   state or a weights segment, plus a byte offset; the args are
//!   `[[buffer(0)]]`, binding `i` is `[[buffer(i + 1)]]`), threadgroups per
//!   grid, threads per threadgroup and threadgroup-memory lengths;
//! * [`Command::Host`]: a thunk without an MSL kernel yet (it runs through
//!   the host executor or its callback, after the device has drained);
//! * [`Command::User`]: a user kernel (`rlx.register_gpu_op`, a
//!   `CustomGpuOp` thunk): its MSL source compiled as its own library,
//!   inputs at `[[buffer(i)]]`, the output after them, then the output's
//!   element count;
//! * [`Command::Check`]: after a dispatch whose kernel validates its
//!   operands (`spd.metal`), wait for the device and read the status tags
//!   it left (see [`super::check`]); a tagged matrix fails the run with the
//!   error the host kernel would give;
//! * nothing, for `Nop` and empty thunks.
//!
//! [`Command::Barrier`]s come from byte-range hazards (`Thunk::io()`), not
//! after every dispatch: dispatches between two barriers may run
//! concurrently, so a barrier goes before a dispatch that reads or writes
//! bytes written by a dispatch since the last barrier (RAW, WAW) or writes
//! bytes read by one (WAR). A `Host` command is a sync point (the device
//! waits for all work before the host touches memory), so it clears the
//! hazard sets without a barrier; so is a `Check`.
//!
//! A thunk whose kernel would read bytes that it also writes at a
//! different place (a partial overlap) stays on the host: the kernels are
//! only correct for exact in-place aliasing, element for element.

use super::check::StatusCheck;
use super::fuse;
use super::kernels::Family;
use super::lower::{lower, Lowered};
use crate::thunk::host::CustomGpuOp;
use crate::thunk::{buffer_of, raw_offset, Buf, ByteRange, Thunk, ThunkSchedule};
use std::fmt;
use std::sync::Arc;

/// A kernel: its family (`.metal` file) and function (host) name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KernelRef {
    /// The `.metal` file it lives in.
    pub family: Family,
    /// The `[[host_name]]` of the kernel (`rms_norm_f16`).
    pub function: String,
}

/// One buffer binding: `offset` raw bytes into `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferBinding {
    /// Arena, state buffer or a weights segment.
    pub buffer: Buf,
    /// Byte offset within that buffer (tags removed).
    pub offset: usize,
}

impl BufferBinding {
    /// The binding of a tagged thunk offset.
    pub fn of(tagged: usize) -> Self {
        BufferBinding {
            buffer: buffer_of(tagged),
            offset: raw_offset(tagged),
        }
    }
}

/// One kernel dispatch (`dispatchThreadgroups`).
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatch {
    /// Index of the thunk in the schedule.
    pub thunk: usize,
    /// The kernel.
    pub kernel: KernelRef,
    /// Args struct bytes, bound at `[[buffer(0)]]` (`setBytes`).
    pub args: Vec<u8>,
    /// Binding `i` goes to `[[buffer(i + 1)]]`.
    pub bindings: Vec<BufferBinding>,
    /// Threadgroups per grid (x, y, z).
    pub grid: [u32; 3],
    /// Threads per threadgroup (x, y, z).
    pub threadgroup: [u32; 3],
    /// Bytes of `[[threadgroup(i)]]` memory (empty: the kernels declare
    /// their threadgroup arrays statically).
    pub threadgroup_memory: Vec<usize>,
}

/// One operand of a [`UserDispatch`]: where it lives and its byte length
/// (bound on its own, so a write past its end is caught).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserOperand {
    /// Buffer and offset.
    pub binding: BufferBinding,
    /// Bytes.
    pub len: usize,
}

/// A user kernel dispatch (`CustomGpuOp`, see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct UserDispatch {
    /// Index of the thunk in the schedule.
    pub thunk: usize,
    /// The registered op name (labels the library in messages).
    pub op: String,
    /// The user's MSL source.
    pub source: Arc<str>,
    /// The kernel function to run.
    pub function: String,
    /// Inputs, bound at `[[buffer(0)]]` ...
    pub inputs: Vec<UserOperand>,
    /// The output, bound after the inputs.
    pub output: UserOperand,
    /// Output elements, a `constant uint&` after the output.
    pub count: u32,
    /// Threadgroups per grid (x, y, z).
    pub grid: [u32; 3],
    /// Threads per threadgroup (x, y, z).
    pub threadgroup: [u32; 3],
}

impl UserDispatch {
    /// The dispatch of thunk `thunk`, or `None` when its attributes hold no
    /// well-formed kernel (it then runs its host fallback).
    pub fn of(thunk: usize, t: &CustomGpuOp) -> Option<UserDispatch> {
        let spec = t.kernel_spec()?;
        let operand = |o: &crate::thunk::host::CustomOperand| {
            let len = (o.1 as usize).checked_mul(o.2.dtype.size_bytes())?;
            Some(UserOperand {
                binding: BufferBinding::of(o.0),
                len,
            })
        };
        Some(UserDispatch {
            thunk,
            op: t.name.clone(),
            source: Arc::from(spec.source),
            function: spec.kernel,
            inputs: t.inputs.iter().map(operand).collect::<Option<_>>()?,
            output: operand(&t.output)?,
            count: t.output.1,
            grid: spec.grid,
            threadgroup: spec.threadgroup,
        })
    }
}

/// One command of a [`MetalPlan`].
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Run a kernel.
    Dispatch(Dispatch),
    /// Wait for the device, then run thunk `thunk` on the host.
    Host {
        /// Index of the thunk in the schedule.
        thunk: usize,
    },
    /// Run a user kernel.
    User(UserDispatch),
    /// Memory barrier (buffers scope) between dispatches.
    Barrier,
    /// Wait for the device, then read a validating kernel's status tags.
    Check(StatusCheck),
}

/// Counts of a plan's commands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlanStats {
    /// Kernel dispatches.
    pub dispatches: usize,
    /// Memory barriers.
    pub barriers: usize,
    /// Host commands (sync points).
    pub host: usize,
}

/// A schedule as Metal commands. See the module docs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetalPlan {
    /// Commands in order.
    pub commands: Vec<Command>,
}

/// Ranges touched by the dispatches since the last barrier or sync point.
#[derive(Default)]
struct Hazards {
    reads: Vec<ByteRange>,
    writes: Vec<ByteRange>,
}

impl Hazards {
    /// True when a dispatch with these ranges must wait for the earlier ones.
    fn conflicts(&self, reads: &[ByteRange], writes: &[ByteRange]) -> bool {
        let hit =
            |a: &[ByteRange], b: &[ByteRange]| a.iter().any(|x| b.iter().any(|y| x.overlaps(y)));
        hit(reads, &self.writes) || hit(writes, &self.writes) || hit(writes, &self.reads)
    }

    fn clear(&mut self) {
        self.reads.clear();
        self.writes.clear();
    }
}

impl MetalPlan {
    /// The plan of `schedule` (see the module docs).
    pub fn build(schedule: &ThunkSchedule) -> MetalPlan {
        let fused = if fuse::disabled() {
            Vec::new()
        } else {
            fuse::groups(&schedule.thunks)
        };
        Self::build_with(schedule, &fused)
    }

    /// The plan of `schedule` with the decode fusion's `groups` (see
    /// `super::fuse`): each group's dispatch at its first member, nothing
    /// for its other members.
    fn build_with(schedule: &ThunkSchedule, groups: &[fuse::Group]) -> MetalPlan {
        let n = schedule.thunks.len();
        let mut commands = Vec::with_capacity(n);
        let mut hz = Hazards::default();
        let mut member = vec![false; n];
        let mut anchored: Vec<Vec<&fuse::Group>> = vec![Vec::new(); n];
        for g in groups {
            for &m in &g.members {
                if let Some(f) = member.get_mut(m) {
                    *f = true;
                }
            }
            if let Some(a) = g.members.first().and_then(|&a| anchored.get_mut(a)) {
                a.push(g);
            }
        }
        for (i, t) in schedule.thunks.iter().enumerate() {
            for g in &anchored[i] {
                if hz.conflicts(&g.reads, &g.writes) {
                    commands.push(Command::Barrier);
                    hz.clear();
                }
                hz.reads.extend(&g.reads);
                hz.writes.extend(&g.writes);
                commands.push(Command::Dispatch(g.dispatch.clone()));
            }
            if member[i] {
                continue;
            }
            let lowered = match t {
                Thunk::CustomGpuOp(c) => {
                    UserDispatch::of(i, c).map_or(Lowered::Host, Lowered::User)
                }
                _ => lower(i, t),
            };
            let guard = |hz: &mut Hazards, commands: &mut Vec<Command>| {
                let io = t.io();
                if hz.conflicts(&io.reads, &io.writes) {
                    commands.push(Command::Barrier);
                    hz.clear();
                }
                hz.reads.extend(io.reads);
                hz.writes.extend(io.writes);
            };
            match lowered {
                Lowered::Skip => {}
                Lowered::Host => {
                    commands.push(Command::Host { thunk: i });
                    hz.clear();
                }
                Lowered::Dispatch(d) => {
                    guard(&mut hz, &mut commands);
                    commands.push(Command::Dispatch(d));
                }
                Lowered::Checked(d, c) => {
                    guard(&mut hz, &mut commands);
                    commands.push(Command::Dispatch(d));
                    commands.push(Command::Check(c));
                    hz.clear();
                }
                Lowered::User(u) => {
                    guard(&mut hz, &mut commands);
                    commands.push(Command::User(u));
                }
            }
        }
        MetalPlan { commands }
    }

    /// Dispatches, barriers and host commands (status checks are not
    /// counted).
    pub fn stats(&self) -> PlanStats {
        let mut s = PlanStats::default();
        for c in &self.commands {
            match c {
                Command::Dispatch(_) | Command::User(_) => s.dispatches += 1,
                Command::Barrier => s.barriers += 1,
                Command::Host { .. } => s.host += 1,
                Command::Check(_) => {}
            }
        }
        s
    }
}

impl fmt::Display for MetalPlan {
    /// One command per line: `dispatch #3 rms_norm_f32 grid=[5,1,1]
    /// tg=[32,1,1] @0 W1@0 ...`, `barrier`, `host #4`, `check #5 @64`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.commands {
            match c {
                Command::Dispatch(d) => {
                    write!(
                        f,
                        "dispatch #{} {} grid={:?} tg={:?}",
                        d.thunk, d.kernel.function, d.grid, d.threadgroup
                    )?;
                    for b in &d.bindings {
                        match b.buffer {
                            Buf::Arena => write!(f, " @{}", b.offset)?,
                            Buf::State => write!(f, " S@{}", b.offset)?,
                            Buf::Weights(s) => write!(f, " W{s}@{}", b.offset)?,
                        }
                    }
                    writeln!(f)?;
                }
                Command::User(u) => writeln!(
                    f,
                    "dispatch #{} user:{}.{} grid={:?} tg={:?}",
                    u.thunk, u.op, u.function, u.grid, u.threadgroup
                )?,
                Command::Barrier => writeln!(f, "barrier")?,
                Command::Host { thunk } => writeln!(f, "host #{thunk}")?,
                Command::Check(c) => {
                    let at = match c.status.buffer {
                        Buf::State => "S@",
                        _ => "@",
                    };
                    writeln!(f, "check #{} {at}{}", c.thunk, c.status.offset)?
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
