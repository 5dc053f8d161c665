//! Running one kernel: check the bindings against the kernel's parameter
//! table, copy buffers into guarded, 64-byte aligned allocations, call the
//! runtime (`msl_rt_dispatch`), check the guards and copy results back.
//! Under a sanitizer the dispatch runs in a runner process instead
//! ([`oop`]).

use crate::error::{Error, Result};
use crate::{Lanes, Library};
use std::alloc::{alloc, dealloc, Layout};
use std::ffi::{c_char, c_uint, c_ulong, c_void};

/// Guard bytes after each buffer (not with ASan, whose redzones are finer).
const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xA5;

/// `dispatchThreadgroups(groups, threads)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    /// Threadgroups per grid (x, y, z).
    pub groups: [u32; 3],
    /// Threads per threadgroup (x, y, z); product 1..=1024.
    pub threads: [u32; 3],
}

impl Grid {
    /// A 1-D grid of `groups` threadgroups of `threads` threads.
    pub fn d1(groups: u32, threads: u32) -> Grid {
        Grid {
            groups: [groups, 1, 1],
            threads: [threads, 1, 1],
        }
    }
}

/// What a `[[buffer(i)]]` is bound to.
#[derive(Debug)]
pub enum Binding<'a> {
    /// Read-only bytes (`setBytes`), e.g. an args struct.
    Bytes(&'a [u8]),
    /// A buffer the kernel may write; results are copied back.
    Buffer(&'a mut [u8]),
    /// `offset` bytes into memory region `region` of
    /// [`crate::Library::dispatch_views`] (a `MetalPlan` binding: buffer +
    /// offset). Views may alias each other, as in-place kernels need.
    View {
        /// Index into the regions.
        region: usize,
        /// Byte offset into that region.
        offset: usize,
    },
    /// Nothing (an index the kernel must not use).
    Unbound,
}

impl Binding<'_> {
    /// The bytes the kernel sees through this binding.
    fn bytes<'r>(&'r self, regions: &'r [&mut [u8]]) -> Option<&'r [u8]> {
        match self {
            Binding::Bytes(b) => Some(b),
            Binding::Buffer(b) => Some(b),
            Binding::View { region, offset } => regions.get(*region)?.get(*offset..),
            Binding::Unbound => None,
        }
    }
}

#[repr(C)]
struct MslDispatch {
    entry: *const c_void,
    buffers: *const *mut c_void,
    nbuffers: c_uint,
    tgmem_bytes: *const c_ulong,
    ntgmem: c_uint,
    groups: [c_uint; 3],
    threads: [c_uint; 3],
    timeout_ms: c_uint,
    coop: c_uint,
}

type DispatchFn = unsafe extern "C" fn(*const MslDispatch, *mut c_char, c_ulong) -> i32;

/// A 64-byte aligned copy of a binding with guard bytes after it.
struct Guarded {
    ptr: *mut u8,
    layout: Layout,
    len: usize,
}

impl Guarded {
    fn new(data: &[u8], guard: usize) -> Guarded {
        let layout = Layout::from_size_align((data.len() + guard).max(1), 64)
            .unwrap_or_else(|_| Layout::new::<u8>());
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: ptr is valid for layout.size() bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, data.len());
            std::ptr::write_bytes(ptr.add(data.len()), GUARD_BYTE, guard);
        }
        Guarded {
            ptr,
            layout,
            len: data.len(),
        }
    }

    fn guard_intact(&self, guard: usize) -> bool {
        // SAFETY: the guard lies inside the allocation.
        let g = unsafe { std::slice::from_raw_parts(self.ptr.add(self.len), guard) };
        g.iter().all(|&b| b == GUARD_BYTE)
    }

    fn data(&self) -> &[u8] {
        // SAFETY: the first len bytes were initialised from the binding.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: allocated in new with this layout.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}

/// The kernel's parameter table: (kind 1 = buffer / 2 = threadgroup,
/// index, bytes a reference parameter reads).
fn binds(lib: &Library, kernel: &str) -> Result<Vec<(u64, u64, u64)>> {
    let sym = format!("msl_binds_{kernel}\0");
    // SAFETY: the generated table is an array of unsigned long ending in 0.
    unsafe {
        let table: libloading::Symbol<'_, *const c_ulong> =
            lib.lib.get(sym.as_bytes()).map_err(|e| Error::Load {
                file: lib.file.clone(),
                message: e.to_string(),
            })?;
        let mut p = *table;
        let mut out = Vec::new();
        while *p != 0 {
            out.push((*p as u64, *p.add(1) as u64, *p.add(2) as u64));
            p = p.add(3);
        }
        Ok(out)
    }
}

/// Appends `line` to the file named by `MSL_SIM_TRACE`, if set: the
/// libraries compiled (`library\tfile\tkernels...`) and the kernels
/// dispatched (`dispatch\tfile\tkernel`), for kernel coverage
/// (`scripts/kernel_coverage.py`); read once per process. Short appends: lines from concurrent
/// tests and processes do not interleave.
pub(crate) fn trace(line: &str) {
    use std::io::Write;
    static PATH: std::sync::OnceLock<Option<std::ffi::OsString>> = std::sync::OnceLock::new();
    if let Some(path) = PATH.get_or_init(|| std::env::var_os("MSL_SIM_TRACE")) {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

pub(crate) fn run(
    lib: &Library,
    kernel: &str,
    bindings: &mut [Binding<'_>],
    regions: &mut [&mut [u8]],
    grid: Grid,
    tg_mem: &[usize],
) -> Result<()> {
    trace(&format!("dispatch\t{}\t{kernel}", lib.file));
    if !lib.kernels.iter().any(|k| k == kernel) {
        return Err(Error::NoSuchKernel {
            kernel: kernel.to_string(),
            file: lib.file.clone(),
            available: lib.kernels.join(", "),
        });
    }
    let bad = |message: String| Error::Dispatch {
        kernel: kernel.to_string(),
        message,
    };
    for (kind, index, size) in binds(lib, kernel)? {
        let i = index as usize;
        if kind == 1 {
            let b = bindings
                .get(i)
                .and_then(|b| b.bytes(regions))
                .ok_or_else(|| {
                    bad(format!(
                        "[[buffer({i})]] is not bound ({} bindings; a view must lie in its region)",
                        bindings.len()
                    ))
                })?;
            if (b.len() as u64) < size {
                return Err(bad(format!(
                    "[[buffer({i})]] has {} bytes, the kernel reads a {size}-byte struct",
                    b.len()
                )));
            }
        } else if kind == 2 && i >= tg_mem.len() {
            return Err(bad(format!(
                "[[threadgroup({i})]] has no length ({} given)",
                tg_mem.len()
            )));
        }
    }
    let threads: u64 = grid.threads.iter().map(|&t| t as u64).product();
    if !(1..=1024).contains(&threads) {
        return Err(bad(format!(
            "{threads} threads per threadgroup (1..=1024 allowed)"
        )));
    }
    if let Some(san) = lib.sanitizer {
        return oop::run(lib, san, kernel, bindings, regions, grid, tg_mem);
    }
    let guard = GUARD;
    let copies: Vec<Option<Guarded>> = bindings
        .iter()
        .map(|b| match b {
            Binding::Bytes(d) => Some(Guarded::new(d, guard)),
            Binding::Buffer(d) => Some(Guarded::new(d, guard)),
            _ => None,
        })
        .collect();
    let region_copies: Vec<Guarded> = regions.iter().map(|r| Guarded::new(r, guard)).collect();
    let ptrs: Vec<*mut c_void> = bindings
        .iter()
        .zip(&copies)
        .map(|(b, c)| match (b, c) {
            (_, Some(g)) => g.ptr.cast(),
            // SAFETY: offset <= region length (checked by Binding::bytes for
            // every index the kernel uses; others are never dereferenced).
            (Binding::View { region, offset }, None) => region_copies
                .get(*region)
                .filter(|g| *offset <= g.len)
                .map_or(std::ptr::null_mut(), |g| unsafe {
                    g.ptr.add(*offset).cast()
                }),
            _ => std::ptr::null_mut(),
        })
        .collect();
    let tg: Vec<c_ulong> = tg_mem.iter().map(|&b| b as c_ulong).collect();
    let entry_name = format!("msl_entry_{kernel}\0");
    let mut err = vec![0u8; 8192];
    // SAFETY: the entry and the runtime come from the library we built; the
    // parameter table was checked against the bindings above; every pointer
    // stays valid until msl_rt_dispatch returns (or is leaked, code 4).
    let code = unsafe {
        let entry: libloading::Symbol<'_, *const c_void> = lib
            .lib
            .get(entry_name.as_bytes())
            .map_err(|e| Error::Load {
                file: lib.file.clone(),
                message: e.to_string(),
            })?;
        let f: libloading::Symbol<'_, DispatchFn> =
            lib.lib.get(b"msl_rt_dispatch\0").map_err(|e| Error::Load {
                file: lib.file.clone(),
                message: e.to_string(),
            })?;
        let d = MslDispatch {
            entry: *entry,
            buffers: ptrs.as_ptr(),
            nbuffers: ptrs.len() as c_uint,
            tgmem_bytes: tg.as_ptr(),
            ntgmem: tg.len() as c_uint,
            groups: grid.groups,
            threads: grid.threads,
            timeout_ms: lib.timeout.as_millis().min(u32::MAX as u128) as c_uint,
            coop: c_uint::from(lib.lanes == Lanes::Coop),
        };
        f(&d, err.as_mut_ptr().cast(), err.len() as c_ulong)
    };
    let message = || {
        let end = err.iter().position(|&b| b == 0).unwrap_or(err.len());
        String::from_utf8_lossy(&err[..end]).into_owned()
    };
    match code {
        0 => {}
        1 => {
            return Err(Error::Kernel {
                kernel: kernel.to_string(),
                message: message(),
            })
        }
        2 => {
            return Err(Error::Timeout {
                kernel: kernel.to_string(),
                message: message(),
            })
        }
        4 => {
            // Lanes still run and may touch the copies: never free them.
            std::mem::forget(copies);
            std::mem::forget(region_copies);
            return Err(Error::Timeout {
                kernel: kernel.to_string(),
                message: message(),
            });
        }
        _ => return Err(bad(message())),
    }
    for (i, c) in copies.iter().enumerate() {
        if let Some(g) = c {
            if guard > 0 && !g.guard_intact(guard) {
                return Err(Error::Kernel {
                    kernel: kernel.to_string(),
                    message: format!("wrote past the end of [[buffer({i})]] ({} bytes)", g.len),
                });
            }
        }
    }
    for (i, g) in region_copies.iter().enumerate() {
        if !g.guard_intact(guard) {
            return Err(Error::Kernel {
                kernel: kernel.to_string(),
                message: format!("wrote past the end of memory region {i} ({} bytes)", g.len),
            });
        }
    }
    for (b, c) in bindings.iter_mut().zip(&copies) {
        if let (Binding::Buffer(dst), Some(g)) = (b, c) {
            dst.copy_from_slice(g.data());
        }
    }
    for (r, g) in regions.iter_mut().zip(&region_copies) {
        r.copy_from_slice(g.data());
    }
    Ok(())
}

/// Out-of-process dispatch through the sanitizer-built runner.
///
/// Request (little-endian): lib path and kernel name (u64 length + bytes),
/// groups and threads (3 × u32 each), timeout ms (u32), threadgroup memory
/// lengths (u32 count + u64 each), bindings (u32 count; per binding u32
/// kind 0 unbound / 1 bytes / 2 buffer, then u64 length + bytes / 3 view,
/// then u32 region + u64 offset), regions (u32 count, u64 length + bytes
/// each). Response: i32 code, u64 message length + message, then the bytes
/// of every kind-2 binding, then of every region, in order.
mod oop {
    use super::{Binding, Grid};
    use crate::compile::{runner, Sanitizer};
    use crate::error::{Error, Result};
    use crate::Library;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
        out.extend((b.len() as u64).to_le_bytes());
        out.extend(b);
    }

    pub(super) fn run(
        lib: &Library,
        san: Sanitizer,
        kernel: &str,
        bindings: &mut [Binding<'_>],
        regions: &mut [&mut [u8]],
        grid: Grid,
        tg_mem: &[usize],
    ) -> Result<()> {
        let exe = runner(san)?;
        let mut req = Vec::new();
        put_bytes(&mut req, lib.path.to_string_lossy().as_bytes());
        put_bytes(&mut req, kernel.as_bytes());
        for v in grid.groups.iter().chain(&grid.threads) {
            req.extend(v.to_le_bytes());
        }
        req.extend((lib.timeout.as_millis().min(u32::MAX as u128) as u32).to_le_bytes());
        req.extend((tg_mem.len() as u32).to_le_bytes());
        for &t in tg_mem {
            req.extend((t as u64).to_le_bytes());
        }
        req.extend((bindings.len() as u32).to_le_bytes());
        for b in bindings.iter() {
            match b {
                Binding::Unbound => req.extend(0u32.to_le_bytes()),
                Binding::Bytes(d) => {
                    req.extend(1u32.to_le_bytes());
                    put_bytes(&mut req, d);
                }
                Binding::Buffer(d) => {
                    req.extend(2u32.to_le_bytes());
                    put_bytes(&mut req, d);
                }
                Binding::View { region, offset } => {
                    req.extend(3u32.to_le_bytes());
                    req.extend((*region as u32).to_le_bytes());
                    req.extend((*offset as u64).to_le_bytes());
                }
            }
        }
        req.extend((regions.len() as u32).to_le_bytes());
        for r in regions.iter() {
            put_bytes(&mut req, r);
        }
        static N: AtomicU64 = AtomicU64::new(0);
        let tmp = std::env::temp_dir().join(format!(
            "msl-sim-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let (rq, rs) = (tmp.with_extension("req"), tmp.with_extension("resp"));
        let io = |what, path: &std::path::Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { what, path, source }
        };
        std::fs::write(&rq, &req).map_err(io("cannot write", &rq))?;
        let out = std::process::Command::new(&exe)
            .arg(&rq)
            .arg(&rs)
            .output()
            .map_err(io("cannot run", &exe));
        std::fs::remove_file(&rq).ok();
        let out = out?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let resp = std::fs::read(&rs);
        std::fs::remove_file(&rs).ok();
        if !out.status.success() || !stderr.trim().is_empty() {
            let report: Vec<&str> = stderr.lines().take(60).collect();
            return Err(Error::Kernel {
                kernel: kernel.to_string(),
                message: format!(
                    "{san:?} sanitizer runner failed ({}):\n{}",
                    out.status,
                    report.join("\n")
                ),
            });
        }
        let resp = resp.map_err(io("cannot read", &rs))?;
        let bad = || Error::Kernel {
            kernel: kernel.to_string(),
            message: "truncated response from the sanitizer runner".into(),
        };
        let code = i32::from_le_bytes(
            resp.get(0..4)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?,
        );
        let mlen = u64::from_le_bytes(
            resp.get(4..12)
                .ok_or_else(bad)?
                .try_into()
                .map_err(|_| bad())?,
        ) as usize;
        let msg = String::from_utf8_lossy(resp.get(12..12 + mlen).ok_or_else(bad)?).into_owned();
        match code {
            0 => {}
            1 => {
                return Err(Error::Kernel {
                    kernel: kernel.to_string(),
                    message: msg,
                })
            }
            2 | 4 => {
                return Err(Error::Timeout {
                    kernel: kernel.to_string(),
                    message: msg,
                })
            }
            _ => {
                return Err(Error::Dispatch {
                    kernel: kernel.to_string(),
                    message: msg,
                })
            }
        }
        let mut pos = 12 + mlen;
        for b in bindings.iter_mut() {
            if let Binding::Buffer(d) = b {
                let src = resp.get(pos..pos + d.len()).ok_or_else(bad)?;
                d.copy_from_slice(src);
                pos += d.len();
            }
        }
        for r in regions.iter_mut() {
            let src = resp.get(pos..pos + r.len()).ok_or_else(bad)?;
            r.copy_from_slice(src);
            pos += r.len();
        }
        Ok(())
    }
}
