//! Unit tests of attention-family shape inference.

use super::super::common::testutil::{err, ok};
use crate::op::{AttnLayout, MaskKind, Op, RopeKind};

fn attn(heads: usize, kv_heads: usize, d: usize, mask: MaskKind, layout: AttnLayout) -> Op {
    Op::Attention {
        heads,
        kv_heads,
        head_dim: d,
        mask,
        window: if mask == MaskKind::SlidingWindow {
            16
        } else {
            0
        },
        layout,
        score_scale: None,
        softcap: None,
        dynamic_kv_len: false,
    }
}

#[test]
fn attention_dynamic_kv_len() {
    let mut op = attn(9, 3, 4, MaskKind::Causal, AttnLayout::Bshd);
    if let Op::Attention { dynamic_kv_len, .. } = &mut op {
        *dynamic_kv_len = true;
    }
    let q = "f32[1, 1, 36]";
    let kv = "f32[1, 64, 12]";
    ok(&op, &[q, kv, kv, "i32[1]"], "f32[1, 1, 36]");
    err(&op, &[q, kv, kv, "i64[1]"], "kv_len must be i32 [1]");
    err(
        &op,
        &[q, kv, kv, "i32[2]"],
        "kv_len must be i32 [1] or i32 [batch] ([1])",
    );
    // one length per batch entry (batched decode)
    let (q4, kv4) = ("f32[4, 1, 36]", "f32[4, 64, 12]");
    ok(&op, &[q4, kv4, kv4, "i32[4]"], "f32[4, 1, 36]");
    ok(&op, &[q4, kv4, kv4, "i32[1]"], "f32[4, 1, 36]");
    err(
        &op,
        &[q4, kv4, kv4, "i32[3]"],
        "kv_len must be i32 [1] or i32 [batch] ([4])",
    );
    err(&op, &[q4, kv4, kv4, "i32[4, 1]"], "kv_len must be i32 [1]");
    err(&op, &[q, kv, kv], "expects 4 input(s), got 3");
}

#[test]
fn attention_bshd() {
    let op = attn(8, 2, 4, MaskKind::Causal, AttnLayout::Bshd);
    ok(
        &op,
        &["f16[b, s, 32]", "f16[b, kv, 8]", "f16[b, kv, 8]"],
        "f16[b, s, 32]",
    );
    // 4-D BSHD
    ok(
        &op,
        &["f16[1, s, 8, 4]", "f16[1, kv, 2, 4]", "f16[1, kv, 2, 4]"],
        "f16[1, s, 8, 4]",
    );
    err(
        &op,
        &["f16[b, s, 32]", "f16[b, kv, 16]", "f16[b, kv, 16]"],
        "k must be [b, kv, 8]",
    );
    err(
        &op,
        &["f16[b, s, 32]", "f16[b, kv, 8]", "f16[b, kv2, 8]"],
        "v must be [b, kv, 8]",
    );
    err(
        &op,
        &["f16[b, s, 32]", "f16[c, kv, 8]", "f16[c, kv, 8]"],
        "k must be [b, kv, 8]",
    );
    err(
        &op,
        &["f16[b, s, 30]", "f16[b, kv, 8]", "f16[b, kv, 8]"],
        "q must be [b, s, 32]",
    );
    err(
        &op,
        &["f16[b, s, 32]", "f16[b, kv, 2, 4]", "f16[b, kv, 2, 4]"],
        "same rank",
    );
    err(
        &op,
        &["f16[b, s, 32]", "f32[b, kv, 8]", "f16[b, kv, 8]"],
        "dtypes differ",
    );
    // a half KV cache under f32 queries: f32 out
    ok(
        &op,
        &["f32[b, s, 32]", "f16[b, kv, 8]", "f16[b, kv, 8]"],
        "f32[b, s, 32]",
    );
    err(
        &op,
        &["f16[b, s, 32]", "f32[b, kv, 8]", "f32[b, kv, 8]"],
        "f16 under an f32 q",
    );
    err(
        &op,
        &["f32[b, s, 32]", "bf16[b, kv, 8]", "bf16[b, kv, 8]"],
        "f16 under an f32 q",
    );
    err(
        &op,
        &["i32[b, s, 32]", "i32[b, kv, 8]", "i32[b, kv, 8]"],
        "float",
    );
    err(&op, &["f16[b, s, 32]", "f16[b, kv, 8]"], "expects 3");
    err(
        &op,
        &["f16[s, 32]", "f16[kv, 8]", "f16[kv, 8]"],
        "Bshd operands",
    );
}

#[test]
fn attention_bhsd_and_masks() {
    let op = attn(4, 4, 8, MaskKind::Bias, AttnLayout::Bhsd);
    let qkv = ["f32[2, 4, s, 8]", "f32[2, 4, t, 8]", "f32[2, 4, t, 8]"];
    let with = |m: &'static str| {
        let mut v = qkv.to_vec();
        v.push(m);
        v
    };
    ok(&op, &with("f32[1, 4, s, t]"), "f32[2, 4, s, 8]");
    ok(&op, &with("f32[s, t]"), "f32[2, 4, s, 8]");
    err(&op, &with("f32[s, s]"), "mask f32[s, s] does not broadcast");
    err(&op, &with("bool[s, t]"), "bias must be a float");
    err(&op, &qkv, "expects 4");
    let custom = attn(4, 4, 8, MaskKind::Custom, AttnLayout::Bhsd);
    ok(&custom, &with("bool[2, 1, s, t]"), "f32[2, 4, s, 8]");
    let none = attn(4, 4, 8, MaskKind::None, AttnLayout::Bhsd);
    err(&none, &with("f32[s, t]"), "expects 3");
    err(
        &none,
        &["f32[2, s, 8]", "f32[2, t, 8]", "f32[2, t, 8]"],
        "Bhsd operands",
    );
    err(
        &none,
        &["f32[2, 4, s, 8]", "f32[2, 2, t, 8]", "f32[2, 2, t, 8]"],
        "k must be [2, 4, t, 8]",
    );
}

#[test]
fn attention_attrs() {
    let qkv = ["f32[1, s, 8]", "f32[1, s, 8]", "f32[1, s, 8]"];
    err(
        &attn(6, 4, 2, MaskKind::None, AttnLayout::Bshd),
        &qkv,
        "multiple of kv_heads",
    );
    err(
        &attn(0, 1, 2, MaskKind::None, AttnLayout::Bshd),
        &qkv,
        "heads must be > 0",
    );
    let mut op = attn(4, 4, 2, MaskKind::SlidingWindow, AttnLayout::Bshd);
    ok(&op, &qkv, "f32[1, s, 8]");
    if let Op::Attention { window, .. } = &mut op {
        *window = 0;
    }
    err(&op, &qkv, "window > 0");
    let mut op = attn(4, 4, 2, MaskKind::None, AttnLayout::Bshd);
    if let Op::Attention { softcap, .. } = &mut op {
        *softcap = Some(-1.0);
    }
    err(&op, &qkv, "softcap");
    if let Op::Attention {
        softcap,
        score_scale,
        ..
    } = &mut op
    {
        *softcap = Some(30.0);
        *score_scale = Some(f32::INFINITY);
    }
    err(&op, &qkv, "score_scale");
}

#[test]
fn fused_attention_block() {
    let op = Op::FusedAttentionBlock {
        heads: 2,
        head_dim: 4,
        mask: MaskKind::Custom,
        rope: true,
    };
    let base = [
        "f32[b, s, 16]",
        "f32[16, 24]",
        "f32[8, 16]",
        "f32[s, 2]",
        "f32[s, 2]",
        "bool[s, s]",
    ];
    ok(&op, &base, "f32[b, s, 16]");
    err(&op, &base[..5], "expects 6");
    let mut bad = base;
    bad[1] = "f32[16, 8]";
    err(&op, &bad, "w_qkv must be [16, 24]");
    let mut bad = base;
    bad[2] = "f32[16, 16]";
    err(&op, &bad, "w_out must be [8, 16]");
    let mut bad = base;
    bad[4] = "f32[s, 4]";
    err(&op, &bad, "sin must be [s, 2]");
    let mut bad = base;
    bad[5] = "bool[s, t]";
    err(&op, &bad, "mask");
    let plain = Op::FusedAttentionBlock {
        heads: 2,
        head_dim: 4,
        mask: MaskKind::Causal,
        rope: false,
    };
    ok(&plain, &base[..3], "f32[b, s, 16]");
    let bias = Op::FusedAttentionBlock {
        heads: 2,
        head_dim: 4,
        mask: MaskKind::Bias,
        rope: false,
    };
    err(&bias, &base[..3], "none, causal or custom");
}

#[test]
fn rope() {
    let op = Op::Rope {
        kind: RopeKind::Neox,
        head_dim: 8,
        n_rot: 4,
        per_token: false,
    };
    ok(
        &op,
        &["f16[b, s, 32]", "f32[s, 2]", "f32[s, 2]"],
        "f16[b, s, 32]",
    );
    err(
        &op,
        &["f16[b, s, 30]", "f32[s, 2]", "f32[s, 2]"],
        "multiple of head_dim",
    );
    err(&op, &["f16[b, s, h]", "f32[s, 2]", "f32[s, 2]"], "static");
    err(
        &op,
        &["f16[b, s, 32]", "f32[s, 4]", "f32[s, 2]"],
        "cos must be [s, 2]",
    );
    err(
        &op,
        &["f16[b, s, 32]", "f32[s, 2]", "i32[s, 2]"],
        "sin must be a float",
    );
    err(&op, &["f16[s, 32]", "f32[s, 2]", "f32[s, 2]"], "rank 3");
    err(&op, &["f16[b, s, 32]", "f32[s, 2]"], "expects 3");
    let per_tok = Op::Rope {
        kind: RopeKind::Interleaved,
        head_dim: 8,
        n_rot: 8,
        per_token: true,
    };
    ok(
        &per_tok,
        &["f32[2, 3, 16]", "f32[6, 4]", "f32[6, 4]"],
        "f32[2, 3, 16]",
    );
    ok(
        &per_tok,
        &["f32[1, s, 16]", "f32[s, 4]", "f32[s, 4]"],
        "f32[1, s, 16]",
    );
    err(
        &per_tok,
        &["f32[2, 3, 16]", "f32[3, 4]", "f32[3, 4]"],
        "cos must be [6, 4]",
    );
    err(
        &per_tok,
        &["f32[b, s, 16]", "f32[s, 4]", "f32[s, 4]"],
        "per-token",
    );
    for n_rot in [0, 3, 10] {
        let bad = Op::Rope {
            kind: RopeKind::Neox,
            head_dim: 8,
            n_rot,
            per_token: false,
        };
        err(&bad, &["f32[1, 1, 8]", "f32[1, 1]", "f32[1, 1]"], "n_rot");
    }
}

#[test]
fn axial_rope() {
    let op = |end_x, repeat_factor| Op::AxialRope2d {
        end_x,
        end_y: 3,
        head_dim: 8,
        num_heads: 2,
        theta: 10000.0,
        repeat_factor,
    };
    ok(&op(4, 1), &["f32[b, 12, 16]"], "f32[b, 12, 16]");
    ok(&op(4, 2), &["f32[b, 24, 16]"], "f32[b, 24, 16]");
    ok(&op(4, 1), &["f32[b, s, 16]"], "f32[b, s, 16]");
    err(&op(4, 1), &["f32[b, 13, 16]"], "seq must be");
    err(&op(4, 1), &["f32[b, 12, 12]"], "hidden must be");
    err(&op(0, 1), &["f32[b, 12, 16]"], "end_x");
    err(&op(4, 1), &["f32[12, 16]"], "rank 3");
    err(&op(4, 1), &[], "expects 1");
    let bad = Op::AxialRope2d {
        end_x: 1,
        end_y: 1,
        head_dim: 6,
        num_heads: 1,
        theta: 1.0,
        repeat_factor: 1,
    };
    err(&bad, &["f32[1, 1, 6]"], "multiple of 4");
}
