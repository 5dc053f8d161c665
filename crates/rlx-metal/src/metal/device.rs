//! The Metal device: encodes a [`MetalPlan`] with the `metal` crate. The
//! only file that knows that crate (feature `metal`; it type-checks on
//! Linux, links only on macOS).
//!
//! NOT YET RUN ON APPLE HARDWARE: this encoder has only been type-checked
//! (`cargo check -p rlx-metal --features metal` on Linux). The same plans
//! run through msl-sim in the tests (`metal::sim`).
//!
//! * Pipelines: each family's source ([`super::kernels::source`]) is
//!   compiled once per process into a library; pipelines are cached by
//!   function name per executor.
//! * Buffers ([`DeviceBuffers`]): the arena and the state buffer are
//!   shared-storage buffers (unified memory, so host commands read and
//!   write them in place); a weights segment is wrapped without a copy
//!   (`newBufferWithBytesNoCopy`) over the page-aligned span covering it
//!   (e.g. an mmap of the model file); an empty segment gets a 1-byte
//!   buffer.
//! * Commands: one compute encoder of the concurrent dispatch type per
//!   command buffer. `Dispatch` sets the pipeline, the args with
//!   `setBytes` at index 0, the bindings at 1.. with their offsets,
//!   threadgroup-memory lengths, then `dispatchThreadgroups`. `Barrier` is
//!   a memory barrier over the writable buffers (arena, state): metal 0.33
//!   exposes `memoryBarrierWithResources`, not the scope form. `Host` ends
//!   the encoder, commits, waits, runs the thunk on the host over the same
//!   unified memory, then continues in a new command buffer. `User` (a
//!   `rlx.register_gpu_op` kernel) compiles the user's source once per
//!   executor, binds the inputs at 0.., the output after them and the
//!   output's element count with `setBytes`, then dispatches likewise.
//!   `Check` ends the encoder, commits, waits, reads the status tags a
//!   validating kernel left in the (shared, unified) arena or state buffer
//!   (`super::check`), then continues in a new command buffer.

use super::kernels::{source, Family};
use super::plan::{Command, Dispatch, MetalPlan, UserDispatch, UserOperand};
use crate::host::buffer::{Mem, Segment};
use crate::host::exec::{HostExecutor, Mode, RunError};
use crate::thunk::{Buf, Thunk, ThunkSchedule};
use metal::{
    Buffer, CommandBufferRef, CommandQueue, CompileOptions, ComputeCommandEncoderRef,
    ComputePipelineState, Device, Library, MTLCommandBufferStatus, MTLDispatchType,
    MTLResourceOptions, MTLSize,
};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Errors of the Metal device; messages name the family, kernel or thunk.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError<E: std::fmt::Display = String> {
    /// No Metal device on this machine.
    #[error("[metal] no Metal device (MTLCreateSystemDefaultDevice returned nil)")]
    NoDevice,
    /// The Metal compiler rejected a family's source.
    #[error("[{file}] Metal library failed to compile: {message}")]
    Compile {
        /// The `.metal` file.
        file: &'static str,
        /// The compiler's message.
        message: String,
    },
    /// The Metal compiler rejected a user kernel's source
    /// (`rlx.register_gpu_op`).
    #[error("[{op}] user Metal library failed to compile: {message}")]
    UserCompile {
        /// The registered op.
        op: String,
        /// The compiler's message.
        message: String,
    },
    /// A kernel function or its pipeline could not be made.
    #[error("[{function}] no pipeline: {message}")]
    Pipeline {
        /// Kernel function name.
        function: String,
        /// Metal's message.
        message: String,
    },
    /// A binding names a weights segment that was not bound.
    #[error("[{thunk}] thunk {index}: weights segment {segment} is not bound ({count} segments)")]
    Segment {
        /// Thunk index.
        index: usize,
        /// Thunk name.
        thunk: &'static str,
        /// The segment.
        segment: usize,
        /// Segments bound.
        count: usize,
    },
    /// A command names a thunk the schedule does not have.
    #[error("[metal] the plan names thunk {index}, the schedule has {len}")]
    NoThunk {
        /// The index named.
        index: usize,
        /// Thunks in the schedule.
        len: usize,
    },
    /// A command buffer ended in an error.
    #[error("[metal] command buffer failed (status {status:?}) before thunk {before}")]
    CommandBuffer {
        /// The buffer's final status.
        status: MTLCommandBufferStatus,
        /// The first thunk after the failed work (or the thunk count at the end).
        before: usize,
    },
    /// A validating kernel tagged an invalid operand (a `Check` command).
    #[error(transparent)]
    Check(#[from] super::check::CheckError),
    /// A host command failed.
    #[error(transparent)]
    Host(#[from] RunError<E>),
}

/// Libraries by family, compiled once per process.
fn library(device: &Device, f: Family) -> Result<Library, DeviceError<String>> {
    static LIBS: OnceLock<Mutex<HashMap<Family, Library>>> = OnceLock::new();
    let mut libs = LIBS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(l) = libs.get(&f) {
        return Ok(l.clone());
    }
    let opts = CompileOptions::new();
    // The random fills must equal the host's and the reference's bit for
    // bit: their explicit f32 log / cos are evaluated in a fixed order, which
    // fast math (the default) would be free to contract or approximate.
    if f == Family::Rng {
        opts.set_fast_math_enabled(false);
    }
    let lib = device
        .new_library_with_source(&source(f), &opts)
        .map_err(|message| DeviceError::Compile {
            file: f.file(),
            message,
        })?;
    libs.insert(f, lib.clone());
    Ok(lib)
}

extern "C" {
    /// libc's page size (Darwin and Linux both have it).
    fn getpagesize() -> i32;
}

fn page_size() -> usize {
    // SAFETY: getpagesize has no preconditions.
    let p = unsafe { getpagesize() };
    usize::try_from(p).ok().filter(|&p| p > 0).unwrap_or(16384)
}

/// A weights segment on the device: a buffer and where the segment starts
/// in it (no-copy buffers start at the page below the segment).
struct DeviceSegment {
    buffer: Buffer,
    start: usize,
}

/// The buffers a plan runs over.
pub struct DeviceBuffers {
    arena: Buffer,
    state: Buffer,
    segments: Vec<Option<DeviceSegment>>,
}

impl DeviceBuffers {
    /// Shared-storage arena and state buffers of these sizes (zeroed by
    /// Metal), and `segments` unbound weights segments.
    pub fn new(
        exec: &MetalExecutor,
        arena_bytes: usize,
        state_bytes: usize,
        segments: usize,
    ) -> Self {
        let shared = MTLResourceOptions::StorageModeShared;
        // Metal rejects zero-length buffers: keep at least one byte.
        let arena = exec.device.new_buffer(arena_bytes.max(1) as u64, shared);
        let state = exec.device.new_buffer(state_bytes.max(1) as u64, shared);
        DeviceBuffers {
            arena,
            state,
            segments: (0..segments).map(|_| None).collect(),
        }
    }

    /// The arena's bytes (unified memory), for inputs and outputs.
    pub fn arena_ptr(&self) -> *mut u8 {
        self.arena.contents().cast()
    }

    /// The state buffer's bytes.
    pub fn state_ptr(&self) -> *mut u8 {
        self.state.contents().cast()
    }

    /// Bind weights segment `i` to `len` bytes at `ptr` without copying
    /// when possible.
    ///
    /// # Safety
    /// The memory must stay valid, unmoved and unmodified while these
    /// buffers are used, and the page-aligned span around it must be
    /// mapped (true of an mmap of a file and of page-aligned allocations).
    pub unsafe fn bind_segment(
        &mut self,
        exec: &MetalExecutor,
        i: usize,
        ptr: *const u8,
        len: usize,
    ) {
        let shared = MTLResourceOptions::StorageModeShared;
        let Some(slot) = self.segments.get_mut(i) else {
            return;
        };
        let page = page_size();
        let seg = if ptr.is_null() || len == 0 {
            let b = exec.device.new_buffer(1, shared);
            DeviceSegment {
                buffer: b,
                start: 0,
            }
        } else {
            let addr = ptr as usize;
            let base = addr - addr % page;
            let end = (addr + len).div_ceil(page) * page;
            let buffer = exec.device.new_buffer_with_bytes_no_copy(
                base as *const std::ffi::c_void,
                (end - base) as u64,
                shared,
                None,
            );
            DeviceSegment {
                buffer,
                start: addr - base,
            }
        };
        *slot = Some(seg);
    }

    fn segments_for_host(&self) -> Vec<Segment> {
        self.segments
            .iter()
            .map(|s| match s {
                Some(s) => Segment {
                    // SAFETY: start lies inside the buffer.
                    ptr: unsafe { s.buffer.contents().cast::<u8>().add(s.start) },
                    len: s.buffer.length() as usize - s.start,
                },
                None => Segment::EMPTY,
            })
            .collect()
    }
}

/// Encodes and runs [`MetalPlan`]s on the system's Metal device.
pub struct MetalExecutor {
    device: Device,
    queue: CommandQueue,
    pipelines: HashMap<String, ComputePipelineState>,
    /// User kernels' pipelines by (source, function).
    user_pipelines: HashMap<(String, String), ComputePipelineState>,
    host: HostExecutor,
}

impl MetalExecutor {
    /// The system default device and a command queue.
    pub fn new() -> Result<Self, DeviceError> {
        let device = Device::system_default().ok_or(DeviceError::NoDevice)?;
        let queue = device.new_command_queue();
        Ok(MetalExecutor {
            device,
            queue,
            pipelines: HashMap::new(),
            user_pipelines: HashMap::new(),
            host: HostExecutor::new(Mode::Native),
        })
    }

    /// Build (or find) the pipeline of every kernel `plan` uses.
    pub fn prepare(&mut self, plan: &MetalPlan) -> Result<(), DeviceError> {
        for c in &plan.commands {
            match c {
                Command::Dispatch(d) => {
                    self.pipeline(d)?;
                }
                Command::User(u) => self.user_pipeline(u)?,
                Command::Host { .. } | Command::Barrier | Command::Check(_) => {}
            }
        }
        Ok(())
    }

    /// Compile a user kernel's library (once per source) and its pipeline.
    fn user_pipeline(&mut self, u: &UserDispatch) -> Result<(), DeviceError> {
        let key = (u.source.to_string(), u.function.clone());
        if self.user_pipelines.contains_key(&key) {
            return Ok(());
        }
        let lib = self
            .device
            .new_library_with_source(&u.source, &CompileOptions::new())
            .map_err(|message| DeviceError::UserCompile {
                op: u.op.clone(),
                message,
            })?;
        let err = |message| DeviceError::Pipeline {
            function: format!("{}.{}", u.op, u.function),
            message,
        };
        let f = lib.get_function(&u.function, None).map_err(err)?;
        let p = self
            .device
            .new_compute_pipeline_state_with_function(&f)
            .map_err(err)?;
        self.user_pipelines.insert(key, p);
        Ok(())
    }

    fn pipeline(&mut self, d: &Dispatch) -> Result<&ComputePipelineState, DeviceError> {
        let name = &d.kernel.function;
        if !self.pipelines.contains_key(name) {
            let lib = library(&self.device, d.kernel.family)?;
            let err = |message| DeviceError::Pipeline {
                function: name.clone(),
                message,
            };
            let f = lib.get_function(name, None).map_err(err)?;
            let p = self
                .device
                .new_compute_pipeline_state_with_function(&f)
                .map_err(err)?;
            self.pipelines.insert(name.clone(), p);
        }
        self.pipelines
            .get(name)
            .ok_or_else(|| DeviceError::Pipeline {
                function: name.clone(),
                message: "pipeline cache lost it".into(),
            })
    }

    /// Run `plan` (built from `schedule`) over `bufs`. Call
    /// [`MetalExecutor::prepare`] first; a kernel without a pipeline is an
    /// error here. Host commands without a native kernel go to `fallback`.
    pub fn run<E: std::fmt::Display>(
        &mut self,
        plan: &MetalPlan,
        schedule: &ThunkSchedule,
        bufs: &DeviceBuffers,
        fallback: &mut dyn FnMut(usize, &Thunk) -> Result<(), E>,
    ) -> Result<(), DeviceError<E>> {
        metal::objc::rc::autoreleasepool(|| self.run_in_pool(plan, schedule, bufs, fallback))
    }

    fn run_in_pool<E: std::fmt::Display>(
        &mut self,
        plan: &MetalPlan,
        schedule: &ThunkSchedule,
        bufs: &DeviceBuffers,
        fallback: &mut dyn FnMut(usize, &Thunk) -> Result<(), E>,
    ) -> Result<(), DeviceError<E>> {
        let len = schedule.thunks.len();
        let thunk_of = |index: usize| {
            schedule
                .thunks
                .get(index)
                .ok_or(DeviceError::NoThunk { index, len })
        };
        let writable: [&metal::ResourceRef; 2] = [&bufs.arena, &bufs.state];
        let mut cb = self.queue.new_command_buffer();
        let mut enc = cb.compute_command_encoder_with_dispatch_type(MTLDispatchType::Concurrent);
        for c in &plan.commands {
            match c {
                Command::Dispatch(d) => {
                    let t = thunk_of(d.thunk)?;
                    let p = self.pipelines.get(&d.kernel.function).ok_or_else(|| {
                        DeviceError::Pipeline {
                            function: d.kernel.function.clone(),
                            message: "not prepared (call MetalExecutor::prepare)".into(),
                        }
                    })?;
                    encode(enc, p, d, t.name(), bufs)?;
                }
                Command::User(u) => {
                    let t = thunk_of(u.thunk)?;
                    let key = (u.source.to_string(), u.function.clone());
                    let p = self
                        .user_pipelines
                        .get(&key)
                        .ok_or_else(|| DeviceError::Pipeline {
                            function: format!("{}.{}", u.op, u.function),
                            message: "not prepared (call MetalExecutor::prepare)".into(),
                        })?;
                    encode_user(enc, p, u, t.name(), bufs)?;
                }
                Command::Barrier => enc.memory_barrier_with_resources(&writable),
                Command::Check(k) => {
                    thunk_of(k.thunk)?;
                    finish(enc, cb, k.thunk)?;
                    let (ptr, len) = match k.status.buffer {
                        Buf::Arena => (bufs.arena_ptr(), bufs.arena.length() as usize),
                        Buf::State => (bufs.state_ptr(), bufs.state.length() as usize),
                        Buf::Weights(_) => (std::ptr::null_mut(), 0),
                    };
                    let bytes: &[u8] = if ptr.is_null() || len == 0 {
                        &[]
                    } else {
                        // SAFETY: the device is idle (waited above); the
                        // buffer is shared storage of `len` bytes owned by
                        // `bufs`, alive and unmodified for the read.
                        unsafe { std::slice::from_raw_parts(ptr, len) }
                    };
                    k.verify(bytes)?;
                    cb = self.queue.new_command_buffer();
                    enc =
                        cb.compute_command_encoder_with_dispatch_type(MTLDispatchType::Concurrent);
                }
                Command::Host { thunk } => {
                    thunk_of(*thunk)?;
                    finish(enc, cb, *thunk)?;
                    let segs = bufs.segments_for_host();
                    // SAFETY: the device is idle (waited above); the buffers
                    // are shared storage owned by `bufs`, alive for the call.
                    let mem = unsafe {
                        Mem::new(
                            bufs.arena_ptr(),
                            bufs.arena.length() as usize,
                            bufs.state_ptr(),
                            bufs.state.length() as usize,
                            &segs,
                        )
                    };
                    self.host.run_thunk(*thunk, schedule, &mem, fallback)?;
                    cb = self.queue.new_command_buffer();
                    enc =
                        cb.compute_command_encoder_with_dispatch_type(MTLDispatchType::Concurrent);
                }
            }
        }
        finish(enc, cb, len)
    }
}

/// End encoding, commit, wait, check the status.
fn finish<E: std::fmt::Display>(
    enc: &ComputeCommandEncoderRef,
    cb: &CommandBufferRef,
    before: usize,
) -> Result<(), DeviceError<E>> {
    enc.end_encoding();
    cb.commit();
    cb.wait_until_completed();
    match cb.status() {
        MTLCommandBufferStatus::Completed => Ok(()),
        status => Err(DeviceError::CommandBuffer { status, before }),
    }
}

/// The buffer and byte offset of a binding.
fn resolve<'a, E: std::fmt::Display>(
    b: super::plan::BufferBinding,
    index: usize,
    thunk: &'static str,
    bufs: &'a DeviceBuffers,
) -> Result<(&'a Buffer, usize), DeviceError<E>> {
    Ok(match b.buffer {
        Buf::Arena => (&bufs.arena, b.offset),
        Buf::State => (&bufs.state, b.offset),
        Buf::Weights(s) => {
            let seg =
                bufs.segments
                    .get(s)
                    .and_then(Option::as_ref)
                    .ok_or(DeviceError::Segment {
                        index,
                        thunk,
                        segment: s,
                        count: bufs.segments.len(),
                    })?;
            (&seg.buffer, seg.start + b.offset)
        }
    })
}

/// Encode one user kernel dispatch (binding convention in the module docs).
fn encode_user<E: std::fmt::Display>(
    enc: &ComputeCommandEncoderRef,
    p: &ComputePipelineState,
    u: &UserDispatch,
    thunk: &'static str,
    bufs: &DeviceBuffers,
) -> Result<(), DeviceError<E>> {
    enc.set_compute_pipeline_state(p);
    let operands: Vec<&UserOperand> = u.inputs.iter().chain([&u.output]).collect();
    for (k, o) in operands.iter().enumerate() {
        let (buffer, offset) = resolve(o.binding, u.thunk, thunk, bufs)?;
        enc.set_buffer(k as u64, Some(buffer), offset as u64);
    }
    let count = u.count.to_le_bytes();
    enc.set_bytes(operands.len() as u64, 4, count.as_ptr().cast());
    let [gx, gy, gz] = u.grid.map(u64::from);
    let [tx, ty, tz] = u.threadgroup.map(u64::from);
    enc.dispatch_thread_groups(MTLSize::new(gx, gy, gz), MTLSize::new(tx, ty, tz));
    Ok(())
}

/// Encode one dispatch.
fn encode<E: std::fmt::Display>(
    enc: &ComputeCommandEncoderRef,
    p: &ComputePipelineState,
    d: &Dispatch,
    thunk: &'static str,
    bufs: &DeviceBuffers,
) -> Result<(), DeviceError<E>> {
    enc.set_compute_pipeline_state(p);
    enc.set_bytes(0, d.args.len() as u64, d.args.as_ptr().cast());
    for (k, b) in d.bindings.iter().enumerate() {
        let (buffer, offset) = resolve(*b, d.thunk, thunk, bufs)?;
        enc.set_buffer(k as u64 + 1, Some(buffer), offset as u64);
    }
    for (i, &n) in d.threadgroup_memory.iter().enumerate() {
        enc.set_threadgroup_memory_length(i as u64, n as u64);
    }
    let [gx, gy, gz] = d.grid.map(u64::from);
    let [tx, ty, tz] = d.threadgroup.map(u64::from);
    enc.dispatch_thread_groups(MTLSize::new(gx, gy, gz), MTLSize::new(tx, ty, tz));
    Ok(())
}
