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
//! * nothing, for `Nop` and empty thunks.
//!
//! [`Command::Barrier`]s come from byte-range hazards (`Thunk::io()`), not
//! after every dispatch: dispatches between two barriers may run
//! concurrently, so a barrier goes before a dispatch that reads or writes
//! bytes written by a dispatch since the last barrier (RAW, WAW) or writes
//! bytes read by one (WAR). A `Host` command is a sync point (the device
//! waits for all work before the host touches memory), so it clears the
//! hazard sets without a barrier.
//!
//! A thunk whose kernel would read bytes that it also writes at a
//! different place (a partial overlap) stays on the host: the kernels are
//! only correct for exact in-place aliasing, element for element.

use super::args::{
    act_code, binary_code, BinaryArgs, BroadcastArgs, CastArgs, KernelArgs, RowNormArgs,
    SoftmaxArgs, UnaryArgs, MAX_RANK,
};
use super::kernels::Family;
use crate::thunk::{buffer_of, raw_offset, Buf, ByteRange, HalfFlag, Thunk, ThunkSchedule};
use rlx_ir::op::Activation;
use std::fmt;

/// Threads per threadgroup of the 1-D elementwise kernels.
pub const ELEMENTWISE_THREADS: u32 = 256;

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
    /// Memory barrier (buffers scope) between dispatches.
    Barrier,
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

/// Rows per threadgroup of the row kernels: min(1024, n rounded up to 32).
pub fn row_threads(n: u32) -> u32 {
    n.div_ceil(32).clamp(1, 32) * 32
}

fn suffix(dt: HalfFlag) -> &'static str {
    match dt {
        HalfFlag::F32 => "f32",
        HalfFlag::F16 => "f16",
    }
}

fn kernel(family: Family, function: String) -> KernelRef {
    KernelRef { family, function }
}

/// A 1-D elementwise dispatch over `len` elements.
fn elementwise(
    thunk: usize,
    k: KernelRef,
    args: &impl KernelArgs,
    offs: &[usize],
    len: u32,
) -> Dispatch {
    Dispatch {
        thunk,
        kernel: k,
        args: args.as_bytes().to_vec(),
        bindings: offs.iter().map(|&o| BufferBinding::of(o)).collect(),
        grid: [len.div_ceil(ELEMENTWISE_THREADS), 1, 1],
        threadgroup: [ELEMENTWISE_THREADS, 1, 1],
        threadgroup_memory: Vec::new(),
    }
}

/// A one-threadgroup-per-row dispatch.
fn rows(
    thunk: usize,
    k: KernelRef,
    args: &impl KernelArgs,
    offs: &[usize],
    rows: u32,
    n: u32,
) -> Dispatch {
    Dispatch {
        thunk,
        kernel: k,
        args: args.as_bytes().to_vec(),
        bindings: offs.iter().map(|&o| BufferBinding::of(o)).collect(),
        grid: [rows, 1, 1],
        threadgroup: [row_threads(n), 1, 1],
        threadgroup_memory: Vec::new(),
    }
}

/// What a thunk becomes.
enum Lowered {
    Dispatch(Dispatch),
    Host,
    Skip,
}

/// True when some read range overlaps some write range without being the
/// very same range (the kernels handle exact in-place aliasing only).
fn partially_aliased(t: &Thunk) -> bool {
    let io = t.io();
    io.reads.iter().any(|r| {
        io.writes
            .iter()
            .any(|w| r.overlaps(w) && (r.offset != w.offset || r.len != w.len))
    })
}

/// True when any read overlaps any write.
fn aliased(t: &Thunk) -> bool {
    let io = t.io();
    io.reads
        .iter()
        .any(|r| io.writes.iter().any(|w| r.overlaps(w)))
}

/// The dispatch of thunk `i`, or `Host` when no kernel covers it.
fn lower(i: usize, t: &Thunk) -> Lowered {
    use Lowered::{Dispatch as D, Host, Skip};
    if matches!(t, Thunk::Nop) {
        return Skip;
    }
    if partially_aliased(t) {
        return Host;
    }
    let fam = Family::Elementwise;
    match t {
        Thunk::ActivationOut(a) if a.len > 0 => {
            let args = UnaryArgs {
                len: a.len,
                op: act_code(a.act),
            };
            let k = kernel(fam, format!("unary_{}", suffix(a.dt)));
            D(elementwise(i, k, &args, &[a.src, a.dst], a.len))
        }
        Thunk::ActivationInPlace(a) if a.len > 0 => {
            let args = UnaryArgs {
                len: a.len,
                op: act_code(a.act),
            };
            let k = kernel(fam, format!("unary_{}", suffix(a.dt)));
            D(elementwise(i, k, &args, &[a.data, a.data], a.len))
        }
        Thunk::GeluApproxOut(a) if a.len > 0 => {
            let args = UnaryArgs {
                len: a.len,
                op: act_code(Activation::GeluApprox),
            };
            let k = kernel(fam, "unary_f32".into());
            D(elementwise(i, k, &args, &[a.src, a.dst], a.len))
        }
        Thunk::Cast(c) if c.len > 0 && c.src_dt != c.dst_dt && !aliased(t) => {
            let name = format!("cast_{}_{}", suffix(c.src_dt), suffix(c.dst_dt));
            let args = CastArgs { len: c.len };
            D(elementwise(
                i,
                kernel(fam, name),
                &args,
                &[c.src, c.dst],
                c.len,
            ))
        }
        Thunk::BinaryFull(b) if b.len > 0 => {
            let args = BinaryArgs {
                len: b.len,
                op: binary_code(b.op),
            };
            let k = kernel(Family::Binary, format!("binary_{}", suffix(b.dt)));
            D(elementwise(i, k, &args, &[b.lhs, b.rhs, b.dst], b.len))
        }
        Thunk::BinaryBroadcast(b)
            if b.len > 0
                && (b.rank as usize) <= MAX_RANK
                && b.out_dims.len() == b.rank as usize
                && b.lhs_strides.len() == b.rank as usize
                && b.rhs_strides.len() == b.rank as usize
                && !aliased(t) =>
        {
            let r = b.rank as usize;
            let mut args = BroadcastArgs {
                len: b.len,
                op: binary_code(b.op),
                rank: b.rank,
                ..Default::default()
            };
            args.out_dims[..r].copy_from_slice(&b.out_dims);
            args.lhs_strides[..r].copy_from_slice(&b.lhs_strides);
            args.rhs_strides[..r].copy_from_slice(&b.rhs_strides);
            let k = kernel(Family::Binary, format!("binary_broadcast_{}", suffix(b.dt)));
            D(elementwise(i, k, &args, &[b.lhs, b.rhs, b.dst], b.len))
        }
        Thunk::RmsNorm(n) if n.rows > 0 && n.h > 0 => {
            let args = RowNormArgs {
                rows: n.rows,
                h: n.h,
                eps: n.eps,
                has_bias: 0,
            };
            let k = kernel(Family::Norm, format!("rms_norm_{}", suffix(n.dt)));
            D(rows(i, k, &args, &[n.src, n.g, n.b, n.dst], n.rows, n.h))
        }
        Thunk::LayerNorm(n) if n.rows > 0 && n.h > 0 => {
            let args = RowNormArgs {
                rows: n.rows,
                h: n.h,
                eps: n.eps,
                has_bias: 0,
            };
            let k = kernel(Family::Norm, format!("layer_norm_{}", suffix(n.dt)));
            D(rows(i, k, &args, &[n.src, n.g, n.b, n.dst], n.rows, n.h))
        }
        Thunk::FusedResidualRmsNorm(n) if n.rows > 0 && n.h > 0 => {
            let args = RowNormArgs {
                rows: n.rows,
                h: n.h,
                eps: n.eps,
                has_bias: n.has_bias as u32,
            };
            // without a bias the kernel never reads buffer(3), but Metal
            // wants every declared buffer bound: bind gamma there.
            let bias = if n.has_bias { n.bias } else { n.g };
            let offs = [n.x, n.res, bias, n.g, n.b, n.out];
            let k = kernel(Family::Norm, format!("residual_rms_norm_{}", suffix(n.dt)));
            D(rows(i, k, &args, &offs, n.rows, n.h))
        }
        Thunk::Softmax(s) if s.rows > 0 && s.cols > 0 => {
            let args = SoftmaxArgs {
                rows: s.rows,
                cols: s.cols,
            };
            let k = kernel(Family::Softmax, format!("softmax_{}", suffix(s.dt)));
            D(rows(i, k, &args, &[s.data], s.rows, s.cols))
        }
        // an empty thunk of a covered kind does nothing
        Thunk::ActivationOut(_)
        | Thunk::ActivationInPlace(_)
        | Thunk::GeluApproxOut(_)
        | Thunk::Cast(_)
        | Thunk::BinaryFull(_)
        | Thunk::BinaryBroadcast(_)
        | Thunk::RmsNorm(_)
        | Thunk::LayerNorm(_)
        | Thunk::FusedResidualRmsNorm(_)
        | Thunk::Softmax(_)
            if t.io().writes.is_empty() =>
        {
            Skip
        }
        _ => Host,
    }
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
        let mut commands = Vec::with_capacity(schedule.thunks.len());
        let mut hz = Hazards::default();
        for (i, t) in schedule.thunks.iter().enumerate() {
            match lower(i, t) {
                Lowered::Skip => {}
                Lowered::Host => {
                    commands.push(Command::Host { thunk: i });
                    hz.clear();
                }
                Lowered::Dispatch(d) => {
                    let io = t.io();
                    if hz.conflicts(&io.reads, &io.writes) {
                        commands.push(Command::Barrier);
                        hz.clear();
                    }
                    hz.reads.extend(io.reads);
                    hz.writes.extend(io.writes);
                    commands.push(Command::Dispatch(d));
                }
            }
        }
        MetalPlan { commands }
    }

    /// Dispatches, barriers and host commands.
    pub fn stats(&self) -> PlanStats {
        let mut s = PlanStats::default();
        for c in &self.commands {
            match c {
                Command::Dispatch(_) => s.dispatches += 1,
                Command::Barrier => s.barriers += 1,
                Command::Host { .. } => s.host += 1,
            }
        }
        s
    }
}

impl fmt::Display for MetalPlan {
    /// One command per line: `dispatch #3 rms_norm_f32 grid=[5,1,1]
    /// tg=[32,1,1] @0 W1@0 ...`, `barrier`, `host #4`.
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
                Command::Barrier => writeln!(f, "barrier")?,
                Command::Host { thunk } => writeln!(f, "host #{thunk}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
