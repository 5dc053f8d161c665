//! Lowering: IR graph → thunk schedule over planned byte offsets.
//!
//! 1. Every node gets a static shape (symbolic dims bound from the compile
//!    options) and a location: constants in weights segment 0, param `i` in
//!    its own weights segment `1 + i` (so a weight can be bound zero-copy),
//!    states in the state buffer (declaration order, 64-byte aligned), views
//!    (reshape, same-dtype cast, contiguous narrow) aliasing their parent in
//!    the parent's buffer, everything else a planned arena value live from
//!    its node to its last use.
//! 2. Each node is lowered once in *measure* mode to learn which scratch
//!    buffers it needs (scratch lives only during its node).
//! 3. The planner places values and scratch ([`super::plan`]).
//! 4. Each node is lowered again in *emit* mode with real offsets; the
//!    family modules push thunks.
//!
//! Ops without a lowering yet fail with [`CompileError::Unsupported`] naming
//! the op and node — never a silent `Nop`.

mod attention;
mod backward;
pub(crate) mod conv;
mod elementwise;
pub mod in_place;
mod large_arena;
mod liveness;
mod matmul;
mod misc;
mod norm;
mod quant_formats;
mod reduce;
mod sequence;
mod shape;
mod signal;
mod splat;

use super::error::CompileError;
use super::plan::{plan, Value, ValueKind, DEFAULT_ALIGN};
use crate::passes::PassReport;
use crate::thunk::{tag_segment, tag_state, tag_weight, ByteRange, HalfFlag, Thunk, ThunkSchedule};
use rlx_ir::{DType, Dim, Graph, NodeId, Op, Shape};
use std::collections::HashMap;

/// Options of one compile.
#[derive(Debug, Clone, Default)]
pub struct CompileOptions {
    /// Values of symbolic dims (`{"seq": 128}`).
    pub dims: HashMap<String, usize>,
    /// Seed and stream offset of the random fills (kept in the schedule).
    pub rng: rlx_ir::RngOptions,
}

/// What a named leaf or output is bound to.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// Leaf or node name.
    pub name: String,
    /// Node id.
    pub node: NodeId,
    /// Tagged byte offset (a weights segment for params, the state buffer
    /// for states, see [`crate::thunk::offsets`]).
    pub offset: usize,
    /// Static shape.
    pub shape: Shape,
}

/// Where the memory planner put one arena value. Steps are the planner's:
/// the nodes of the graph it lowered (after the graph fusions), in order;
/// run inputs are written before step 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Step that defines the value (0 for run inputs).
    pub start: usize,
    /// Last step that reads it (the step count for graph outputs).
    pub end: usize,
    /// Last step its bytes are held: `end`, or later when the bytes are
    /// shared with a view or an in-place value read after it.
    pub held_until: usize,
    /// Raw byte offset in the arena.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// For a view or an in-place value: the (fused-graph) node whose bytes it uses.
    pub alias_of: Option<NodeId>,
}

/// A compiled graph: the schedule plus everything a device needs to run it.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// Thunks in order.
    pub schedule: ThunkSchedule,
    /// Arena bytes (planned values + scratch).
    pub arena_bytes: usize,
    /// Naive sum of all arena value sizes.
    pub naive_bytes: usize,
    /// Bytes of the state buffer (every state, declaration order, 64-byte
    /// aligned starts).
    pub state_bytes: usize,
    /// Byte length of every weights segment: segment 0 holds the
    /// compiler's constants, segment `1 + i` is param `i` (exactly its size).
    pub segment_bytes: Vec<usize>,
    /// Run-time inputs.
    pub inputs: Vec<Binding>,
    /// Weights to set before running.
    pub params: Vec<Binding>,
    /// Persistent state.
    pub states: Vec<Binding>,
    /// Graph outputs, in declaration order.
    pub outputs: Vec<Binding>,
    /// Constant data to copy into weights segment 0: (raw offset, bytes).
    pub constants: Vec<(usize, Vec<u8>)>,
    /// Static shape of every node.
    pub shapes: Vec<Shape>,
    /// Offset of every node's value (tagged for weights).
    pub offsets: Vec<usize>,
    /// Per node of the lowered (fused) graph, where the planner put its
    /// value in the arena; `None` for weights, constants, state and views of them.
    pub placements: Vec<Option<Placement>>,
    /// Per node of the graph given to the compiler, its node in the lowered
    /// graph (`None` when a graph fusion absorbed it; the identity for [`lower`]).
    pub node_map: Vec<Option<NodeId>>,
    /// What the fusion passes did (empty straight out of [`lower`]).
    pub passes: PassReport,
    /// Compile stages as `(name, start, seconds)`, start in seconds after
    /// the compile began (filled by [`super::compile`]; empty out of [`lower`]).
    pub stages: Vec<(&'static str, f64, f64)>,
}

impl Compiled {
    /// Total bytes of all weights segments (constants + params).
    pub fn weights_bytes(&self) -> usize {
        self.segment_bytes.iter().sum()
    }

    /// The ranges that must hold their values after a run: every graph
    /// output and every state.
    pub fn live_out(&self) -> Vec<ByteRange> {
        self.outputs
            .iter()
            .chain(&self.states)
            .map(|b| ByteRange::new(b.offset, b.shape.size_bytes().unwrap_or(0)))
            .collect()
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Loc {
    /// Weights segment, raw offset.
    Weights(usize, usize),
    /// State buffer, raw offset.
    State(usize),
    /// Arena value index (into the planner's value list).
    Arena(usize),
}

/// What a family lowering sees of the compile.
pub(crate) struct Ctx<'a> {
    graph: &'a Graph,
    shapes: &'a [Shape],
    offsets: &'a [usize],
    node: NodeId,
    measuring: bool,
    scratch_sizes: Vec<usize>,
    scratch_offsets: &'a [usize],
    thunks: &'a mut Vec<Thunk>,
    zeros: usize,
    neg_inf: usize,
    views: &'a [bool],
    rng: rlx_ir::RngOptions,
    /// Planned arena bytes (0 while measuring).
    arena_bytes: usize,
}

impl Ctx<'_> {
    /// The node being lowered.
    pub(crate) fn node(&self) -> &rlx_ir::Node {
        self.graph.node(self.node)
    }

    /// Static shape of operand `i`.
    pub(crate) fn in_shape(&self, i: usize) -> &Shape {
        &self.shapes[self.node().inputs[i]]
    }

    /// Static dims of operand `i`.
    pub(crate) fn in_dims(&self, i: usize) -> Vec<usize> {
        static_dims(self.in_shape(i))
    }

    /// Offset of operand `i`.
    pub(crate) fn input(&self, i: usize) -> usize {
        self.offsets[self.node().inputs[i]]
    }

    /// Number of operands.
    pub(crate) fn arity(&self) -> usize {
        self.node().inputs.len()
    }

    /// Static shape of the result.
    pub(crate) fn out_shape(&self) -> &Shape {
        &self.shapes[self.node]
    }

    /// Static dims of the result.
    pub(crate) fn out_dims(&self) -> Vec<usize> {
        static_dims(self.out_shape())
    }

    /// Offset of the result.
    pub(crate) fn out(&self) -> usize {
        self.offsets[self.node]
    }

    /// A scratch buffer of `bytes`, live only while this node runs.
    pub(crate) fn scratch(&mut self, bytes: usize) -> usize {
        let k = self.scratch_sizes.len();
        self.scratch_sizes.push(bytes);
        if self.measuring {
            0
        } else {
            debug_assert!(
                k < self.scratch_offsets.len(),
                "node {} asks for more scratch than it measured",
                self.node
            );
            self.scratch_offsets.get(k).copied().unwrap_or(0)
        }
    }

    /// A weights-buffer offset of zeros, at least as long as the widest row
    /// of any node in f64 (absent biases).
    pub(crate) fn zeros(&self) -> usize {
        self.zeros
    }

    /// A weights-buffer offset of one f32 `-inf` (the "masked" value when a
    /// binary mask is turned into an additive bias).
    pub(crate) fn neg_inf(&self) -> usize {
        self.neg_inf
    }

    /// Append a thunk.
    pub(crate) fn push(&mut self, t: impl Into<Thunk>) {
        if !self.measuring {
            self.thunks.push(t.into());
        }
    }

    /// True when this node's value aliases its first operand (no thunk needed).
    pub(crate) fn is_view(&self) -> bool {
        self.views.get(self.node).copied().unwrap_or(false)
    }

    /// An `Unsupported` error for this node.
    pub(crate) fn unsupported(&self, msg: impl Into<String>) -> CompileError {
        let n = self.node();
        CompileError::Unsupported {
            op: n.op.name().to_string(),
            msg: msg.into(),
            node: self.node,
            name: n.name.clone(),
        }
    }

    /// A `BadParam` error for this node: `param` is outside what the
    /// kernels support.
    pub(crate) fn bad_param(&self, param: &str, msg: impl Into<String>) -> CompileError {
        let n = self.node();
        CompileError::BadParam {
            op: n.op.name().to_string(),
            param: param.to_string(),
            msg: msg.into(),
            node: self.node,
            name: n.name.clone(),
        }
    }

    /// A size as the `u32` thunk fields need, or a `TooLarge` error.
    pub(crate) fn u32(&self, x: usize, what: &str) -> Result<u32, CompileError> {
        u32::try_from(x).map_err(|_| CompileError::TooLarge {
            op: self.node().op.name().to_string(),
            msg: format!("{what} = {x} exceeds 2^32"),
            node: self.node,
        })
    }

    /// The f32/f16 flag of a float dtype, or an `Unsupported` error.
    pub(crate) fn half_flag(&self, d: DType, what: &str) -> Result<HalfFlag, CompileError> {
        match d {
            DType::F32 => Ok(HalfFlag::F32),
            DType::F16 => Ok(HalfFlag::F16),
            other => Err(self.unsupported(format!(
                "{what} has dtype {other}; this kernel family runs f32 and f16 only"
            ))),
        }
    }
}

/// Smallest size of the shared zeros block in the weights buffer.
pub const ZEROS_BYTES: usize = 1 << 16;

pub(crate) fn static_dims(s: &Shape) -> Vec<usize> {
    s.dims.iter().map(|d| d.as_static().unwrap_or(0)).collect()
}

pub(crate) fn numel(d: &[usize]) -> usize {
    d.iter().product()
}

fn bind_shape(g: &Graph, id: NodeId, dims: &HashMap<String, usize>) -> Result<Shape, CompileError> {
    let n = g.node(id);
    let mut out = Vec::with_capacity(n.shape.rank());
    for d in &n.shape.dims {
        out.push(match d {
            Dim::Static(x) => Dim::Static(*x),
            Dim::Sym(s) => Dim::Static(*dims.get(s).ok_or_else(|| CompileError::UnboundDim {
                sym: s.clone(),
                node: id,
                name: n.name.clone(),
            })?),
        });
    }
    Ok(Shape::new(out, n.shape.dtype))
}

/// A view: the node's value is `parent`'s bytes from `byte_offset`.
fn view_of(g: &Graph, shapes: &[Shape], id: NodeId) -> Option<(NodeId, usize)> {
    let n = g.node(id);
    let first = *n.inputs.first()?;
    let src = &shapes[first];
    match &n.op {
        Op::Reshape { .. } => Some((first, 0)),
        Op::ScatterNd if shape::scatters_into_state(g, id) => Some((first, 0)),
        Op::Cast { to, trunc: false } if *to == src.dtype => Some((first, 0)),
        Op::Expand { .. } | Op::Transpose { .. } if shapes[id].dims == src.dims => {
            // identity expand / permutation that keeps every dim in place
            match &n.op {
                Op::Transpose { perm } if perm.iter().enumerate().any(|(i, &p)| i != p) => None,
                _ => Some((first, 0)),
            }
        }
        Op::Narrow { axis, start, .. } => {
            let d = static_dims(src);
            let ax = src.axis("narrow", *axis).ok()?;
            if d[..ax].iter().all(|&x| x == 1) {
                let inner: usize = d[ax + 1..].iter().product();
                Some((first, start * inner * src.dtype.size_bytes()))
            } else {
                None
            }
        }
        _ => None,
    }
}

fn align(x: usize) -> usize {
    x.div_ceil(DEFAULT_ALIGN) * DEFAULT_ALIGN
}

/// Encode constant values as bytes of `dtype`.
fn constant_bytes(values: &[f64], n: usize, dtype: DType) -> Vec<u8> {
    let mut out = Vec::with_capacity(n * dtype.size_bytes());
    for i in 0..n {
        let v = if values.len() == 1 {
            values[0]
        } else {
            values[i]
        };
        match dtype {
            DType::F32 => out.extend_from_slice(&(v as f32).to_le_bytes()),
            DType::F64 => out.extend_from_slice(&v.to_le_bytes()),
            DType::F16 => out.extend_from_slice(&half::f16::from_f64(v).to_le_bytes()),
            DType::BF16 => out.extend_from_slice(&half::bf16::from_f64(v).to_le_bytes()),
            DType::I8 => out.push(v as i8 as u8),
            DType::U8 => out.push(v as u8),
            DType::Bool => out.push((v != 0.0) as u8),
            DType::I16 => out.extend_from_slice(&(v as i16).to_le_bytes()),
            DType::I32 => out.extend_from_slice(&(v as i32).to_le_bytes()),
            DType::U32 => out.extend_from_slice(&(v as u32).to_le_bytes()),
            DType::I64 => out.extend_from_slice(&(v as i64).to_le_bytes()),
            DType::C64 => {
                out.extend_from_slice(&(v as f32).to_le_bytes());
                out.extend_from_slice(&0f32.to_le_bytes());
            }
        }
    }
    out
}

fn lower_node(ctx: &mut Ctx<'_>) -> Result<(), CompileError> {
    use rlx_ir::op::OpFamily;
    if ctx.is_view() && !shape::scatters_into_state(ctx.graph, ctx.node) {
        return Ok(()); // the planner aliased it: no data moves
    }
    let op = ctx.node().op.clone();
    match op.family() {
        OpFamily::Leaf => Ok(()),
        OpFamily::Elementwise => elementwise::lower(ctx, &op),
        OpFamily::MatMul => matmul::lower(ctx, &op),
        OpFamily::Norm => norm::lower(ctx, &op),
        OpFamily::Attention => attention::lower(ctx, &op),
        OpFamily::Shape => shape::lower(ctx, &op),
        OpFamily::Reduce => reduce::lower(ctx, &op),
        OpFamily::Conv => conv::lower(ctx, &op),
        OpFamily::Sequence => sequence::lower(ctx, &op),
        OpFamily::Misc => misc::lower(ctx, &op),
        OpFamily::Backward if matches!(op, Op::SpdBackward { .. }) => misc::lower(ctx, &op),
        OpFamily::Backward if matches!(op, Op::GaussianSplatRenderBackward { .. }) => {
            splat::lower(ctx, &op)
        }
        OpFamily::Backward => backward::lower(ctx, &op),
        OpFamily::Signal => signal::lower(ctx, &op),
    }
}

/// Lower `graph` into a schedule over a planned arena (no fusion passes;
/// [`crate::compile::compile`] runs those after this), with activations
/// planned in place where their operand dies ([`in_place`]).
pub fn lower(graph: &Graph, opts: &CompileOptions) -> Result<Compiled, CompileError> {
    lower_with(graph, opts, true).map(|(c, _)| c)
}

/// [`lower`], with the in-place planning of activations on or off; also
/// returns how many activations were planned in place.
pub fn lower_with(
    graph: &Graph,
    opts: &CompileOptions,
    in_place: bool,
) -> Result<(Compiled, usize), CompileError> {
    rlx_ir::verify::verify(graph)?;
    let n = graph.len();
    let shapes: Vec<Shape> = (0..n)
        .map(|i| bind_shape(graph, i, &opts.dims))
        .collect::<Result<_, _>>()?;

    let last_use = liveness::last_uses(graph);

    // Locations. A block of zeros sits at weights offset 0 (absent biases);
    // it is as long as the widest row of any node.
    let widest = shapes
        .iter()
        .map(|s| static_dims(s).last().copied().unwrap_or(1) * 8)
        .max()
        .unwrap_or(0);
    let zeros_bytes = align(widest.max(ZEROS_BYTES));
    // One aligned block of f32 -inf after the zeros.
    let neg_inf = zeros_bytes;
    let mut weights_top = align(neg_inf + 4);
    let mut segment_bytes = vec![0usize];
    let mut state_top = 0usize;
    let mut locs: Vec<Loc> = Vec::with_capacity(n);
    let mut views = vec![false; n];
    let mut values: Vec<Value> = Vec::new();
    let mut value_node: Vec<NodeId> = Vec::new();
    let mut constants = vec![(neg_inf, f32::NEG_INFINITY.to_le_bytes().to_vec())];
    for i in 0..n {
        let node = graph.node(i);
        let bytes = shapes[i].size_bytes().unwrap_or(0);
        let loc = match &node.op {
            Op::Param { .. } => {
                segment_bytes.push(bytes);
                Loc::Weights(segment_bytes.len() - 1, 0)
            }
            Op::State { .. } => {
                let off = state_top;
                state_top = align(state_top + bytes);
                Loc::State(off)
            }
            Op::Constant { values: vals, .. } => {
                let off = weights_top;
                weights_top = align(weights_top + bytes);
                let count = shapes[i].numel().unwrap_or(0);
                constants.push((off, constant_bytes(vals, count, shapes[i].dtype)));
                Loc::Weights(0, off)
            }
            _ => match view_of(graph, &shapes, i) {
                Some((parent, byte_off)) => {
                    views[i] = true;
                    match locs[parent] {
                        Loc::Weights(seg, off) => Loc::Weights(seg, off + byte_off),
                        Loc::State(off) => Loc::State(off + byte_off),
                        Loc::Arena(pv) => {
                            values.push(Value {
                                size: bytes,
                                start: i,
                                end: last_use[i],
                                kind: ValueKind::View {
                                    parent: pv,
                                    byte_offset: byte_off,
                                },
                            });
                            value_node.push(i);
                            Loc::Arena(values.len() - 1)
                        }
                    }
                }
                None => {
                    let start = match node.op {
                        Op::Input { .. } => 0,
                        _ => i,
                    };
                    values.push(Value {
                        size: bytes,
                        start,
                        end: last_use[i].max(start),
                        kind: ValueKind::Planned,
                    });
                    value_node.push(i);
                    Loc::Arena(values.len() - 1)
                }
            },
        };
        locs.push(loc);
    }
    segment_bytes[0] = weights_top;
    let in_place_count = if in_place {
        in_place::plan_in_place(graph, &locs, &mut values, &value_node)
    } else {
        0
    };

    // Measure scratch needs.
    let mut scratch: Vec<Vec<usize>> = vec![Vec::new(); n];
    {
        // Measure with every offset that is known before planning: weights
        // and state tags, and a view's byte offset inside its root (planned
        // values sit at 0, which has the planner's alignment). Lowerings that
        // branch on where an operand lives or how it is aligned (regions copy
        // weights and unaligned views into scratch) then ask for the same
        // scratch here as when emitting.
        let mut root_off = vec![0usize; values.len()];
        for (v, val) in values.iter().enumerate() {
            match val.kind {
                ValueKind::View {
                    parent,
                    byte_offset,
                } => root_off[v] = root_off[parent] + byte_offset,
                ValueKind::InPlace { parent } => root_off[v] = root_off[parent],
                ValueKind::Planned => {}
            }
        }
        let fake_offsets: Vec<usize> = locs
            .iter()
            .map(|l| match *l {
                Loc::Weights(seg, off) => tag_segment(seg, off),
                Loc::State(off) => tag_state(off),
                Loc::Arena(v) => root_off[v],
            })
            .collect();
        let mut sink = Vec::new();
        for (i, slot) in scratch.iter_mut().enumerate() {
            let mut ctx = Ctx {
                graph,
                shapes: &shapes,
                offsets: &fake_offsets,
                node: i,
                measuring: true,
                scratch_sizes: Vec::new(),
                scratch_offsets: &[],
                thunks: &mut sink,
                zeros: tag_weight(0),
                neg_inf: tag_weight(neg_inf),
                views: &views,
                rng: opts.rng,
                arena_bytes: 0,
            };
            lower_node(&mut ctx)?;
            *slot = ctx.scratch_sizes;
        }
    }
    let mut scratch_values: Vec<Vec<usize>> = vec![Vec::new(); n];
    for i in 0..n {
        for &bytes in &scratch[i] {
            values.push(Value {
                size: bytes,
                start: i,
                end: i,
                kind: ValueKind::Planned,
            });
            scratch_values[i].push(values.len() - 1);
        }
    }

    let mplan = plan(&values, DEFAULT_ALIGN)?;
    let placements: Vec<Option<Placement>> = locs
        .iter()
        .map(|l| match *l {
            Loc::Arena(v) => Some(Placement {
                start: values[v].start,
                end: values[v].end,
                held_until: mplan.held_until[v],
                offset: mplan.offsets[v],
                size: values[v].size,
                alias_of: match values[v].kind {
                    ValueKind::View { parent, .. } | ValueKind::InPlace { parent } => {
                        Some(value_node[parent])
                    }
                    ValueKind::Planned => None,
                },
            }),
            _ => None,
        })
        .collect();
    let offsets: Vec<usize> = locs
        .iter()
        .map(|l| match *l {
            Loc::Weights(seg, off) => tag_segment(seg, off),
            Loc::State(off) => tag_state(off),
            Loc::Arena(v) => mplan.offsets[v],
        })
        .collect();

    // Emit.
    let mut thunks = Vec::new();
    for (i, svals) in scratch_values.iter().enumerate() {
        let soffs: Vec<usize> = svals.iter().map(|&v| mplan.offsets[v]).collect();
        let mut ctx = Ctx {
            graph,
            shapes: &shapes,
            offsets: &offsets,
            node: i,
            measuring: false,
            scratch_sizes: Vec::new(),
            scratch_offsets: &soffs,
            thunks: &mut thunks,
            zeros: tag_weight(0),
            neg_inf: tag_weight(neg_inf),
            views: &views,
            rng: opts.rng,
            arena_bytes: mplan.arena_bytes,
        };
        lower_node(&mut ctx)?;
    }

    let binding = |i: NodeId| Binding {
        name: graph.node(i).name.clone(),
        node: i,
        offset: offsets[i],
        shape: shapes[i].clone(),
    };
    let mut inputs = Vec::new();
    let mut params = Vec::new();
    let mut states = Vec::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        match node.op {
            Op::Input { .. } => inputs.push(binding(i)),
            Op::Param { .. } => params.push(binding(i)),
            Op::State { .. } => states.push(binding(i)),
            _ => {}
        }
    }
    let outputs = graph.outputs.iter().map(|&o| binding(o)).collect();
    let compiled = Compiled {
        schedule: ThunkSchedule {
            thunks,
            rng: opts.rng,
        },
        arena_bytes: mplan.arena_bytes,
        naive_bytes: mplan.naive_bytes,
        state_bytes: state_top,
        segment_bytes,
        inputs,
        params,
        states,
        outputs,
        constants,
        shapes,
        offsets,
        placements,
        node_map: (0..n).map(Some).collect(),
        passes: PassReport::default(),
        stages: Vec::new(),
    };
    Ok((compiled, in_place_count))
}

/// Operand `i` as an i32 index buffer, converting other integer dtypes into scratch.
pub(crate) fn index_i32(ctx: &mut Ctx<'_>, i: usize) -> Result<usize, CompileError> {
    let from = ctx.in_shape(i).dtype;
    if from == DType::I32 {
        return Ok(ctx.input(i));
    }
    if !from.is_int() {
        return Err(ctx.unsupported(format!("index operand {i} has dtype {from}")));
    }
    let n = numel(&ctx.in_dims(i));
    let tmp = ctx.scratch(n * 4);
    let len = ctx.u32(n, "indices")?;
    elementwise::push_cast(ctx, ctx.input(i), from, tmp, DType::I32, len);
    Ok(tmp)
}

/// Operand `i` converted to dtype `to` (scratch when it differs).
pub(crate) fn converted(ctx: &mut Ctx<'_>, i: usize, to: DType) -> Result<usize, CompileError> {
    let from = ctx.in_shape(i).dtype;
    if from == to {
        return Ok(ctx.input(i));
    }
    let n = numel(&ctx.in_dims(i));
    let tmp = ctx.scratch(n * to.size_bytes());
    let len = ctx.u32(n, "elements")?;
    elementwise::push_cast(ctx, ctx.input(i), from, tmp, to, len);
    Ok(tmp)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod layout_tests;

#[cfg(test)]
mod sequence_tests;

#[cfg(test)]
mod quant_formats_tests;
