//! The registry of environment variables rlx reads. Every variable is
//! declared here once, with its default and meaning; code reads them only
//! through [`get`] / [`flag`], and `rlx env` lists [`VARS`].

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
        meaning: "worker threads of the host executor (0 = one per core)",
    },
    EnvVar {
        name: "RLX_SPIN_US",
        default: "1000",
        meaning:
            "microseconds the host's decode worker threads spin for the next job before sleeping",
    },
    EnvVar {
        name: "RLX_LOG",
        default: "warn",
        meaning: "log level: error, warn, info, debug",
    },
    EnvVar {
        name: "RLX_CACHE_DIR",
        default: "~/.cache/rlx",
        meaning: "where assembled model files and compiled kernels are cached",
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

/// True when a registered variable is set to `1`, `true`, `on` or `yes`.
pub fn flag(name: &str) -> bool {
    matches!(
        get(name).map(|v| v.trim().to_ascii_lowercase()).as_deref(),
        Some("1" | "true" | "on" | "yes")
    )
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
    fn defaults_apply() {
        assert_eq!(
            get("RLX_LOG").as_deref(),
            Some(std::env::var("RLX_LOG").unwrap_or("warn".into()).as_str())
        );
        assert_eq!(lookup("RLX_NOPE"), None);
    }
}
