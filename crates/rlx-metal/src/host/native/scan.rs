//! Native `scan_host`: the body graph is compiled once (the usual
//! [`crate::compile::compile`], cached per thread by graph equality) and
//! its schedule run `length` times by a nested [`HostExecutor`] over a
//! private arena, with the carries and the scanned slices copied in and
//! `y` copied out each step.
//!
//! A body that does not compile, has params or states (nothing outside
//! could bind them), or lowers to a thunk without a native kernel is not
//! handled: the thunk then goes to the executor's fallback as before.

use super::NResult;
use crate::compile::{compile, CompileOptions, Compiled};
use crate::host::buffer::{Mem, Segment};
use crate::host::exec::{HostExecutor, Mode};
use crate::host::kernels::invalid;
use crate::thunk::host::ScanHostDesc;
use crate::thunk::{Thunk, ThunkSchedule};
use rlx_ir::Graph;
use std::cell::RefCell;
use std::rc::Rc;

/// A compiled body and its buffers (8-byte words: every dtype aligned).
struct Body {
    compiled: Compiled,
    arena: Vec<u64>,
    state: Vec<u64>,
    seg0: Vec<u64>,
    carries: Vec<u8>,
    exec: HostExecutor,
}

/// Bodies compiled on this thread: `(graph, None)` marks a body that has no
/// native form.
type Cache = Vec<(Graph, Option<Rc<RefCell<Body>>>)>;

thread_local! {
    static BODIES: RefCell<Cache> = const { RefCell::new(Vec::new()) };
}

/// Bodies kept per thread (oldest dropped first).
const CACHE_LEN: usize = 16;

fn words(bytes: usize) -> Vec<u64> {
    vec![0u64; bytes.div_ceil(8).max(1)]
}

fn build(g: &Graph) -> Option<Body> {
    let compiled = compile(g, &CompileOptions::default()).ok()?;
    if !compiled.params.is_empty() || !compiled.states.is_empty() {
        return None;
    }
    // carries, slices and results are copied through the body's arena
    let in_arena = |b: &crate::compile::Binding| crate::thunk::offsets::is_arena(b.offset);
    if !compiled
        .inputs
        .iter()
        .chain(&compiled.outputs)
        .all(in_arena)
    {
        return None;
    }
    let probe = HostExecutor::new(Mode::Native);
    if !compiled
        .schedule
        .thunks
        .iter()
        .all(|t| matches!(t, Thunk::Nop) || probe.is_native(t))
    {
        return None;
    }
    let mut seg0 = words(compiled.segment_bytes.first().copied().unwrap_or(0));
    {
        // SAFETY: viewing the u64 words as bytes (same allocation, u8 has
        // no alignment or validity requirements).
        let bytes = unsafe {
            std::slice::from_raw_parts_mut(seg0.as_mut_ptr().cast::<u8>(), seg0.len() * 8)
        };
        for (off, data) in &compiled.constants {
            bytes.get_mut(*off..off + data.len())?.copy_from_slice(data);
        }
    }
    let carry_bytes = compiled
        .outputs
        .iter()
        .map(|b| b.shape.size_bytes().unwrap_or(0))
        .sum();
    Some(Body {
        arena: words(compiled.arena_bytes),
        state: words(compiled.state_bytes),
        seg0,
        carries: vec![0u8; carry_bytes],
        exec: HostExecutor::new(Mode::Native),
        compiled,
    })
}

/// The cached body of `g`, compiling it on first sight.
fn body(g: &Graph) -> Option<Rc<RefCell<Body>>> {
    BODIES.with(|c| {
        if let Some((_, b)) = c.borrow().iter().find(|(k, _)| k == g) {
            return b.clone();
        }
        let b = build(g).map(|b| Rc::new(RefCell::new(b)));
        let mut c = c.borrow_mut();
        if c.len() >= CACHE_LEN {
            c.remove(0);
        }
        c.push((g.clone(), b.clone()));
        b
    })
}

pub(super) fn handles(t: &Thunk) -> bool {
    match t {
        Thunk::ScanHost(s) => body(&s.desc.body).is_some(),
        _ => false,
    }
}

/// `bytes` bytes of a body arena `(ptr, len)` at raw offset `off`.
fn arena_slice(base: &mut [u64], off: usize, bytes: usize) -> Option<&mut [u8]> {
    let end = off.checked_add(bytes)?;
    if end > base.len() * 8 {
        return None;
    }
    // SAFETY: in bounds of the word buffer (checked); u8 view of u64s.
    Some(unsafe { std::slice::from_raw_parts_mut(base.as_mut_ptr().cast::<u8>().add(off), bytes) })
}

pub(super) fn run(t: &Thunk, mem: &Mem) -> NResult {
    let Thunk::ScanHost(s) = t else {
        return Err(invalid("scan_host", format!("not a scan: {}", t.name())).into());
    };
    let Some(b) = body(&s.desc.body) else {
        return Err(invalid("scan_host", "the body has no native form").into());
    };
    let mut b = b.borrow_mut();
    run_body(&mut b, &s.desc, mem)
}

fn run_body(b: &mut Body, d: &ScanHostDesc, mem: &Mem) -> NResult {
    const K: &str = "scan_host";
    let bad = |msg: &str| -> crate::host::exec::NativeError { invalid(K, msg.to_string()).into() };
    let Body {
        compiled,
        arena,
        state,
        seg0,
        carries,
        exec,
    } = b;
    let nc = d.num_carry;
    let (ins, outs) = (&compiled.inputs, &compiled.outputs);
    if ins.len() != d.operands.len() || outs.len() != nc + 1 || d.length == 0 {
        return Err(bad("body inputs / outputs do not match the operands"));
    }
    let y_bytes = outs[nc].shape.size_bytes().unwrap_or(0);
    if d.output.1 < y_bytes.saturating_mul(d.length) {
        return Err(bad("output shorter than length · y"));
    }
    let raw = crate::thunk::offsets::raw_offset;
    let size = |bind: &crate::compile::Binding| bind.shape.size_bytes().unwrap_or(0);
    // initial carries
    for (bind, op) in ins.iter().zip(&d.operands).take(nc) {
        let src = mem.get::<u8>("carry", op.0, op.1)?;
        let dst = arena_slice(arena, raw(bind.offset), op.1).ok_or_else(|| bad("carry"))?;
        dst.copy_from_slice(src);
    }
    let out = mem.get_mut::<u8>("dst", d.output.0, d.output.1)?;
    let segs = [Segment {
        ptr: seg0.as_ptr().cast::<u8>(),
        len: seg0.len() * 8,
    }];
    let mut never = |_: usize, t: &Thunk| -> Result<(), String> {
        Err(format!("{} has no native kernel", t.name()))
    };
    for i in 0..d.length {
        let slot = if d.reverse { d.length - 1 - i } else { i };
        for (bind, op) in ins.iter().zip(&d.operands).skip(nc) {
            let per = op.1 / d.length;
            let src = mem.get::<u8>("xs", op.0 + slot * per, per)?;
            let dst = arena_slice(arena, raw(bind.offset), per).ok_or_else(|| bad("xs"))?;
            dst.copy_from_slice(src);
        }
        {
            // SAFETY: the body's arena, state and constants outlive `sub`,
            // and nothing else touches them while it runs.
            let sub = unsafe {
                Mem::new(
                    arena.as_mut_ptr().cast::<u8>(),
                    arena.len() * 8,
                    state.as_mut_ptr().cast::<u8>(),
                    state.len() * 8,
                    &segs,
                )
            };
            let sched: &ThunkSchedule = &compiled.schedule;
            exec.run(sched, &sub, &mut never)
                .map_err(|e| invalid(K, format!("body: {e}")))?;
        }
        // y, then the new carries (through a buffer: an output may alias
        // another carry's input)
        let src = arena_slice(arena, raw(outs[nc].offset), y_bytes).ok_or_else(|| bad("y"))?;
        out[slot * y_bytes..][..y_bytes].copy_from_slice(src);
        let mut at = 0;
        for ob in outs.iter().take(nc) {
            let n = size(ob);
            let src = arena_slice(arena, raw(ob.offset), n).ok_or_else(|| bad("carry"))?;
            carries[at..at + n].copy_from_slice(src);
            at += n;
        }
        let mut at = 0;
        for bind in ins.iter().take(nc) {
            let n = size(bind);
            let dst = arena_slice(arena, raw(bind.offset), n).ok_or_else(|| bad("carry"))?;
            dst.copy_from_slice(&carries[at..at + n]);
            at += n;
        }
    }
    Ok(())
}
