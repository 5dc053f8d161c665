//! Decode-layer fusion of the Metal plan: runs of decode thunks that
//! become one dispatch each, so a transformer layer's decode step is a few
//! dispatches rather than one per thunk. The host schedule is untouched
//! (the host runs every thunk as before); only [`super::plan::MetalPlan`]
//! emits a group's dispatch at its first member's place and nothing for
//! the other members.
//!
//! The groups (f32 activations, one token, GGUF weights):
//!
//! * **q / k / v projection** (`qkv_head_<type>`): `[post-norm + residual
//!   add →] RMSNorm →` GEMV `[→ bias] [→ per-head RMSNorm] [→ RoPE] [→
//!   ScatterND into the KV cache (f32, or f16 rounded on write)]`. Every GEMV (and gate / up pair) reading
//!   one RMSNorm's output takes the norm as its prologue, so the norm
//!   vanishes and q, k and v are three independent dispatches sharing one
//!   barrier interval; the first of them also writes the residual stream
//!   when a Gemma-style post-norm + add is folded in.
//! * **gate / up** (`norm_gate_up_<type>`): `[post-norm + add →] RMSNorm →`
//!   the fused gate·up MLP GEMV (SwiGLU or tanh-GELU).
//! * **output projection + residual** (`down_residual_<type>`): GEMV →
//!   add of the residual.
//! * **post-norm + residual** (`norm_residual_f32`): RMSNorm → add
//!   (Gemma3's post-attention / post-FFN norms) where no prologue took it.
//!
//! A folded post-norm + add reads the norm's input and the residual in
//! every threadgroup of every dispatch sharing the pre-norm, while one of
//! them writes the sum and all write their results: the planner keeps both
//! inputs live through those GEMVs' epilogues
//! (`compile::lower::keep_post_norm_inputs`); before, it put the sum over
//! the norm's input and the q / k / v results over the residual, and the
//! check below rejected the folds as the races they were.
//!
//! Every candidate is checked by [`Flow`] (see `fuse_check`): a group is
//! kept only if the fused order reads and leaves exactly what the schedule
//! does; candidates sharing a norm are kept or dropped together.

use super::args::{HeadGemvArgs, KernelArgs, MlpArgs};
use super::args::{
    HG_BIAS, HG_CACHE, HG_CACHE_F16, HG_HNORM, HG_INTERLEAVED, HG_NORM, HG_POST, HG_RAW, HG_ROPE,
    HG_WRITE_S,
};
use super::fuse_check::{Flow, GroupFlow};
use super::kernels::Family;
use super::lower::{kernel, row_threads};
use super::plan::{BufferBinding, Dispatch};
use crate::thunk::indexing::IndexingThunk;
use crate::thunk::{raw_offset, ByteRange, HalfFlag, Thunk};
use rlx_ir::op::BinaryOp;
use rlx_ir::{DType, GgmlType, QuantScheme};

/// The name `RLX_DISABLE_PASS` knows this fusion by.
pub const NAME: &str = "metal_decode_fusion";

/// True when `RLX_DISABLE_PASS` names [`NAME`].
pub(crate) fn disabled() -> bool {
    rlx_ir::env::list("RLX_DISABLE_PASS")
        .iter()
        .any(|p| p == NAME)
}

/// Largest GEMV input staged in threadgroup memory (`HG_MAXK`).
const MAX_K: u32 = 4096;
/// Largest head (rows per `qkv_head_*` threadgroup, `HG_MAXD`).
const MAX_D: u32 = 512;
/// Threads of the `qkv_head_*` / `norm_gate_up_*` threadgroups.
const THREADS: u32 = 256;
/// Rows per `norm_gate_up_*` threadgroup (`NG_ROWS`).
const GATE_UP_ROWS: u32 = 32;
/// Rows per `qkv_head_*` threadgroup when no head structure is known.
const PLAIN_ROWS: u32 = 32;

/// One fused dispatch and the thunks it stands for.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    /// Member thunks, ascending (the first is where it runs).
    pub members: Vec<usize>,
    /// `(member, write slot)` the dispatch writes.
    pub outputs: Vec<(usize, usize)>,
    /// The kernel dispatch.
    pub dispatch: Dispatch,
    /// Bytes read from outside the group (for barrier placement).
    pub reads: Vec<ByteRange>,
    /// Bytes written.
    pub writes: Vec<ByteRange>,
}

/// A post-norm and its residual add feeding a pre-norm (`HG_POST`).
#[derive(Clone, Copy)]
struct Post {
    /// The post-norm (`None`: a plain residual add, `HG_RAW`).
    norm: Option<usize>,
    add: usize,
    /// The post-norm's input.
    y: usize,
    g: usize,
    b: usize,
    eps: f32,
    /// The add's output (the residual stream).
    s_out: usize,
}

/// An RMSNorm (rows = 1) folded into its readers' prologue.
#[derive(Clone, Copy)]
struct Pre {
    norm: usize,
    /// The GEMV input before the norm (the residual with `post`).
    x: usize,
    g: usize,
    b: usize,
    eps: f32,
    h: u32,
    post: Option<Post>,
}

impl Pre {
    fn members(&self) -> Vec<usize> {
        let mut m = vec![self.norm];
        if let Some(p) = self.post {
            m.push(p.add);
            m.extend(p.norm);
        }
        m
    }

    /// The prologue flags; only the `writer` among the dispatches sharing
    /// this norm writes the residual stream (`HG_WRITE_S`).
    fn flags(&self, writer: bool) -> u32 {
        let write = if writer { HG_WRITE_S } else { 0 };
        match self.post {
            None => HG_NORM,
            Some(p) if p.norm.is_none() => HG_NORM | HG_POST | HG_RAW | write,
            Some(_) => HG_NORM | HG_POST | write,
        }
    }

    /// x, g, b, y, pg, pb, s_out bindings (unused ones point at x / dst).
    fn bindings(&self, dst: usize) -> [usize; 7] {
        match self.post {
            Some(p) => [self.x, self.g, self.b, p.y, p.g, p.b, p.s_out],
            None => [self.x, self.g, self.b, self.x, self.x, self.x, dst],
        }
    }
}

fn f32_at(off: usize) -> bool {
    raw_offset(off).is_multiple_of(4)
}

fn gguf(scheme: QuantScheme, k: u32) -> Option<(GgmlType, u32)> {
    let QuantScheme::Gguf(ty) = scheme else {
        return None;
    };
    if k == 0 || k > MAX_K || !(k as usize).is_multiple_of(ty.block_size()) {
        return None;
    }
    Some((ty, u32::try_from(ty.row_bytes(k as usize)?).ok()?))
}

fn range(off: usize, elems: u32) -> ByteRange {
    ByteRange::new(off, (elems as usize).saturating_mul(4))
}

/// `BinaryFull` add of f32: `(lhs, rhs, dst, len)`.
fn add_of(t: &Thunk) -> Option<(usize, usize, usize, u32)> {
    match t {
        Thunk::BinaryFull(a) if a.op == BinaryOp::Add && a.dt == HalfFlag::F32 => {
            Some((a.lhs, a.rhs, a.dst, a.len))
        }
        _ => None,
    }
}

/// The single reader of `thunk`'s first write, if there is exactly one.
fn sole_reader(flow: &Flow, thunk: usize) -> Option<usize> {
    match flow.readers(thunk, 0)[..] {
        [j] => Some(j),
        _ => None,
    }
}

/// Thunk `i` as a foldable pre-norm, with the post-norm + add before it
/// when `with_post` and the schedule has one.
fn pre_norm(thunks: &[Thunk], flow: &Flow, i: usize, with_post: bool) -> Option<Pre> {
    let Thunk::RmsNorm(n) = &thunks[i] else {
        return None;
    };
    if n.rows != 1 || n.dt != HalfFlag::F32 || n.h == 0 || n.h > MAX_K {
        return None;
    }
    let mut pre = Pre {
        norm: i,
        x: n.src,
        g: n.g,
        b: n.b,
        eps: n.eps,
        h: n.h,
        post: None,
    };
    if !with_post {
        return Some(pre);
    }
    let [Some(a)] = flow.producers(i, 0)[..] else {
        return None;
    };
    let (lhs, rhs, dst, len) = add_of(&thunks[a])?;
    if dst != n.src || len != n.h {
        return None;
    }
    for (slot, (opnd, res)) in [(lhs, rhs), (rhs, lhs)].into_iter().enumerate() {
        let [Some(p)] = flow.producers(a, slot)[..] else {
            continue;
        };
        if res == opnd || sole_reader(flow, p) != Some(a) {
            continue;
        }
        let post = match &thunks[p] {
            Thunk::RmsNorm(pn) if pn.rows == 1 && pn.h == n.h && pn.dt == HalfFlag::F32 => {
                if pn.dst != opnd {
                    continue;
                }
                Post {
                    norm: Some(p),
                    add: a,
                    y: pn.src,
                    g: pn.g,
                    b: pn.b,
                    eps: pn.eps,
                    s_out: dst,
                }
            }
            // a plain residual add of whatever produced the operand
            _ => Post {
                norm: None,
                add: a,
                y: opnd,
                g: opnd,
                b: opnd,
                eps: 0.0,
                s_out: dst,
            },
        };
        pre.x = res;
        pre.post = Some(post);
        return Some(pre);
    }
    None
}

/// The group of thunks `members` (outputs `outputs`) running `dispatch`.
fn group(
    thunks: &[Thunk],
    flow: &Flow,
    mut members: Vec<usize>,
    outputs: Vec<(usize, usize)>,
    dispatch: Dispatch,
) -> Group {
    members.sort_unstable();
    members.dedup();
    let reads = flow.external_reads(thunks, &members);
    let writes = outputs
        .iter()
        .filter_map(|&(m, s)| thunks[m].io().writes.get(s).copied())
        .collect();
    Group {
        members,
        outputs,
        dispatch,
        reads,
        writes,
    }
}

fn head_dispatch(
    anchor: usize,
    name: String,
    args: &HeadGemvArgs,
    offs: &[usize],
    groups: u32,
) -> Option<Dispatch> {
    if !offs.iter().all(|&o| f32_at(o)) || groups == 0 {
        return None;
    }
    Some(Dispatch {
        thunk: anchor,
        kernel: kernel(Family::Quant, name),
        args: args.as_bytes().to_vec(),
        bindings: offs.iter().map(|&o| BufferBinding::of(o)).collect(),
        grid: [groups, 1, 1],
        threadgroup: [THREADS, 1, 1],
        threadgroup_memory: Vec::new(),
    })
}

/// GEMV `gi` with `pre` as prologue and its bias / head-norm / RoPE /
/// cache-append readers as epilogue (`qkv_head_*`).
fn qkv(thunks: &[Thunk], flow: &Flow, gi: usize, pre: Option<Pre>, writer: bool) -> Option<Group> {
    let Thunk::DequantMatMulGguf(d) = &thunks[gi] else {
        return None;
    };
    if d.m != 1 || d.x_f16 || d.dst_f16 || d.n == 0 {
        return None;
    }
    let (ty, row_bytes) = gguf(d.scheme, d.k)?;
    if pre.is_some_and(|p| p.h != d.k) {
        return None;
    }
    let mut members = pre.map(|p| p.members()).unwrap_or_default();
    members.push(gi);
    let mut a = HeadGemvArgs {
        k: d.k,
        n: d.n,
        row_bytes,
        flags: pre.map_or(0, |p| p.flags(writer)),
        eps: pre.map_or(0.0, |p| p.eps),
        post_eps: pre.and_then(|p| p.post).map_or(0.0, |p| p.eps),
        ..HeadGemvArgs::default()
    };
    // bias, head-norm gamma / beta, cos, sin, idx (unused: x)
    let x0 = pre.map_or(d.x, |p| p.x);
    let mut epi = [x0; 6];
    let (mut last, mut cur, mut dst, mut head) = (gi, d.dst, d.dst, None::<u32>);
    while let Some(j) = sole_reader(flow, last) {
        let f = a.flags;
        match &thunks[j] {
            Thunk::BiasAdd(b)
                if f & (HG_BIAS | HG_HNORM | HG_ROPE) == 0
                    && (b.m, b.n, b.dt, b.src) == (1, d.n, HalfFlag::F32, cur) =>
            {
                a.flags |= HG_BIAS;
                epi[0] = b.bias;
                cur = b.dst;
            }
            Thunk::RmsNorm(r)
                if f & (HG_HNORM | HG_ROPE) == 0
                    && r.dt == HalfFlag::F32
                    && r.src == cur
                    && r.h > 0
                    && r.rows.checked_mul(r.h) == Some(d.n) =>
            {
                a.flags |= HG_HNORM;
                (epi[1], epi[2], a.head_eps, head) = (r.g, r.b, r.eps, Some(r.h));
                cur = r.dst;
            }
            Thunk::Rope(r)
                if f & HG_ROPE == 0
                    && r.dt == HalfFlag::F32
                    && (r.src, r.batch, r.seq, r.hidden) == (cur, 1, 1, d.n)
                    && (r.src_row_stride == 0 || r.src_row_stride == r.hidden)
                    && r.head_dim > 0
                    && d.n.is_multiple_of(r.head_dim)
                    && r.n_rot <= r.head_dim
                    && r.n_rot.is_multiple_of(2)
                    && head.is_none_or(|h| h == r.head_dim) =>
            {
                a.flags |= HG_ROPE | if r.interleaved { HG_INTERLEAVED } else { 0 };
                (epi[3], epi[4], a.n_rot, head) = (r.cos, r.sin, r.n_rot, Some(r.head_dim));
                cur = r.dst;
            }
            Thunk::CpuIndexing(c) => {
                let IndexingThunk::ScatterNd {
                    data,
                    indices,
                    updates,
                    dst: sd,
                    data_dims,
                    indices_dims,
                    dtype,
                    upd_dtype,
                } = &c.thunk
                else {
                    break;
                };
                let ok = *updates == cur
                    && data == sd
                    && *upd_dtype == DType::F32
                    && matches!(dtype, DType::F32 | DType::F16)
                    && indices_dims[..] == [1, 1]
                    && data_dims.len() == 2
                    && data_dims[1] == d.n as usize;
                if !ok {
                    break;
                }
                a.flags |= HG_CACHE
                    | if *dtype == DType::F16 {
                        HG_CACHE_F16
                    } else {
                        0
                    };
                a.cache_rows = u32::try_from(data_dims[0]).ok()?;
                a.cache_row = d.n;
                epi[5] = *indices;
                dst = *sd;
                members.push(j);
                last = j;
                break;
            }
            _ => break,
        }
        members.push(j);
        last = j;
        dst = cur;
    }
    // a head norm without RoPE is a whole-vector norm (Gemma's post-norm),
    // not a head structure: leave it to the other groups
    if (pre.is_none() && last == gi) || (a.flags & HG_HNORM != 0 && a.flags & HG_ROPE == 0) {
        return None;
    }
    let rows = head.unwrap_or(if d.n.is_multiple_of(PLAIN_ROWS) {
        PLAIN_ROWS
    } else {
        d.n
    });
    if rows > MAX_D || !d.n.is_multiple_of(rows) {
        return None;
    }
    a.head_dim = rows;
    let mut outputs = vec![(last, 0)];
    let pro = match pre {
        Some(p) => {
            if let (true, Some(post)) = (writer, p.post) {
                outputs.push((post.add, 0));
            }
            p.bindings(dst)
        }
        None => [d.x, d.x, d.x, d.x, d.x, d.x, dst],
    };
    // only the writer writes s_out (HG_WRITE_S): the others leave it unbound (dst)
    let mut pro = pro;
    if !writer {
        pro[6] = dst;
    }
    let name = format!("qkv_head_{}", ty.name().to_lowercase());
    let mut offs = pro.to_vec();
    offs.push(d.w_q);
    offs.extend(epi);
    offs.push(dst);
    // the weights need no alignment
    let mut dispatch = head_dispatch(members[0], name, &a, &[], d.n / rows)?;
    if !offs.iter().enumerate().all(|(i, &o)| i == 7 || f32_at(o)) {
        return None;
    }
    dispatch.bindings = offs.iter().map(|&o| BufferBinding::of(o)).collect();
    let g = group(thunks, flow, members, outputs, dispatch);
    dispatch_safe(&g).then_some(g)
}

/// A `qkv_head_*` / `norm_gate_up_*` dispatch is not atomic: every
/// threadgroup stages the whole input, and threadgroups that finish early
/// write their rows of `dst` (threadgroup 0 also the residual stream)
/// while others still read. So nothing the group writes may overlap what
/// it reads from outside (e.g. a GEMV writing over its own pre-norm's
/// input, which the schedule allows since the norm ran before). [`Flow`]
/// treats a group as one step and cannot see this.
fn dispatch_safe(g: &Group) -> bool {
    !g.writes
        .iter()
        .any(|w| g.reads.iter().any(|r| r.overlaps(w)))
}

/// The fused gate·up MLP thunk `gi` with `pre` as prologue.
fn gate_up(thunks: &[Thunk], flow: &Flow, gi: usize, pre: Pre, writer: bool) -> Option<Group> {
    let (x, gw, uw, dst, k, n, scheme, op) = match &thunks[gi] {
        Thunk::FusedMlpGateUpSwiGLU(f) if !f.x_f16 && !f.dst_f16 => {
            (f.x, f.gate_w, f.up_w, f.dst, f.k, f.n, f.scheme, 0)
        }
        Thunk::FusedMlpGateUpGelu(f) => (f.x, f.gate_w, f.up_w, f.dst, f.k, f.n, f.scheme, 1),
        _ => return None,
    };
    let _ = x;
    let (ty, row_bytes) = gguf(scheme, k)?;
    if pre.h != k || n == 0 {
        return None;
    }
    let a = HeadGemvArgs {
        k,
        n,
        row_bytes,
        flags: pre.flags(writer),
        op,
        eps: pre.eps,
        post_eps: pre.post.map_or(0.0, |p| p.eps),
        ..HeadGemvArgs::default()
    };
    let mut pro = pre.bindings(dst);
    if !writer {
        pro[6] = dst;
    }
    if !pro.iter().chain([&dst]).all(|&o| f32_at(o)) {
        return None;
    }
    let name = format!("norm_gate_up_{}", ty.name().to_lowercase());
    let mut dispatch = head_dispatch(pre.norm, name, &a, &[], n.div_ceil(GATE_UP_ROWS))?;
    let mut offs = pro.to_vec();
    offs.extend([gw, uw, dst]);
    dispatch.bindings = offs.iter().map(|&o| BufferBinding::of(o)).collect();
    let mut members = pre.members();
    members.push(gi);
    let mut outputs = vec![(gi, 0)];
    if let (true, Some(post)) = (writer, pre.post) {
        outputs.push((post.add, 0));
    }
    let g = group(thunks, flow, members, outputs, dispatch);
    dispatch_safe(&g).then_some(g)
}

/// GEMV `gi` whose only reader adds it to a residual (`down_residual_*`).
fn gemv_residual(thunks: &[Thunk], flow: &Flow, gi: usize) -> Option<Group> {
    let Thunk::DequantMatMulGguf(d) = &thunks[gi] else {
        return None;
    };
    if d.m != 1 || d.x_f16 || d.dst_f16 {
        return None;
    }
    let (ty, row_bytes) = gguf(d.scheme, d.k)?;
    let ai = sole_reader(flow, gi)?;
    let (lhs, rhs, dst, len) = add_of(&thunks[ai])?;
    let res = match (lhs == d.dst, rhs == d.dst) {
        (true, false) => rhs,
        (false, true) => lhs,
        _ => return None,
    };
    let (xr, dr, rr) = (range(d.x, d.k), range(dst, d.n), range(res, d.n));
    if len != d.n || xr.overlaps(&dr) || (rr.overlaps(&dr) && res != dst) {
        return None;
    }
    if ![d.x, res, dst].iter().all(|&o| f32_at(o)) {
        return None;
    }
    let a = MlpArgs {
        k: d.k,
        n: d.n,
        row_bytes,
        ..MlpArgs::default()
    };
    let dispatch = Dispatch {
        thunk: gi,
        kernel: kernel(
            Family::Quant,
            format!("down_residual_{}", ty.name().to_lowercase()),
        ),
        args: a.as_bytes().to_vec(),
        bindings: [d.x, d.w_q, res, dst].map(BufferBinding::of).to_vec(),
        grid: [d.n.div_ceil(4), 1, 1],
        threadgroup: [128, 1, 1],
        threadgroup_memory: Vec::new(),
    };
    Some(group(thunks, flow, vec![gi, ai], vec![(ai, 0)], dispatch))
}

/// RMSNorm `pi` whose only reader adds it to a residual (`norm_residual_f32`).
fn norm_residual(thunks: &[Thunk], flow: &Flow, pi: usize) -> Option<Group> {
    let Thunk::RmsNorm(n) = &thunks[pi] else {
        return None;
    };
    if n.dt != HalfFlag::F32 || n.rows == 0 || n.h == 0 {
        return None;
    }
    let ai = sole_reader(flow, pi)?;
    let (lhs, rhs, dst, len) = add_of(&thunks[ai])?;
    let res = match (lhs == n.dst, rhs == n.dst) {
        (true, false) => rhs,
        (false, true) => lhs,
        _ => return None,
    };
    let total = n.rows.checked_mul(n.h)?;
    let dr = range(dst, total);
    let clash = |o: usize| range(o, total).overlaps(&dr) && o != dst;
    if len != total || clash(n.src) || clash(res) {
        return None;
    }
    if ![n.src, res, n.g, n.b, dst].iter().all(|&o| f32_at(o)) {
        return None;
    }
    let a = HeadGemvArgs {
        k: n.h,
        post_eps: n.eps,
        ..HeadGemvArgs::default()
    };
    let dispatch = Dispatch {
        thunk: pi,
        kernel: kernel(Family::NormFused, "norm_residual_f32".into()),
        args: a.as_bytes().to_vec(),
        bindings: [n.src, res, n.g, n.b, dst].map(BufferBinding::of).to_vec(),
        grid: [n.rows, 1, 1],
        threadgroup: [row_threads(n.h), 1, 1],
        threadgroup_memory: Vec::new(),
    };
    Some(group(thunks, flow, vec![pi, ai], vec![(ai, 0)], dispatch))
}

/// The groups folding pre-norm `i` into all its readers (`None` when one
/// of them cannot take it).
fn norm_component(thunks: &[Thunk], flow: &Flow, i: usize, with_post: bool) -> Option<Vec<Group>> {
    let pre = pre_norm(thunks, flow, i, with_post)?;
    let readers = flow.readers(i, 0);
    if readers.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(readers.len());
    for (n, &r) in readers.iter().enumerate() {
        let writer = n == 0;
        let g = match &thunks[r] {
            Thunk::DequantMatMulGguf(d) if d.x == thunks_dst(&thunks[i])? => {
                qkv(thunks, flow, r, Some(pre), writer)?
            }
            Thunk::FusedMlpGateUpSwiGLU(_) | Thunk::FusedMlpGateUpGelu(_) => {
                gate_up(thunks, flow, r, pre, writer)?
            }
            _ => return None,
        };
        out.push(g);
    }
    Some(out)
}

fn thunks_dst(t: &Thunk) -> Option<usize> {
    match t {
        Thunk::RmsNorm(n) => Some(n.dst),
        _ => None,
    }
}

/// The fused groups of `thunks`, in the order the plan emits them (by
/// first member, then as listed).
pub(crate) fn groups(thunks: &[Thunk]) -> Vec<Group> {
    let decode = thunks.iter().any(|t| match t {
        Thunk::DequantMatMulGguf(d) => d.m == 1,
        _ => false,
    });
    if !decode {
        return Vec::new();
    }
    let flow = Flow::new(thunks);
    let mut cands: Vec<Vec<Group>> = Vec::new();
    for i in 0..thunks.len() {
        match &thunks[i] {
            Thunk::RmsNorm(_) => {
                cands.extend(norm_component(thunks, &flow, i, true));
                cands.extend(norm_component(thunks, &flow, i, false));
                cands.extend(norm_residual(thunks, &flow, i).map(|g| vec![g]));
            }
            Thunk::DequantMatMulGguf(_) => {
                cands.extend(qkv(thunks, &flow, i, None, true).map(|g| vec![g]));
                cands.extend(gemv_residual(thunks, &flow, i).map(|g| vec![g]));
            }
            _ => {}
        }
    }
    // by anchor, the fuller variants first (stable)
    cands.sort_by_key(|c| {
        let anchor = c.iter().map(|g| g.members[0]).min().unwrap_or(usize::MAX);
        let size: usize = c.iter().map(|g| g.members.len()).sum();
        (anchor, std::cmp::Reverse(size))
    });
    let mut taken = vec![false; thunks.len()];
    let mut accepted: Vec<Group> = Vec::new();
    for comp in cands {
        if comp.iter().flat_map(|g| &g.members).any(|&m| taken[m]) {
            continue;
        }
        let n = accepted.len();
        accepted.extend(comp);
        let flows: Vec<GroupFlow<'_>> = accepted
            .iter()
            .map(|g| GroupFlow {
                members: &g.members,
                outputs: &g.outputs,
            })
            .collect();
        if flow.fused_ok(thunks, &flows) {
            for g in &accepted[n..] {
                for &m in &g.members {
                    taken[m] = true;
                }
            }
        } else {
            accepted.truncate(n);
        }
    }
    accepted.sort_by_key(|g| g.members[0]);
    accepted
}

#[cfg(test)]
#[path = "fuse_tests.rs"]
mod tests;
