//! `ir_fuse_attention_block`: a short-sequence self-attention block written
//! as plain ops becomes one `FusedAttentionBlock` (QKV projection, fused
//! NeoX RoPE + SDPA core, output projection).
//!
//! Pattern (BSHD, `inner = heads·d`):
//! ```text
//! qkv = matmul(x [b, s, hidden], w_qkv [hidden, 3·inner])
//! q = narrow(qkv, -1, 0, inner)      (then rope(q, cos, sin), optional)
//! k = narrow(qkv, -1, inner, inner)  (then rope(k, cos, sin), same tables)
//! v = narrow(qkv, -1, 2·inner, inner)
//! a = attention(q, k, v, (mask))
//! y = matmul(a, w_out [inner, hidden])
//! ```
//! → `fused_attention_block(x, w_qkv, w_out, (cos, sin), (mask))`.
//! Nodes before → after: 7 (9 with RoPE) → 1; thunks: the narrows are views,
//! so QKV sgemm, (2 ropes,) attention, out sgemm → sgemm, fused_attn, sgemm.
//!
//! Preconditions (those of the fused op and of its `fused_attn` core):
//! * every intermediate (qkv, the narrows, the ropes, the attention) is read
//!   only inside the pattern and is not a graph output;
//! * all of x, the weights, cos/sin and the result are f32;
//! * attention: `heads == kv_heads`, BSHD, mask none / causal / custom with
//!   a mask shared by all heads (head axis 1), no window, no softcap, no
//!   run-time `kv_len`, default score scale `1/√d`;
//! * RoPE, when present on q and k: NeoX, over the whole head
//!   (`n_rot = head_dim`), one cos/sin row per position, the same tables
//!   for q and k;
//! * the sequence is short: its bound length is at most [`MAX_SEQ`]. The
//!   core keeps one (batch, head)'s `[seq, seq]` f32 score tile in GPU
//!   threadgroup memory (seed, `FusedAttn`); 64 rows make 16 KiB, half of
//!   the 32 KiB an Apple GPU threadgroup has, leaving room for the q/k/v
//!   rows. Longer sequences keep the tiled `attention` thunk.

use super::{FuseContext, Fusion, Operand, Rewrite};
use rlx_ir::op::{AttnLayout, MaskKind, RopeKind};
use rlx_ir::{DType, Graph, NodeId, Op};

/// Longest sequence the fusion fires for (see the module docs).
pub const MAX_SEQ: usize = 64;

/// The fusion. See the module docs.
pub struct FuseAttentionBlock;

impl Fusion for FuseAttentionBlock {
    const NAME: &'static str = "ir_fuse_attention_block";

    fn find(g: &Graph, cx: &FuseContext) -> Vec<Rewrite> {
        (0..g.len()).filter_map(|i| plan(g, cx, i)).collect()
    }
}

/// `(source, start, len)` of a narrow along the last axis of a rank-3 value.
fn narrow3(g: &Graph, id: NodeId) -> Option<(NodeId, usize, usize)> {
    let n = g.node(id);
    let Op::Narrow { axis, start, len } = n.op else {
        return None;
    };
    let src = *n.inputs.first()?;
    (g.shape(src).rank() == 3 && (axis == 2 || axis == -1)).then_some((src, start, len))
}

/// A whole-head NeoX rope on `[b, s, ..]` over head dim `d`, private to
/// `consumer`: `(x, cos, sin)`.
fn rope(
    g: &Graph,
    cx: &FuseContext,
    id: NodeId,
    d: usize,
    consumer: NodeId,
) -> Option<[NodeId; 3]> {
    let n = g.node(id);
    let Op::Rope {
        kind: RopeKind::Neox,
        head_dim,
        n_rot,
        per_token: false,
    } = n.op
    else {
        return None;
    };
    if head_dim != d || n_rot != d || !cx.private_to(id, consumer) {
        return None;
    }
    let [x, c, s] = n.inputs[..] else {
        return None;
    };
    Some([x, c, s])
}

/// True when a custom mask of these dims is one for all heads (its head
/// axis, once left-padded to `[b, heads, s, kv]`, is 1).
fn mask_shared(dims: &[rlx_ir::Dim]) -> bool {
    dims.len() < 3 || dims[dims.len() - 3].is_one()
}

fn plan(g: &Graph, cx: &FuseContext, i: NodeId) -> Option<Rewrite> {
    let out = g.node(i);
    if out.op != Op::MatMul || out.shape.dtype != DType::F32 {
        return None;
    }
    let [a, w_out] = out.inputs[..] else {
        return None;
    };
    let Op::Attention {
        heads,
        kv_heads,
        head_dim: d,
        mask,
        window,
        layout: AttnLayout::Bshd,
        score_scale,
        softcap: None,
        dynamic_kv_len: false,
    } = g.node(a).op
    else {
        return None;
    };
    let default_scale = (1.0 / (d as f32).sqrt()).to_bits();
    if heads != kv_heads
        || window != 0
        || !matches!(mask, MaskKind::None | MaskKind::Causal | MaskKind::Custom)
        || score_scale.is_some_and(|s| s.to_bits() != default_scale)
        || !cx.private_to(a, i)
    {
        return None;
    }
    let att_in = &g.node(a).inputs;
    let (q, k, v) = (*att_in.first()?, *att_in.get(1)?, *att_in.get(2)?);
    let mask_node = if mask == MaskKind::Custom {
        let m = *att_in.get(3)?;
        if !mask_shared(&g.shape(m).dims) {
            return None;
        }
        Some(m)
    } else {
        None
    };
    let mut absorbed = vec![a];
    // optional ropes on q and k with shared tables
    let (nq, nk, tables) = match (rope(g, cx, q, d, a), rope(g, cx, k, d, a)) {
        (Some([xq, cq, sq]), Some([xk, ck, sk])) if cq == ck && sq == sk => {
            absorbed.extend([q, k]);
            (xq, xk, Some((cq, sq)))
        }
        (None, None) => (q, k, None),
        _ => return None,
    };
    let inner = heads.checked_mul(d)?;
    let [(sq, q0, ql), (sk, k0, kl), (sv, v0, vl)] =
        [narrow3(g, nq)?, narrow3(g, nk)?, narrow3(g, v)?];
    if sq != sk || sq != sv || (q0, k0, v0) != (0, inner, 2 * inner) || [ql, kl, vl] != [inner; 3] {
        return None;
    }
    let (q_user, k_user) = if tables.is_some() { (q, k) } else { (a, a) };
    if !cx.private_to(nq, q_user) || !cx.private_to(nk, k_user) || !cx.private_to(v, a) {
        return None;
    }
    let qkv = sq;
    let qkv_node = g.node(qkv);
    let mut users = cx.users[qkv].clone();
    users.sort_unstable();
    let mut want = vec![nq, nk, v];
    want.sort_unstable();
    if qkv_node.op != Op::MatMul || cx.outputs.contains(&qkv) || users != want {
        return None;
    }
    let [x, w_qkv] = qkv_node.inputs[..] else {
        return None;
    };
    absorbed.extend([qkv, nq, nk, v]);
    let xs = g.shape(x);
    let seq = cx.bound(xs.dims.get(1)?)?;
    if xs.rank() != 3 || seq > MAX_SEQ {
        return None;
    }
    let mut inputs = vec![x, w_qkv, w_out];
    if let Some((c, s)) = tables {
        inputs.extend([c, s]);
    }
    inputs.extend(mask_node);
    if inputs[..inputs.len() - mask_node.is_some() as usize]
        .iter()
        .any(|&j| g.shape(j).dtype != DType::F32)
    {
        return None;
    }
    let op = Op::FusedAttentionBlock {
        heads,
        head_dim: d,
        mask,
        rope: tables.is_some(),
    };
    let shapes: Vec<_> = inputs.iter().map(|&j| g.shape(j)).collect();
    if !super::infers_to(&op, &shapes, &out.shape) {
        return None;
    }
    absorbed.sort_unstable();
    Some(Rewrite {
        root: i,
        op,
        inputs: inputs.into_iter().map(Operand::Node).collect(),
        absorbed,
        extra: vec![],
    })
}
