//! clang driver: `.metal` → shared library, cached by content hash.
//!
//! Pass 1 preprocesses the file (`-DMSL_PREPASS`, shim in pass-through
//! mode); [`crate::prepass`] rewrites it; pass 2 compiles the result with
//! the shim and links it with the runtime object into a `.so`. The cache
//! key hashes the rewritten source, the shim, the runtime, the flags and
//! clang's version, so an unchanged kernel is never recompiled. The cache
//! lives in `<cargo target dir>/msl-sim` (found from the running test
//! binary) or the temp dir.

use crate::error::{Error, Result};
use crate::prepass;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

const SHIM_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/shim");
const RUNTIME_CPP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/runtime/runtime.cpp");
const SHIM_TEXT: &str = include_str!("../shim/metal_stdlib");
const ABI_TEXT: &str = include_str!("../shim/msl_runtime.h");
const RUNTIME_TEXT: &str = include_str!("../runtime/runtime.cpp");
const RUNNER_CPP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/runtime/runner.cpp");
const RUNNER_TEXT: &str = include_str!("../runtime/runner.cpp");

/// A sanitizer to build kernels and the runtime with (`make sanitize`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sanitizer {
    /// `-fsanitize=thread`: data races in threadgroup / device memory.
    Thread,
    /// `-fsanitize=address`: out-of-bounds and use-after-free accesses.
    Address,
}

impl Sanitizer {
    /// From `MSL_SIM_SANITIZE` (`thread` / `address`); unset or empty → none.
    pub fn from_env() -> Option<Sanitizer> {
        match std::env::var("MSL_SIM_SANITIZE").ok()?.as_str() {
            "thread" | "tsan" => Some(Sanitizer::Thread),
            "address" | "asan" => Some(Sanitizer::Address),
            _ => None,
        }
    }

    fn flags(self) -> &'static [&'static str] {
        match self {
            Sanitizer::Thread => &["-fsanitize=thread", "-g", "-O1"],
            Sanitizer::Address => &["-fsanitize=address", "-fno-omit-frame-pointer", "-g", "-O1"],
        }
    }
}

struct Toolchain {
    clang: String,
    version: String,
    half_flags: Vec<&'static str>,
}

fn toolchain() -> Result<&'static Toolchain> {
    static TC: OnceLock<std::result::Result<Toolchain, String>> = OnceLock::new();
    let tc = TC.get_or_init(|| {
        let clang = std::env::var("MSL_SIM_CLANG").unwrap_or_else(|_| "clang++".into());
        let version = Command::new(&clang)
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .ok_or_else(|| clang.clone())?;
        // half: _Float16 (clang >= 15) or storage-only __fp16 (clang 14),
        // which needs a cc1 flag to be passed by value.
        let macros = Command::new(&clang)
            .args(["-dM", "-E", "-x", "c++", "/dev/null"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let mut half_flags = vec!["-mf16c"];
        if !macros.contains("__FLT16_MAX__") {
            half_flags.extend(["-Xclang", "-fallow-half-arguments-and-returns"]);
        }
        Ok(Toolchain {
            clang,
            version,
            half_flags,
        })
    });
    tc.as_ref().map_err(|tried| Error::ClangNotFound {
        tried: tried.clone(),
    })
}

/// 128-bit content hash as hex (two SipHash runs with different prefixes).
fn hash(parts: &[&[u8]]) -> String {
    let mut out = String::new();
    for seed in [0u8, 1] {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        seed.hash(&mut h);
        for p in parts {
            p.hash(&mut h);
        }
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

fn cache_dir() -> PathBuf {
    // Cargo marks its target directory with CACHEDIR.TAG.
    let from_exe = std::env::current_exe().ok().and_then(|exe| {
        exe.ancestors()
            .find(|d| d.join("CACHEDIR.TAG").is_file())
            .map(Path::to_path_buf)
    });
    from_exe.unwrap_or_else(std::env::temp_dir).join("msl-sim")
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// A unique temporary path next to `final_path` (renamed into place, so
/// concurrent builds of the same key never see a half-written file).
fn temp_beside(final_path: &Path) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let mut name = final_path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp{}.{n}", std::process::id()));
    final_path.with_file_name(name)
}

fn run(cmd: &mut Command, file: &str) -> Result<Vec<u8>> {
    let out = cmd.output().map_err(|e| Error::Compile {
        file: file.to_string(),
        message: format!("cannot run clang: {e}"),
    })?;
    if !out.status.success() {
        return Err(Error::Compile {
            file: file.to_string(),
            message: String::from_utf8_lossy(&out.stderr).trim_end().to_string(),
        });
    }
    Ok(out.stdout)
}

fn base_flags(tc: &Toolchain, san: Option<Sanitizer>) -> Vec<&'static str> {
    let mut f = vec!["-std=c++17", "-fPIC", "-pthread", "-Wno-unknown-attributes"];
    f.extend(tc.half_flags.iter().copied());
    match san {
        Some(s) => f.extend(s.flags()),
        None => f.push("-O2"),
    }
    f
}

/// The runtime object for these flags (compiled once per cache).
fn runtime_object(tc: &Toolchain, san: Option<Sanitizer>, dir: &Path) -> Result<PathBuf> {
    let flags = base_flags(tc, san);
    let key = hash(&[
        RUNTIME_TEXT.as_bytes(),
        ABI_TEXT.as_bytes(),
        flags.join(" ").as_bytes(),
        tc.version.as_bytes(),
    ]);
    let obj = dir.join(format!("runtime-{key}.o"));
    if obj.is_file() {
        return Ok(obj);
    }
    let tmp = temp_beside(&obj);
    run(
        Command::new(&tc.clang)
            .args(&flags)
            .arg("-I")
            .arg(SHIM_DIR)
            .args(["-c", "-x", "c++"])
            .arg(RUNTIME_CPP)
            .arg("-o")
            .arg(&tmp),
        "msl-sim runtime",
    )?;
    std::fs::rename(&tmp, &obj).map_err(io("cannot store", &obj))?;
    Ok(obj)
}

/// The sanitizer-built runner executable that runs dispatches out of
/// process (see `runtime/runner.cpp`), compiled once per cache.
pub(crate) fn runner(san: Sanitizer) -> Result<PathBuf> {
    let tc = toolchain()?;
    let dir = cache_dir();
    std::fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
    let flags = base_flags(tc, Some(san));
    let key = hash(&[
        RUNNER_TEXT.as_bytes(),
        flags.join(" ").as_bytes(),
        tc.version.as_bytes(),
    ]);
    let exe = dir.join(format!("runner-{key}"));
    if exe.is_file() {
        return Ok(exe);
    }
    let tmp = temp_beside(&exe);
    run(
        Command::new(&tc.clang)
            .args(&flags)
            .arg(RUNNER_CPP)
            .arg("-o")
            .arg(&tmp)
            .arg("-ldl"),
        "msl-sim runner",
    )?;
    std::fs::rename(&tmp, &exe).map_err(io("cannot store", &exe))?;
    Ok(exe)
}

/// Compile `path` (label `file` in messages) into a cached shared library;
/// returns its path and the kernel names it exports.
pub(crate) fn build(
    path: &Path,
    file: &str,
    include_dirs: &[PathBuf],
    san: Option<Sanitizer>,
) -> Result<(PathBuf, Vec<String>)> {
    let tc = toolchain()?;
    let dir = cache_dir();
    std::fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
    let mut pre = Command::new(&tc.clang);
    pre.args(["-E", "-x", "c++", "-std=c++17", "-DMSL_PREPASS", "-I"])
        .arg(SHIM_DIR);
    if let Some(parent) = path.parent() {
        pre.arg("-I").arg(parent);
    }
    for d in include_dirs {
        pre.arg("-I").arg(d);
    }
    let pre = run(pre.arg(path), file)?;
    let pre = String::from_utf8_lossy(&pre);
    let out = prepass::rewrite(&pre).map_err(|message| Error::Prepass {
        file: file.to_string(),
        message,
    })?;
    let names: Vec<String> = out.entries.iter().map(|e| e.name.clone()).collect();
    let flags = base_flags(tc, san);
    let key = hash(&[
        out.source.as_bytes(),
        SHIM_TEXT.as_bytes(),
        ABI_TEXT.as_bytes(),
        RUNTIME_TEXT.as_bytes(),
        flags.join(" ").as_bytes(),
        tc.version.as_bytes(),
    ]);
    let stem: String = Path::new(file)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let lib = dir.join(format!("{stem}-{key}.so"));
    if lib.is_file() {
        return Ok((lib, names));
    }
    let rt = runtime_object(tc, san, &dir)?;
    let cpp = dir.join(format!("{stem}-{key}.cpp"));
    let tmp_cpp = temp_beside(&cpp);
    std::fs::write(&tmp_cpp, out.source.as_bytes()).map_err(io("cannot write", &tmp_cpp))?;
    std::fs::rename(&tmp_cpp, &cpp).map_err(io("cannot store", &cpp))?;
    let tmp = temp_beside(&lib);
    run(
        Command::new(&tc.clang)
            .args(&flags)
            .arg("-I")
            .arg(SHIM_DIR)
            .args(["-shared", "-x", "c++"])
            .arg(&cpp)
            .args(["-x", "none"])
            .arg(&rt)
            .arg("-o")
            .arg(&tmp),
        file,
    )?;
    std::fs::rename(&tmp, &lib).map_err(io("cannot store", &lib))?;
    Ok((lib, names))
}
