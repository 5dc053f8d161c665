//! metal-sim vs host: small graphs compiled by rlx, run once by the host
//! executor and once as a MetalPlan through msl-sim, must give the same
//! outputs. Needs clang++ (scripts/setup.sh installs it).
//!
//! Tolerances (the two sides round differently: f32 row sums in another
//! order, GELU's erf approximated in the kernel to 1.5e-7):
//! f32 `|sim - host| <= 1e-5 + 1e-5·|host|`; f16 `2e-3 + 2^-9·|host|`
//! (a one-ulp difference of an intermediate f16 value passes).
//!
//! The harness (`fill`, `run_host`, `run_sim`, `assert_same`,
//! `assert_close`, `compiled`) is shared with the per-family test files
//! `sim_tests_<family>.rs` (declared in `sim.rs`).

use super::*;
use crate::compile::{compile_without, CompileOptions, Compiled};
use crate::host::buffer::AlignedBuf;
use crate::metal::plan::PlanStats;
use crate::thunk::{is_arena, raw_offset};
use rlx_ir::op::{Activation, BinaryOp};
use rlx_ir::{DType, Graph, NodeId, Op, Shape};

pub(super) fn uniform(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

pub(super) fn encode(dt: DType, v: &[f32]) -> Vec<u8> {
    match dt {
        DType::F16 => v
            .iter()
            .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
            .collect(),
        _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

pub(super) fn decode(dt: DType, b: &[u8]) -> Vec<f32> {
    match dt {
        DType::F16 => b
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    }
}

/// The buffers of one run, filled with the graph's constants, params and
/// inputs (deterministic values per name).
pub(super) struct Bufs {
    pub(super) arena: AlignedBuf,
    pub(super) state: AlignedBuf,
    pub(super) segs: Vec<AlignedBuf>,
}

/// Uniform values in `[-2, 2)` for binding `b`, deterministic per `seed`.
fn uniform_bytes(seed: u64, b: &crate::compile::Binding) -> Vec<u8> {
    let n = b.shape.numel().unwrap();
    encode(b.shape.dtype, &uniform(seed, n, -2.0, 2.0))
}

pub(super) fn fill(c: &Compiled) -> Bufs {
    fill_params(c, |i, p| uniform_bytes(100 + i as u64, p))
}

/// [`fill`] with the bytes of param `i` made by `param_bytes(i, binding)`
/// (inputs stay uniform in `[-2, 2)`).
pub(super) fn fill_params(
    c: &Compiled,
    param_bytes: impl Fn(usize, &crate::compile::Binding) -> Vec<u8>,
) -> Bufs {
    let mut segs: Vec<AlignedBuf> = c
        .segment_bytes
        .iter()
        .map(|&n| AlignedBuf::zeroed(n))
        .collect();
    for (off, bytes) in &c.constants {
        segs[0].as_mut_slice()[*off..*off + bytes.len()].copy_from_slice(bytes);
    }
    for (i, p) in c.params.iter().enumerate() {
        segs[1 + i]
            .as_mut_slice()
            .copy_from_slice(&param_bytes(i, p));
    }
    let mut arena = AlignedBuf::zeroed(c.arena_bytes);
    for (i, b) in c.inputs.iter().enumerate() {
        assert!(is_arena(b.offset));
        let bytes = uniform_bytes(i as u64 + 1, b);
        let o = raw_offset(b.offset);
        arena.as_mut_slice()[o..o + bytes.len()].copy_from_slice(&bytes);
    }
    Bufs {
        arena,
        state: AlignedBuf::zeroed(c.state_bytes),
        segs,
    }
}

pub(super) fn outputs(c: &Compiled, b: &Bufs) -> Vec<Vec<f32>> {
    c.outputs
        .iter()
        .map(|o| {
            let at = raw_offset(o.offset);
            let n = o.shape.size_bytes().unwrap();
            decode(o.shape.dtype, &b.arena.as_slice()[at..at + n])
        })
        .collect()
}

pub(super) fn no_fallback(i: usize, t: &Thunk) -> Result<(), String> {
    Err(format!("thunk {i} ({t}) has no native kernel"))
}

pub(super) fn run_host(c: &Compiled) -> Vec<Vec<f32>> {
    run_host_on(c, fill(c))
}

/// Runs `c` on the host executor over buffers `b`; returns the outputs.
pub(super) fn run_host_on(c: &Compiled, b: Bufs) -> Vec<Vec<f32>> {
    try_run_host_on(c, b).unwrap_or_else(|e| panic!("{e}"))
}

/// [`run_host_on`], the run's error as text.
pub(super) fn try_run_host_on(c: &Compiled, mut b: Bufs) -> Result<Vec<Vec<f32>>, String> {
    let segs: Vec<Segment> = b
        .segs
        .iter_mut()
        .map(|s| Segment {
            ptr: s.as_mut_ptr(),
            len: s.len(),
        })
        .collect();
    let (al, sl) = (b.arena.len(), b.state.len());
    // SAFETY: the buffers outlive `mem` and are only touched through it.
    let mem = unsafe { Mem::new(b.arena.as_mut_ptr(), al, b.state.as_mut_ptr(), sl, &segs) };
    HostExecutor::new(Mode::Native)
        .run(&c.schedule, &mem, &mut no_fallback)
        .map_err(|e| e.to_string())?;
    Ok(outputs(c, &b))
}

pub(super) fn run_sim(c: &Compiled, plan: &MetalPlan) -> Vec<Vec<f32>> {
    run_sim_on(c, plan, fill(c))
}

/// Runs `plan` on metal-sim over buffers `b`; returns the outputs.
pub(super) fn run_sim_on(c: &Compiled, plan: &MetalPlan, b: Bufs) -> Vec<Vec<f32>> {
    try_run_sim_on(c, plan, b).unwrap_or_else(|e| panic!("{e}"))
}

/// [`run_sim_on`], the run's error as text.
pub(super) fn try_run_sim_on(
    c: &Compiled,
    plan: &MetalPlan,
    mut b: Bufs,
) -> Result<Vec<Vec<f32>>, String> {
    {
        let segs: Vec<&[u8]> = b.segs.iter().map(|s| s.as_slice()).collect();
        let bufs = SimBuffers {
            arena: b.arena.as_mut_slice(),
            state: b.state.as_mut_slice(),
            segments: &segs,
        };
        SimExecutor::new()
            .run(plan, &c.schedule, bufs, &mut no_fallback)
            .map_err(|e| e.to_string())?;
    }
    Ok(outputs(c, &b))
}

pub(super) fn assert_same(c: &Compiled, plan: &MetalPlan, dt: DType) {
    let (atol, rtol) = match dt {
        DType::F16 => (2e-3, 1.0 / 512.0),
        _ => (1e-5, 1e-5),
    };
    assert_close(c, plan, atol, rtol);
}

/// Host and metal-sim outputs agree within `atol + rtol·|host|`.
pub(super) fn assert_close(c: &Compiled, plan: &MetalPlan, atol: f32, rtol: f32) {
    let host = run_host(c);
    let sim = run_sim(c, plan);
    for (k, (h, s)) in host.iter().zip(&sim).enumerate() {
        assert_eq!(h.len(), s.len());
        for (i, (&hv, &sv)) in h.iter().zip(s).enumerate() {
            assert!(
                (hv - sv).abs() <= atol + rtol * hv.abs(),
                "output {k}[{i}]: host {hv}, metal-sim {sv}\nschedule:\n{}\nplan:\n{plan}",
                c.schedule
            );
        }
    }
}

pub(super) fn node(g: &mut Graph, op: Op, ins: &[NodeId]) -> NodeId {
    g.add(op, ins, "").unwrap()
}

/// A `Param` (when `param`) or `Input` leaf of shape `dims`, `dt`.
pub(super) fn leaf(g: &mut Graph, dims: &[usize], dt: DType, param: bool) -> NodeId {
    let shape = Shape::of(dims, dt);
    let op = if param {
        Op::Param { shape }
    } else {
        Op::Input { shape }
    };
    node(g, op, &[])
}

/// An `Input` leaf.
pub(super) fn input(g: &mut Graph, dims: &[usize], dt: DType) -> NodeId {
    leaf(g, dims, dt, false)
}

/// A `Param` leaf.
pub(super) fn param(g: &mut Graph, dims: &[usize], dt: DType) -> NodeId {
    leaf(g, dims, dt, true)
}

/// Compiles `g` and asserts that every thunk named in `kinds` is there
/// and runs as a dispatch of a `family` kernel.
pub(super) fn family_plan(g: &Graph, family: Family, kinds: &[&str]) -> (Compiled, MetalPlan) {
    let c = compiled(g);
    let plan = MetalPlan::build(&c.schedule);
    for kind in kinds {
        let mut seen = false;
        for (i, t) in c.schedule.thunks.iter().enumerate() {
            if t.name() != *kind {
                continue;
            }
            seen = true;
            let d = plan.commands.iter().any(|cmd| {
                matches!(cmd, Command::Dispatch(d) if d.thunk == i && d.kernel.family == family)
            });
            assert!(d, "thunk {i} ({kind}) is not a {family:?} dispatch\n{plan}");
        }
        assert!(seen, "no {kind} thunk in\n{}", c.schedule);
    }
    (c, plan)
}

/// `softmax(gelu(rms_norm(x, gamma)) + y)` plus a broadcast add of a
/// `[rows, 1]` column and a bias row.
fn chain(dt: DType, rows: usize, h: usize) -> Graph {
    let mut g = Graph::new("chain");
    let x = node(
        &mut g,
        Op::Input {
            shape: Shape::of(&[rows, h], dt),
        },
        &[],
    );
    let y = node(
        &mut g,
        Op::Input {
            shape: Shape::of(&[rows, h], dt),
        },
        &[],
    );
    let col = node(
        &mut g,
        Op::Input {
            shape: Shape::of(&[rows, 1], dt),
        },
        &[],
    );
    let gamma = node(
        &mut g,
        Op::Param {
            shape: Shape::of(&[h], dt),
        },
        &[],
    );
    let bias = node(
        &mut g,
        Op::Param {
            shape: Shape::of(&[h], dt),
        },
        &[],
    );
    let n = node(&mut g, Op::RmsNorm { eps: 1e-5 }, &[x, gamma]);
    let a = node(
        &mut g,
        Op::Activation {
            kind: Activation::Gelu,
        },
        &[n],
    );
    let s = node(
        &mut g,
        Op::Binary {
            kind: BinaryOp::Add,
        },
        &[a, y],
    );
    let sm = node(&mut g, Op::Softmax { axis: -1 }, &[s]);
    let c = node(
        &mut g,
        Op::Binary {
            kind: BinaryOp::Mul,
        },
        &[sm, col],
    );
    let b = node(
        &mut g,
        Op::Binary {
            kind: BinaryOp::Add,
        },
        &[c, bias],
    );
    let t = node(
        &mut g,
        Op::Activation {
            kind: Activation::Tanh,
        },
        &[b],
    );
    g.set_outputs(&[sm, t]).unwrap();
    g
}

/// `g` compiled with every graph fusion (regions and fused matmuls run
/// their own kernels).
pub(super) fn compiled(g: &Graph) -> Compiled {
    compile_without(g, &CompileOptions::default(), &[]).unwrap_or_else(|e| panic!("{e}"))
}

/// `g` compiled without the fusions that merge elementwise chains into
/// regions and matmul epilogues into fused matmuls: the per-op kernels.
pub(super) fn compiled_per_op(g: &Graph) -> Compiled {
    let off = [
        "ir_elementwise_region".to_string(),
        "ir_fuse_matmul_bias_act".to_string(),
    ];
    compile_without(g, &CompileOptions::default(), &off).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn chain_matches_host_f32_and_f16() {
    for dt in [DType::F32, DType::F16] {
        for (rows, h) in [(1, 1), (3, 37), (5, 1000), (2, 33)] {
            let c = compiled_per_op(&chain(dt, rows, h));
            let plan = MetalPlan::build(&c.schedule);
            let st = plan.stats();
            // rms_norm, gelu, add, softmax, broadcast mul and tanh have
            // kernels; everything dependent, so a barrier between each
            assert!(st.dispatches >= 5, "{dt:?} {rows}x{h}: {st:?}\n{plan}");
            assert!(st.barriers + st.host >= st.dispatches - 1, "{st:?}\n{plan}");
            assert_same(&c, &plan, dt);
            // with the graph fusions: f32 gelu + add become a region
            let c = compiled(&chain(dt, rows, h));
            let plan = MetalPlan::build(&c.schedule);
            let region = plan.to_string().contains("region_f32");
            assert_eq!(region, dt == DType::F32, "{plan}");
            assert_same(&c, &plan, dt);
        }
    }
}

#[test]
fn layer_norm_casts_and_host_commands_match_host() {
    // x f32 → f16 → layer_norm → silu (in place or out) → f32, plus a
    // bias add and a sigmoid
    let (rows, h) = (7, 45);
    let mut g = Graph::new("ln");
    let x = node(
        &mut g,
        Op::Input {
            shape: Shape::of(&[rows, h], DType::F32),
        },
        &[],
    );
    let gm = node(
        &mut g,
        Op::Param {
            shape: Shape::of(&[h], DType::F16),
        },
        &[],
    );
    let bt = node(
        &mut g,
        Op::Param {
            shape: Shape::of(&[h], DType::F16),
        },
        &[],
    );
    let bias = node(
        &mut g,
        Op::Param {
            shape: Shape::of(&[h], DType::F32),
        },
        &[],
    );
    let xh = node(
        &mut g,
        Op::Cast {
            to: DType::F16,
            trunc: false,
        },
        &[x],
    );
    let ln = node(&mut g, Op::LayerNorm { eps: 1e-5 }, &[xh, gm, bt]);
    let si = node(
        &mut g,
        Op::Activation {
            kind: Activation::Silu,
        },
        &[ln],
    );
    let back = node(
        &mut g,
        Op::Cast {
            to: DType::F32,
            trunc: false,
        },
        &[si],
    );
    let out = node(
        &mut g,
        Op::Binary {
            kind: BinaryOp::Add,
        },
        &[back, bias],
    );
    let out = node(
        &mut g,
        Op::Activation {
            kind: Activation::Sigmoid,
        },
        &[out],
    );
    g.set_outputs(&[out]).unwrap();
    let c = compiled_per_op(&g);
    let plan = MetalPlan::build(&c.schedule);
    let st = plan.stats();
    assert!(st.dispatches >= 4 && st.host == 0, "{st:?}\n{plan}");
    for k in ["cast_f32_f16", "layer_norm_f16", "bias_add_f32"] {
        assert!(plan.to_string().contains(k), "{k}\n{plan}");
    }
    assert_same(&c, &plan, DType::F32);
    // fused: the bias add and sigmoid run as a region (the f32 bias param
    // is staged into the arena by a same-dtype cast, lowered to a copy
    // dispatch: region inputs are arena element indices)
    let c = compiled(&g);
    let plan = MetalPlan::build(&c.schedule);
    assert!(plan.to_string().contains("region_f32"), "{plan}");
    assert!(plan.to_string().contains("copy_u"), "{plan}");
    assert_eq!(plan.stats().host, 0, "{plan}");
    assert_same(&c, &plan, DType::F32);
}

#[test]
fn independent_branches_share_a_barrier_free_stretch() {
    // two activations of the same input do not conflict: no barrier
    // between them; their sum needs one
    let mut g = Graph::new("branches");
    let x = node(
        &mut g,
        Op::Input {
            shape: Shape::of(&[3, 50], DType::F32),
        },
        &[],
    );
    let a = node(
        &mut g,
        Op::Activation {
            kind: Activation::Exp,
        },
        &[x],
    );
    let b = node(
        &mut g,
        Op::Activation {
            kind: Activation::Sin,
        },
        &[x],
    );
    let s = node(
        &mut g,
        Op::Binary {
            kind: BinaryOp::Sub,
        },
        &[a, b],
    );
    g.set_outputs(&[s]).unwrap();
    let c = compiled_per_op(&g);
    let plan = MetalPlan::build(&c.schedule);
    assert_eq!(
        plan.stats(),
        PlanStats {
            dispatches: 3,
            barriers: 1,
            host: 0
        },
        "{plan}"
    );
    assert!(matches!(plan.commands[2], Command::Barrier), "{plan}");
    assert_same(&c, &plan, DType::F32);
}

#[test]
fn fused_residual_rms_norm_matches_host() {
    // x + r dies at the norm: the pass fuses it into one thunk, which
    // dispatches residual_rms_norm (f32 and f16, odd widths)
    for dt in [DType::F32, DType::F16] {
        for (rows, h) in [(3, 37), (2, 1000)] {
            let mut g = Graph::new("res");
            let x = node(
                &mut g,
                Op::Input {
                    shape: Shape::of(&[rows, h], dt),
                },
                &[],
            );
            let r = node(
                &mut g,
                Op::Input {
                    shape: Shape::of(&[rows, h], dt),
                },
                &[],
            );
            let gm = node(
                &mut g,
                Op::Param {
                    shape: Shape::of(&[h], dt),
                },
                &[],
            );
            let s = node(
                &mut g,
                Op::Binary {
                    kind: BinaryOp::Add,
                },
                &[x, r],
            );
            let n = node(&mut g, Op::RmsNorm { eps: 1e-6 }, &[s, gm]);
            g.set_outputs(&[n]).unwrap();
            let c = compiled(&g);
            let plan = MetalPlan::build(&c.schedule);
            let fn_name = format!(
                "residual_rms_norm_{}",
                if dt == DType::F16 { "f16" } else { "f32" }
            );
            assert!(
                plan.to_string().contains(&fn_name),
                "{}\n{plan}",
                c.schedule
            );
            assert_eq!(plan.stats().host, 0, "{plan}");
            assert_same(&c, &plan, dt);
        }
    }
}
