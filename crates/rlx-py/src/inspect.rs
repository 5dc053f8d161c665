//! What `rlx inspect --html` draws, read off a compiled plan: per thunk its
//! byte ranges (named by buffer) and the pass that made it, and the Metal
//! plan's commands. `python/rlx/report` turns them into the page.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use rlx_metal::compile::Compiled;
use rlx_metal::metal::plan::{Command, MetalPlan};
use rlx_metal::thunk::{buffer_of, raw_offset, Buf, ByteRange};
use std::collections::HashMap;

/// One byte range: `(buffer, raw offset, bytes)`. `buffer` is `"arena"`,
/// the name of the state or param holding the range, `"state"` /
/// `"const"` (segment 0) otherwise.
pub(crate) type Range = (String, usize, usize);

/// Per thunk: `(name, one-line text, reads, writes, pass that made it)`.
pub(crate) type ThunkRow = (&'static str, String, Vec<Range>, Vec<Range>, Option<String>);

/// One Metal command: `(kind, thunk, kernel, grid, threadgroup)`; kind is
/// `dispatch`, `user`, `host`, `barrier` (thunk -1, no kernel) or `check`
/// (a validating kernel's status read; kernel = the op it checks).
pub(crate) type CommandRow = (&'static str, i64, String, [u32; 3], [u32; 3]);

fn name_range(c: &Compiled, r: &ByteRange) -> Range {
    let raw = raw_offset(r.offset);
    let buffer = match buffer_of(r.offset) {
        Buf::Arena => "arena".to_string(),
        Buf::State => c
            .states
            .iter()
            .find(|b| {
                let (s, n) = (raw_offset(b.offset), b.shape.size_bytes().unwrap_or(0));
                s <= raw && raw < s.saturating_add(n)
            })
            .map_or_else(|| "state".to_string(), |b| b.name.clone()),
        Buf::Weights(0) => "const".to_string(),
        Buf::Weights(s) => c
            .params
            .get(s - 1)
            .map_or_else(|| format!("segment {s}"), |b| b.name.clone()),
    };
    (buffer, raw, r.len)
}

/// The rows of [`ThunkRow`] for every thunk of `c`'s schedule.
pub(crate) fn thunk_rows(c: &Compiled) -> Vec<ThunkRow> {
    let made_by = &c.passes.made_by;
    c.schedule
        .thunks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let io = t.io();
            let by = made_by
                .get(i)
                .copied()
                .flatten()
                .and_then(|k| c.passes.passes.get(k))
                .map(|p| p.name.clone());
            let named = |rs: &[ByteRange]| rs.iter().map(|r| name_range(c, r)).collect();
            (
                t.name(),
                t.to_string(),
                named(&io.reads),
                named(&io.writes),
                by,
            )
        })
        .collect()
}

/// Where the planner put one value: `(step, start, end, held_until, offset,
/// bytes, alias_of)`. `step` is the node of the lowered (fused) graph that
/// holds the value, `start..=end` the steps from its definition to its last
/// read, `held_until` the last step its bytes stay taken (later than `end`
/// when a view or in-place value shares them), `offset` the raw arena
/// offset; `alias_of` is the step node whose bytes a view or in-place value
/// uses, or −1.
pub(crate) type ValueRow = (usize, usize, usize, usize, usize, usize, i64);

/// The planner's step count (nodes of the lowered graph) and, per node of
/// the compiled graph, its [`ValueRow`], or `None` for a node a graph fusion
/// absorbed or one outside the arena (weights, constants, state).
pub(crate) type ValuePlan = (usize, Vec<Option<ValueRow>>);

/// The [`ValuePlan`] of `c`.
pub(crate) fn value_plan(c: &Compiled) -> ValuePlan {
    let rows = c
        .node_map
        .iter()
        .map(|m| {
            let step = (*m)?;
            let p = c.placements.get(step).copied().flatten()?;
            let alias = p.alias_of.map_or(-1, |a| i64::try_from(a).unwrap_or(-1));
            Some((step, p.start, p.end, p.held_until, p.offset, p.size, alias))
        })
        .collect();
    (c.placements.len(), rows)
}

/// The rows of [`CommandRow`] for every command of `plan`.
pub(crate) fn command_rows(plan: &MetalPlan) -> Vec<CommandRow> {
    plan.commands
        .iter()
        .map(|cmd| match cmd {
            Command::Dispatch(d) => (
                "dispatch",
                d.thunk as i64,
                format!("{}:{}", d.kernel.family.file(), d.kernel.function),
                d.grid,
                d.threadgroup,
            ),
            Command::User(u) => (
                "user",
                u.thunk as i64,
                format!("{}:{}", u.op, u.function),
                u.grid,
                u.threadgroup,
            ),
            Command::Host { thunk } => ("host", *thunk as i64, String::new(), [0; 3], [0; 3]),
            Command::Barrier => ("barrier", -1, String::new(), [0; 3], [0; 3]),
            Command::Check(c) => ("check", c.thunk as i64, c.op.clone(), [0; 3], [0; 3]),
        })
        .collect()
}

/// The pass report's entries of `Executable.stats()`: `pass_matches` (name →
/// matches, −1 when disabled), `passes` (per thunk pass: matches, thunks
/// before / after, kinds made / removed) and `graph_passes`.
pub(crate) fn pass_stats(py: Python<'_>, c: &Compiled, d: &Bound<'_, PyDict>) -> PyResult<()> {
    let passes = PyDict::new(py);
    for p in c.passes.graph_passes.iter().chain(&c.passes.passes) {
        passes.set_item(&p.name, if p.enabled { p.matches as i64 } else { -1 })?;
    }
    d.set_item("pass_matches", passes)?;
    let per_pass = PyList::empty(py);
    for (k, p) in c.passes.passes.iter().enumerate() {
        let e = PyDict::new(py);
        let ch = c.passes.changes.get(k).cloned().unwrap_or_default();
        e.set_item("made", ch.made.into_iter().collect::<HashMap<_, _>>())?;
        e.set_item("removed", ch.removed.into_iter().collect::<HashMap<_, _>>())?;
        e.set_item("name", &p.name)?;
        e.set_item("enabled", p.enabled)?;
        e.set_item("matches", p.matches)?;
        e.set_item("thunks_before", p.thunks_before)?;
        e.set_item("thunks_after", p.thunks_after)?;
        per_pass.append(e)?;
    }
    d.set_item("passes", per_pass)?;
    let graph = PyList::empty(py);
    for p in &c.passes.graph_passes {
        graph.append((
            &p.name,
            p.enabled,
            p.matches,
            p.thunks_before,
            p.thunks_after,
        ))?;
    }
    d.set_item("graph_passes", graph)?;
    Ok(())
}
