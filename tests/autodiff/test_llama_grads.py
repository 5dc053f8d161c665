"""Whole-model gradients of a tiny Llama against torch.autograd.

The committed checkpoint ``tests/fixtures/hf/llama`` (transformers'
LlamaForCausalLM: 2 layers, hidden 64, 4 query / 2 key-value heads, tied
embeddings) is written here as an rlx graph with ordinary ops (embedding
gather, RMSNorm, NeoX RoPE, GQA causal attention, SwiGLU MLP, tied LM head,
integer-label cross-entropy). ``rlx.grad`` of HF's shifted mean loss w.r.t.
every weight is compared with torch's gradients
(``scripts/make_grad_fixture.py``): relative error ≤ 1e-4 per tensor. The
embedding is used twice (lookup and LM head), so its gradient is the sum of
both paths.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import rlx
from rlx.io.safetensors import open_safetensors
from rlx.optim import AdamW, train_step

sys.path.insert(0, str(Path(__file__).parent))
from _gradcheck import evaluate  # noqa: E402

FIX = Path(__file__).resolve().parent.parent / "fixtures"
TOL = 1e-4


def build(states: bool = False) -> tuple[rlx.Graph, rlx.Node, dict[str, rlx.Node], dict]:
    cfg = json.loads((FIX / "hf" / "llama" / "config.json").read_text())
    st = open_safetensors(FIX / "hf" / "llama" / "model.safetensors")
    weights = {k: np.array(st.tensor(k), np.float32) for k in st.keys()}
    s = 12
    hid, heads, kvh = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d, eps = cfg["head_dim"], cfg["rms_norm_eps"]
    theta = cfg["rope_parameters"]["rope_theta"]
    g = rlx.Graph("tiny_llama")
    leaf = g.state if states else g.param
    p = {k: leaf(k, list(v.shape)) for k, v in weights.items()}
    ids = g.input("ids", [s], "i32")
    targets = g.input("targets", [s - 1], "i32")
    inv = 1.0 / theta ** (np.arange(0, d, 2) / d)
    ang = np.arange(s)[:, None] * inv[None, :]
    cos = g.constant(np.cos(ang).astype(np.float32))
    sin = g.constant(np.sin(ang).astype(np.float32))

    def lin(x: rlx.Node, name: str) -> rlx.Node:
        return x @ g.transpose(p[name], [1, 0])

    h = g.reshape(g.gather(p["model.embed_tokens.weight"], ids), [1, s, hid])
    for i in range(cfg["num_hidden_layers"]):
        pre = f"model.layers.{i}."
        x = g.rms_norm(h, p[pre + "input_layernorm.weight"], eps=eps)
        q = g.rope(lin(x, pre + "self_attn.q_proj.weight"), cos, sin, head_dim=d)
        k = g.rope(lin(x, pre + "self_attn.k_proj.weight"), cos, sin, head_dim=d)
        v = lin(x, pre + "self_attn.v_proj.weight")
        a = g.attention(q, k, v, heads=heads, kv_heads=kvh, mask="causal")
        h = h + lin(a, pre + "self_attn.o_proj.weight")
        x = g.rms_norm(h, p[pre + "post_attention_layernorm.weight"], eps=eps)
        gate = g.silu(lin(x, pre + "mlp.gate_proj.weight"))
        h = h + lin(gate * lin(x, pre + "mlp.up_proj.weight"), pre + "mlp.down_proj.weight")
    x = g.rms_norm(h, p["model.norm.weight"], eps=eps)
    logits = lin(g.reshape(x, [s, hid]), "model.embed_tokens.weight")
    ce = g.softmax_cross_entropy(g.narrow(logits, 0, 0, s - 1), targets)
    return g, g.mean(ce), p, weights


def test_tiny_llama_gradients_match_torch() -> None:
    fx = np.load(FIX / "grad" / "llama_grads.npz")
    g, loss, p, weights = build()
    names = sorted(p)
    grads = rlx.grad(g, loss, [p[n] for n in names])
    g.outputs(loss, *grads)
    ids = fx["ids"][0]
    feeds = {**weights, "ids": ids, "targets": ids[1:]}
    vals = evaluate(g, feeds)
    assert abs(vals[0] - fx["loss"]) <= 1e-5 * abs(fx["loss"])
    worst = 0.0
    for n, got in zip(names, vals[1:]):
        want = fx[f"grad.{n}"]
        err = float(np.abs(got - want).max() / np.abs(want).max())
        assert err <= TOL, f"{n}: relative error {err:.2e}"
        worst = max(worst, err)
    compiled_check(g, feeds, names, fx)


def compiled_check(g: rlx.Graph, feeds: dict, names: list[str], fx: dict) -> None:
    """The compiled backward graph (host kernels, and the Metal plan through
    msl-sim) agrees with torch too."""
    for device in ("host", "metal-sim"):
        exe = rlx.compile(g, device=device)
        for n in names:
            exe.set_param(n, feeds[n])
        out = list(exe.run(ids=feeds["ids"], targets=feeds["targets"]).values())
        for n, got in zip(names, out[1:]):
            want = fx[f"grad.{n}"]
            err = float(np.abs(got - want).max() / np.abs(want).max())
            assert err <= TOL, f"{device} {n}: relative error {err:.2e}"


def test_tiny_llama_adamw_steps_match_torch() -> None:
    """Four compiled training steps (forward + backward + clipping + AdamW in
    one executable, the weights in State buffers) follow torch.optim.AdamW on
    the same model: every loss to 1e-4 relative, the tracked weights after
    the last step as the comment below says."""
    fx = np.load(FIX / "grad" / "llama_grads.npz")
    g, loss, p, weights = build(states=True)
    train_step(g, loss, [p[n] for n in sorted(p)], AdamW(lr=1e-2, weight_decay=0.1), clip_norm=1.0)
    exe = rlx.compile(g, device="host")
    for n, v in weights.items():
        exe.set_state(n, v)
    ids = fx["ids"][0]
    for t, want in enumerate(fx["adamw.loss"]):
        got = float(next(iter(exe.run(ids=ids, targets=ids[1:]).values())))
        assert abs(got - want) <= TOL * abs(want), (t, got, want)
    # Adam moves each weight by about lr per step whatever its gradient's size,
    # so a weight whose gradient is near zero (its sign set by f32 rounding)
    # can differ by a fraction of lr: allow 0.1% of the elements past 1e-4
    # relative, none past 1% of the distance the steps can move a weight
    reach = 1e-2 * len(fx["adamw.loss"])
    for key in fx.files:
        if key.startswith("adamw.model."):
            n = key[len("adamw.") :]
            diff = np.abs(exe.state(n) - fx[key])
            off = int((diff > TOL * np.abs(fx[key]).max()).sum())
            assert off <= diff.size // 1000, f"{n}: {off} of {diff.size} elements off"
            assert diff.max() <= 0.01 * reach, f"{n}: max difference {diff.max():.2e}"
