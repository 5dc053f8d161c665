//! The registry of environment variables rlx reads. Every variable is
//! declared here once, with its default and meaning; code reads them only
//! through the typed readers ([`flag`], [`list`], [`int_at_most`],
//! [`threads`], [`choice`]), and `rlx env` lists [`VARS`] and the
//! [`problems`] of the current values.
//!
//! Values are validated where they are read: a value that cannot be
//! understood, or one out of range, prints one warning naming the variable
//! and what it accepts (once per process and variable) and the reader falls
//! back to the default or clamps to the bound. A typo in an environment
//! variable never stops a run, but never goes unnoticed either.

/// One declared environment variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvVar {
    /// Variable name.
    pub name: &'static str,
    /// Value assumed when unset.
    pub default: &'static str,
    /// What it does.
    pub meaning: &'static str,
}

/// Every variable rlx reads.
pub const VARS: &[EnvVar] = &[
    EnvVar {
        name: "RLX_VERIFY",
        default: "0",
        meaning: "1 = run the graph verifier and the schedule verifier on every compile",
    },
    EnvVar {
        name: "RLX_DISABLE_PASS",
        default: "",
        meaning: "comma-separated names of fusion passes to switch off",
    },
    EnvVar {
        name: "RLX_NUM_THREADS",
        default: "0",
        meaning: "worker threads of the host executor (0 = one per core; at most 4 per core)",
    },
    EnvVar {
        name: "RLX_SPIN_US",
        default: "1000",
        meaning:
            "microseconds the host's decode worker threads spin for the next job before sleeping \
             (0..=10000)",
    },
    EnvVar {
        name: "RLX_LOG",
        default: "warn",
        meaning: "log level: error, warn, info, debug",
    },
    EnvVar {
        name: "RLX_TRACE",
        default: "",
        meaning: "file to write a Chrome / Perfetto trace of the process to at exit \
                  (one slice per thunk run, compile stages, generation steps)",
    },
    EnvVar {
        name: "RLX_PROFILE",
        default: "0",
        meaning: "1 = `rlx bench` also prints where a decode step's time goes per thunk kind \
                  (as `--profile`)",
    },
    EnvVar {
        name: "RLX_CACHE_DIR",
        default: "~/.cache/rlx",
        meaning: "where assembled model files and compiled kernels are cached",
    },
    EnvVar {
        name: "RLX_GELU_HOST_ARENA_BYTES",
        default: "4294967296",
        meaning:
            "arena size in bytes past which an f32 tanh GELU lowers to the unified-memory host \
                  thunk `GeluApproxHost` (the seed's large-arena path; default 4 GiB)",
    },
    EnvVar {
        name: "RLX_METAL_HOST_FALLBACK",
        default: "0",
        meaning: "1 = run every Metal thunk that has a host path on the CPU (debugging)",
    },
];

/// The declaration of `name`, if it is registered.
pub fn lookup(name: &str) -> Option<&'static EnvVar> {
    VARS.iter().find(|v| v.name == name)
}

/// The value of a registered variable (its default when unset). An
/// unregistered name yields `None`: reading undeclared variables is a bug
/// that tests catch (`debug_assert`).
pub fn get(name: &str) -> Option<String> {
    let var = lookup(name);
    debug_assert!(
        var.is_some(),
        "environment variable {name} is not registered in rlx_ir::env"
    );
    let var = var?;
    Some(std::env::var(var.name).unwrap_or_else(|_| var.default.to_string()))
}

/// Print `rlx: warning: NAME=value: msg` on stderr, once per process and
/// variable.
pub fn warn(name: &str, msg: &str) {
    static SEEN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if seen.iter().any(|n| n == name) {
        return;
    }
    seen.push(name.to_string());
    let value = std::env::var(name).unwrap_or_default();
    eprintln!("rlx: warning: {name}={value:?}: {msg}");
}

/// Words a flag accepts as on / off (any case).
const FLAG_ON: [&str; 4] = ["1", "true", "on", "yes"];
const FLAG_OFF: [&str; 5] = ["", "0", "false", "off", "no"];

/// The problem with `value` as a flag, if any.
fn flag_problem(value: &str) -> Option<String> {
    let v = value.trim().to_ascii_lowercase();
    (!FLAG_ON.contains(&v.as_str()) && !FLAG_OFF.contains(&v.as_str())).then(|| {
        "not a flag (accepted: 1, true, on, yes to switch on; 0, false, off, no or empty to \
         switch off); treated as off"
            .to_string()
    })
}

/// True when a registered variable is set to `1`, `true`, `on` or `yes`
/// (any case). Any other value than those and `0`, `false`, `off`, `no`
/// or empty warns and counts as off.
pub fn flag(name: &str) -> bool {
    let v = get(name).unwrap_or_default();
    if let Some(p) = flag_problem(&v) {
        warn(name, &p);
        return false;
    }
    FLAG_ON.contains(&v.trim().to_ascii_lowercase().as_str())
}

/// A non-negative integer variable, at most `max`. Unparsable → a warning
/// and the registered default; above `max` → a warning and `max`.
pub fn int_at_most(name: &str, max: u64) -> u64 {
    let default = lookup(name)
        .and_then(|v| v.default.trim().parse::<u64>().ok())
        .unwrap_or(0)
        .min(max);
    let raw = get(name).unwrap_or_default();
    match int_problem(&raw, max) {
        Ok(n) => n,
        Err((msg, fallback)) => {
            let n = fallback.unwrap_or(default);
            warn(name, &format!("{msg}; using {n}"));
            n
        }
    }
}

/// `value` as an integer in `0..=max`, or the message and the value to use
/// instead (`None`: the default).
fn int_problem(value: &str, max: u64) -> Result<u64, (String, Option<u64>)> {
    match value.trim().parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        Ok(_) => Err((format!("above the maximum of {max}"), Some(max))),
        Err(_) => Err((
            format!("not a non-negative integer (accepted: 0..={max})"),
            None,
        )),
    }
}

/// The most worker threads a thread-count variable may ask for: four per
/// core (more only adds contention; thousands would take minutes to start).
pub fn max_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .saturating_mul(4)
}

/// A thread-count variable: `0` or unset = one per core; clamped (with a
/// warning) to [`max_threads`].
pub fn threads(name: &str) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match int_at_most(name, max_threads() as u64) {
        0 => cores,
        n => n as usize,
    }
}

/// A variable that takes one of `accepted` (any case; the registered
/// default when unset). Another value warns and yields the default.
pub fn choice(name: &str, accepted: &[&str]) -> String {
    let default = lookup(name).map_or("", |v| v.default).to_string();
    let v = get(name).unwrap_or_default().trim().to_ascii_lowercase();
    if v.is_empty() {
        return default;
    }
    if accepted.contains(&v.as_str()) {
        return v;
    }
    warn(
        name,
        &format!("not one of {}; using {default:?}", accepted.join(", ")),
    );
    default
}

/// Upper bound of `RLX_SPIN_US`: 10 ms (a longer spin only burns a core).
pub const MAX_SPIN_US: u64 = 10_000;
/// The levels `RLX_LOG` accepts.
pub const LOG_LEVELS: [&str; 4] = ["error", "warn", "info", "debug"];

/// What is wrong with the current value of each set variable (for
/// `rlx env`): `(name, message)` pairs, empty when all is well. Lists that
/// name things (pass names) are checked where they are read.
pub fn problems() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for var in VARS {
        let Ok(value) = std::env::var(var.name) else {
            continue;
        };
        let problem = match var.name {
            "RLX_VERIFY" | "RLX_METAL_HOST_FALLBACK" => flag_problem(&value),
            "RLX_NUM_THREADS" => int_problem(&value, max_threads() as u64).err().map(|e| e.0),
            "RLX_SPIN_US" => int_problem(&value, MAX_SPIN_US).err().map(|e| e.0),
            "RLX_GELU_HOST_ARENA_BYTES" => int_problem(&value, u64::MAX).err().map(|e| e.0),
            "RLX_LOG" => {
                let v = value.trim().to_ascii_lowercase();
                (!v.is_empty() && !LOG_LEVELS.contains(&v.as_str()))
                    .then(|| format!("not one of {}", LOG_LEVELS.join(", ")))
            }
            _ => None,
        };
        if let Some(p) = problem {
            out.push((var.name.to_string(), p));
        }
    }
    out
}

/// A comma-separated list variable, trimmed, empty entries dropped.
pub fn list(name: &str) -> Vec<String> {
    get(name)
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_is_well_formed() {
        let mut names: Vec<_> = VARS.iter().map(|v| v.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), VARS.len(), "duplicate names");
        assert!(VARS
            .iter()
            .all(|v| v.name.starts_with("RLX_") && !v.meaning.is_empty()));
    }

    #[test]
    fn value_checks() {
        assert_eq!(flag_problem("YES"), None);
        assert_eq!(flag_problem(" 0 "), None);
        assert!(flag_problem("maybe").unwrap().contains("not a flag"));
        assert_eq!(int_problem("12", 100), Ok(12));
        assert_eq!(int_problem("1000", 100).unwrap_err().1, Some(100));
        assert!(int_problem("-1", 100).unwrap_err().0.contains("0..=100"));
        assert_eq!(int_problem("abc", 100).unwrap_err().1, None);
        assert!(max_threads() >= 4);
    }

    #[test]
    fn defaults_apply() {
        assert_eq!(
            get("RLX_LOG").as_deref(),
            Some(std::env::var("RLX_LOG").unwrap_or("warn".into()).as_str())
        );
        assert_eq!(lookup("RLX_NOPE"), None);
    }
}
