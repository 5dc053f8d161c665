//! The crate's error type. Messages start with the kernel file or kernel
//! name in brackets, like the rest of rlx.

use std::path::PathBuf;

/// Everything that can go wrong compiling or running a kernel.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No clang++ on the machine (`scripts/setup.sh` installs it).
    #[error("[msl-sim] clang++ not found ({tried}): install clang (`apt-get install -y clang`, done by scripts/setup.sh) or set MSL_SIM_CLANG")]
    ClangNotFound {
        /// The command that was tried.
        tried: String,
    },
    /// clang rejected the kernel file (in either pass).
    #[error("[{file}] kernel failed to compile:\n{message}")]
    Compile {
        /// The `.metal` file (or source label).
        file: String,
        /// clang's diagnostics.
        message: String,
    },
    /// The pre-pass found a construct it cannot translate.
    #[error("[{file}] {message}")]
    Prepass {
        /// The `.metal` file (or source label).
        file: String,
        /// What and where.
        message: String,
    },
    /// File-system trouble with the kernel source or the build cache.
    #[error("[msl-sim] {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Loading the compiled library failed.
    #[error("[{file}] cannot load the compiled kernel library: {message}")]
    Load {
        /// The `.metal` file (or source label).
        file: String,
        /// The loader's message.
        message: String,
    },
    /// The library has no kernel of that name.
    #[error("[{kernel}] no such kernel in {file} (it has: {available})")]
    NoSuchKernel {
        /// The requested kernel.
        kernel: String,
        /// The `.metal` file (or source label).
        file: String,
        /// The kernels it does have, comma separated.
        available: String,
    },
    /// The dispatch does not fit the kernel's parameters or the limits.
    #[error("[{kernel}] bad dispatch: {message}")]
    Dispatch {
        /// The kernel.
        kernel: String,
        /// What is wrong.
        message: String,
    },
    /// The kernel broke a rule while running (divergent barrier, a write
    /// past the end of a buffer, too much threadgroup memory, ...).
    #[error("[{kernel}] {message}")]
    Kernel {
        /// The kernel.
        kernel: String,
        /// What happened.
        message: String,
    },
    /// The watchdog stopped a dispatch in which no lane made progress
    /// (barrier, simd exchange, threadgroup hand-over) for the timeout.
    #[error("[{kernel}] {message}")]
    Timeout {
        /// The kernel.
        kernel: String,
        /// Where the lanes were.
        message: String,
    },
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
