//! msl-sim: run Metal Shading Language compute kernels on the CPU, so that
//! rlx's `.metal` kernels are tested on Linux CI (test-only crate).
//!
//! A `.metal` file is compiled by clang against a `metal_stdlib` shim
//! (`shim/`) after a small source pre-pass ([`prepass`]), linked with a
//! C++ runtime (`runtime/runtime.cpp`) into a shared library (cached by
//! content hash, see [`compile`]) and loaded. [`Library::dispatch`] runs a
//! kernel like `dispatchThreadgroups`: threadgroups in turn, the lanes of
//! one threadgroup either as cooperative fibers on one worker thread
//! ([`Lanes::Coop`], the default: a lane runs until it waits at a barrier /
//! `simd_*` call, or reaches an atomic or returns) or as one OS thread each
//! ([`Lanes::Threads`]: slower, what the sanitizer runs use), with
//! threadgroup memory (static
//! `threadgroup` variables and `[[threadgroup(i)]]` buffers), barriers,
//! `simd_*` functions over 32-lane simdgroups, 8x8 simdgroup matrices
//! (load / store / multiply-accumulate) and atomics.
//!
//! What a GPU would leave undefined is an error here: a barrier not reached
//! by every lane, lanes at different barriers, a write past the end of a
//! buffer (guard bytes after each buffer), more than 32 KiB of threadgroup
//! memory. A watchdog turns a deadlock (no lane making progress for the
//! timeout) into [`Error::Timeout`]; long dispatches that progress run on.
//! Cooperative lanes report a deadlock where every lane waits (e.g. some at
//! a barrier, the others at a `simd_*` call) at once, also as
//! [`Error::Timeout`]. A lane looping without a barrier, `simd_*` call or
//! atomic cannot be stopped in either mode: its thread is leaked.
//!
//! Binding convention (rlx's, also `MetalPlan`'s): `args` bytes are
//! `[[buffer(0)]]`, the buffers follow as `[[buffer(1)]]`, ...
//!
//! Environment: `MSL_SIM_CLANG` (default `clang++`), `MSL_SIM_SANITIZE`
//! (`thread` / `address`: kernels and runtime are built with that
//! sanitizer and every dispatch runs in a sanitizer-linked runner process,
//! `runtime/runner.cpp`; a sanitizer report becomes [`Error::Kernel`]. Used
//! by `make sanitize`), `MSL_SIM_LANES` (`coop`, the default, or
//! `threads`: see [`Lanes`]; sanitizer runs always use threads).

pub mod compile;
mod dispatch;
pub mod error;
pub mod prepass;

pub use compile::Sanitizer;
pub use dispatch::{Binding, Grid};
pub use error::{Error, Result};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How the lanes of a threadgroup run. Results are the same; only speed
/// and the way a deadlock is found differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lanes {
    /// One user-space fiber per lane, all on one worker thread; a lane
    /// switches to the next at barriers, `simd_*` calls, atomics and
    /// return. Many times faster than threads on few cores; a deadlock
    /// where every lane waits is reported at once. Each lane has a 512 KiB
    /// stack with a guard page (per-lane arrays beyond that fault).
    Coop,
    /// One OS thread per lane (the sanitizer runs need these: ThreadSanitizer
    /// cannot follow fiber switches).
    Threads,
}

impl Lanes {
    /// From `MSL_SIM_LANES`: `threads` → [`Lanes::Threads`]; unset, empty,
    /// `coop` (or anything else) → [`Lanes::Coop`].
    pub fn from_env() -> Lanes {
        match std::env::var("MSL_SIM_LANES").as_deref() {
            Ok("threads") => Lanes::Threads,
            _ => Lanes::Coop,
        }
    }
}

/// A compiled `.metal` file, ready to dispatch its kernels. Cheap to clone.
#[derive(Clone)]
pub struct Library {
    file: String,
    /// The library dispatches run: `lib`'s file, or its sanitizer build
    /// (loaded only by the runner process).
    path: PathBuf,
    /// The plain build, loaded here: kernel tables and in-process dispatch.
    lib: Arc<libloading::Library>,
    kernels: Vec<String>,
    timeout: Duration,
    lanes: Lanes,
    sanitizer: Option<Sanitizer>,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("file", &self.file)
            .field("kernels", &self.kernels)
            .finish()
    }
}

/// Loaded libraries by path. Never unloaded: a watchdog may leave lanes
/// running in one.
fn loaded(path: &Path, file: &str) -> Result<Arc<libloading::Library>> {
    static LIBS: OnceLock<Mutex<HashMap<PathBuf, Arc<libloading::Library>>>> = OnceLock::new();
    let mut libs = LIBS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(l) = libs.get(path) {
        return Ok(l.clone());
    }
    // SAFETY: the library is one we just built from the shim and runtime;
    // its initialisers only set up C++ statics.
    let lib = unsafe { libloading::Library::new(path) }.map_err(|e| Error::Load {
        file: file.to_string(),
        message: e.to_string(),
    })?;
    let lib = Arc::new(lib);
    libs.insert(path.to_path_buf(), lib.clone());
    Ok(lib)
}

impl Library {
    /// Compile a `.metal` file (includes resolved next to it).
    pub fn compile(path: impl AsRef<Path>) -> Result<Library> {
        Self::compile_with(path, &[])
    }

    /// Compile a `.metal` file with extra include directories.
    pub fn compile_with(path: impl AsRef<Path>, include_dirs: &[PathBuf]) -> Result<Library> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let san = Sanitizer::from_env();
        let (so, kernels) = compile::build(path, &file, include_dirs, None)?;
        dispatch::trace(&format!("library\t{file}\t{}", kernels.join("\t")));
        let path = match san {
            Some(s) => {
                compile::runner(s)?;
                compile::build(path, &file, include_dirs, Some(s))?.0
            }
            None => so.clone(),
        };
        Ok(Library {
            lib: loaded(&so, &file)?,
            path,
            file,
            kernels,
            timeout: Duration::from_secs(30),
            lanes: Lanes::from_env(),
            sanitizer: san,
        })
    }

    /// Compile kernel source held in memory; `label` (e.g.
    /// `elementwise.metal`) names it in diagnostics.
    pub fn from_source(label: &str, source: &str) -> Result<Library> {
        // one directory per call: concurrent calls never share the file
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "msl-sim-src-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
            what: "cannot create",
            path: dir.clone(),
            source,
        })?;
        let path = dir.join(label);
        std::fs::write(&path, source).map_err(|source| Error::Io {
            what: "cannot write",
            path: path.clone(),
            source,
        })?;
        let san = Sanitizer::from_env();
        let built = compile::build(&path, label, &[], None).and_then(|(so, kernels)| {
            let sanitized = match san {
                Some(s) => {
                    compile::runner(s)?;
                    compile::build(&path, label, &[], Some(s))?.0
                }
                None => so.clone(),
            };
            Ok((so, kernels, sanitized))
        });
        std::fs::remove_dir_all(&dir).ok();
        let (so, kernels, path) = built?;
        dispatch::trace(&format!("library\t{label}\t{}", kernels.join("\t")));
        Ok(Library {
            lib: loaded(&so, label)?,
            path,
            file: label.to_string(),
            kernels,
            timeout: Duration::from_secs(30),
            lanes: Lanes::from_env(),
            sanitizer: san,
        })
    }

    /// Kernel names (host names) in source order.
    pub fn kernels(&self) -> &[String] {
        &self.kernels
    }

    /// The file label used in messages.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Watchdog window: the longest a dispatch may go without any lane
    /// making progress (default 30 s).
    pub fn with_timeout(mut self, timeout: Duration) -> Library {
        self.timeout = timeout;
        self
    }

    /// Run the lanes as `lanes` (default: [`Lanes::from_env`]). Ignored
    /// under a sanitizer, whose runner always uses threads.
    pub fn with_lanes(mut self, lanes: Lanes) -> Library {
        self.lanes = lanes;
        self
    }

    /// How this library's dispatches run their lanes.
    pub fn lanes(&self) -> Lanes {
        if self.sanitizer.is_some() {
            Lanes::Threads
        } else {
            self.lanes
        }
    }

    /// Run `kernel` with rlx's binding convention: `args` at
    /// `[[buffer(0)]]` and `buffers[i]` at `[[buffer(i + 1)]]`;
    /// `tg_mem[i]` bytes of `[[threadgroup(i)]]` memory.
    pub fn dispatch(
        &self,
        kernel: &str,
        args: &[u8],
        buffers: &mut [&mut [u8]],
        grid: Grid,
        tg_mem: &[usize],
    ) -> Result<()> {
        let mut b: Vec<Binding<'_>> = Vec::with_capacity(buffers.len() + 1);
        b.push(Binding::Bytes(args));
        b.extend(buffers.iter_mut().map(|x| Binding::Buffer(x)));
        self.dispatch_bindings(kernel, &mut b, grid, tg_mem)
    }

    /// Run `kernel` with `bindings[i]` at `[[buffer(i)]]`.
    pub fn dispatch_bindings(
        &self,
        kernel: &str,
        bindings: &mut [Binding<'_>],
        grid: Grid,
        tg_mem: &[usize],
    ) -> Result<()> {
        dispatch::run(self, kernel, bindings, &mut [], grid, tg_mem)
    }

    /// Run `kernel` with `bindings[i]` at `[[buffer(i)]]`, where
    /// [`Binding::View`]s point into `regions` (e.g. one activation arena
    /// bound at several offsets, like a `MetalPlan` dispatch). Each region
    /// is copied in once, so aliasing views see each other's writes.
    pub fn dispatch_views(
        &self,
        kernel: &str,
        bindings: &mut [Binding<'_>],
        regions: &mut [&mut [u8]],
        grid: Grid,
        tg_mem: &[usize],
    ) -> Result<()> {
        dispatch::run(self, kernel, bindings, regions, grid, tg_mem)
    }
}
