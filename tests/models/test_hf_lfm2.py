"""LFM2's short-conv state (a ring per conv layer in the shared State buffer,
see rlx.models.mixers) against the transformers fixture
``tests/fixtures/hf/lfm2`` (conv, attention, conv; kernel 3): the depthwise
conv fuses (``fuse_depthwise_conv1d_bsc``) in prefill and decode graphs and
gives the same logits with the pass off; prompts whose length is not a
bucket size (padded rows), prompts in several chunks, ``reset`` between
sequences and a ring that wraps around; every graph shares one state.
Tolerance: 1e-4 of the largest |logit| against transformers (measured
≤ 1e-6); pass on vs off: 1e-5."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import rlx
from hf_util import copy_fixture, expected, fixture, read_tensors, rel, write_safetensors
from rlx.models.decoder import BUCKETS

PASS = "fuse_depthwise_conv1d_bsc"
TOL = 1e-4


def _ids(e: dict[str, np.ndarray], n: int = 24) -> list[int]:
    return [int(t) for t in e[f"ids{n}"]]


def _conv_layers(model: rlx.DecoderModel) -> int:
    cfg = model.config
    return sum(cfg.mixer(i) == "short_conv" for i in range(cfg.n_layers))


def test_hybrid_layer_stack_from_config() -> None:
    model = rlx.load(str(fixture("lfm2")))
    cfg = model.config
    assert cfg.mixers == ["short_conv", "attention", "short_conv"]
    assert (cfg.conv_kernel, cfg.conv_bias, cfg.tied_output) == (3, False, True)
    assert model.inplace


@pytest.mark.parametrize("n_new", [1, 16, 64])
def test_conv_fuses_in_every_conv_layer(n_new: int) -> None:
    model = rlx.load(str(fixture("lfm2")))
    model.reset(n_new + 1)
    _, _, exe = model.compiled(n_new, n_new == 1)
    assert exe.stats["pass_matches"][PASS] == _conv_layers(model)
    assert "conv2d" not in exe.schedule
    assert PASS in exe.report()


@pytest.mark.parametrize("device", ["host", "reference"])
def test_pass_on_and_off_give_the_same_logits(monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    e = expected(fixture("lfm2"))
    out = []
    for disable in ("", PASS):
        monkeypatch.setenv("RLX_DISABLE_PASS", disable)
        model = rlx.load(str(fixture("lfm2")), device=device)
        model.reset(24)
        _, _, exe = model.compiled(16, False)
        assert ("conv2d" in exe.schedule) == bool(disable)
        full = model.logits(_ids(e))
        model.reset(24)
        steps = [model.next_logits(_ids(e)[:16])]
        steps += [model.next_logits([t]) for t in _ids(e)[16:]]
        out.append((full, np.stack(steps)))
    (full_on, dec_on), (full_off, dec_off) = out
    assert rel(full_on, full_off) < 1e-5 and rel(dec_on, dec_off) < 1e-5
    assert rel(full_on, e["logits24"]) < TOL
    assert rel(dec_on, e["prefill16_decode8"][15:]) < TOL


@pytest.mark.parametrize("cuts", [(13,), (5, 8), (11, 2, 3), (1, 1, 1, 1, 17)])
def test_prompts_of_any_length_and_chunking(cuts: tuple[int, ...]) -> None:
    """A prompt in chunks of non-bucket lengths (each padded to its bucket;
    the conv window must hold the last real rows), then decode steps."""
    e = expected(fixture("lfm2"))
    ids = _ids(e)
    model = rlx.load(str(fixture("lfm2")))
    model.reset(24)
    rows, at = [], 0
    for n in cuts:
        rows.append(model.next_logits(ids[at : at + n]))
        at += n
    rows += [model.next_logits([t]) for t in ids[at:]]
    ends = np.cumsum(cuts) - 1
    want = np.concatenate([e["logits24"][ends], e["logits24"][at:]])
    assert rel(np.stack(rows), want) < TOL


def test_reset_zeroes_the_conv_state_and_graphs_share_it() -> None:
    e = expected(fixture("lfm2"))
    model = rlx.load(str(fixture("lfm2")))
    list(model.generate_ids(_ids(e)[:20], 10, ignore_eos=True))
    cap = model._cap
    owner = model._owners[cap]
    conv = [f"conv{i}" for i in range(3) if model.config.mixer(i) == "short_conv"]
    assert all(np.any(owner.exe.state(n) != 0) for n in conv)
    runners = [r for (s, c, _), r in model._runners.items() if c == cap]
    assert len(runners) >= 2 and all(r.exe.shares_state_with(owner.exe) for r in runners)
    model.reset(24)
    assert all(not np.any(owner.exe.state(n)) for n in conv)
    # a second sequence after the first gives the fixture's logits
    assert rel(model.next_logits(_ids(e)), e["logits24"][-1]) < TOL


def test_ring_wraps_around() -> None:
    """Positions past the ring (max bucket + kernel − 1 rows), full-bucket
    chunks after a non-empty window: logits of one chunking (256, 256, 48)
    equal those of another (7, 256, 250, 40, then 7 decode steps)."""
    model = rlx.load(str(fixture("lfm2")))
    model.config.ctx = 600  # default RoPE: the context limit is no model change
    ids = [int(t) for t in np.random.default_rng(5).integers(0, model.config.vocab, 560)]
    assert len(ids) > 2 * (BUCKETS[-1] + model.config.conv_kernel - 1)
    full = model.logits(ids)
    model.reset(len(ids))
    rows, at = [], 0
    for n in (7, 256, 250, 40, 1, 1, 1, 1, 1, 1, 1):
        rows.append(model.next_logits(ids[at : at + n]))
        at += n
    assert at == len(ids)
    ends = np.cumsum([7, 256, 250, 40, 1, 1, 1, 1, 1, 1, 1]) - 1
    assert rel(np.stack(rows), full[ends]) < 1e-5


def test_copy_cache_mode_is_refused() -> None:
    with pytest.raises(rlx.UnsupportedOpError, match="in-place cache"):
        rlx.load(str(fixture("lfm2")), inplace=False)


def _numpy_lfm2(t: dict[str, np.ndarray], c: dict, ids: list[int]) -> np.ndarray:
    """float64 forward of transformers' Lfm2ForCausalLM (modeling_lfm2.py:
    operator_norm → conv / attention, ffn_norm → SwiGLU, embedding_norm at
    the end; conv: in_proj → B, C, x; C · causal_conv(B · x) → out_proj)."""
    h = t["model.embed_tokens.weight"][ids].astype(np.float64)
    s, hid = len(ids), c["hidden_size"]
    nh, kv = c["num_attention_heads"], c["num_key_value_heads"]
    taps, eps = c["conv_L_cache"], c["norm_eps"]
    hd = hid // nh

    def rms(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w

    def lin(x: np.ndarray, name: str) -> np.ndarray:
        y = x @ t[name + ".weight"].T
        return y + t[name + ".bias"] if name + ".bias" in t else y

    ang = np.arange(s)[:, None] * c["rope_parameters"]["rope_theta"] ** (-np.arange(0, hd, 2) / hd)
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))

    def rope(x: np.ndarray) -> np.ndarray:  # [s, n, hd], rotate halves
        rot = np.concatenate([-x[..., hd // 2 :], x[..., : hd // 2]], -1)
        return x * cos[:, None] + rot * sin[:, None]

    for i, kind in enumerate(c["layer_types"]):
        p = f"model.layers.{i}."
        x = rms(h, t[p + "operator_norm.weight"])
        if kind == "conv":
            bcx = lin(x, p + "conv.in_proj")
            b, gate, xx = bcx[:, :hid], bcx[:, hid : 2 * hid], bcx[:, 2 * hid :]
            pad = np.concatenate([np.zeros((taps - 1, hid)), b * xx])
            w = t[p + "conv.conv.weight"][:, 0, :]
            conv = np.stack([(pad[j : j + taps] * w.T).sum(0) for j in range(s)])
            conv = conv + t.get(p + "conv.conv.bias", 0.0)
            y = lin(gate * conv, p + "conv.out_proj")
        else:
            q = rope(rms(lin(x, p + "self_attn.q_proj").reshape(s, nh, hd),
                         t[p + "self_attn.q_layernorm.weight"]))  # fmt: skip
            k = rope(rms(lin(x, p + "self_attn.k_proj").reshape(s, kv, hd),
                         t[p + "self_attn.k_layernorm.weight"]))  # fmt: skip
            v = lin(x, p + "self_attn.v_proj").reshape(s, kv, hd)
            k, v = np.repeat(k, nh // kv, 1), np.repeat(v, nh // kv, 1)
            causal = np.triu(np.full((s, s), -np.inf), 1)
            sc = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + causal
            pr = np.exp(sc - sc.max(-1, keepdims=True))
            pr /= pr.sum(-1, keepdims=True)
            y = lin(np.einsum("hqk,khd->qhd", pr, v).reshape(s, hid), p + "self_attn.out_proj")
        h = h + y
        x = rms(h, t[p + "ffn_norm.weight"])
        g = x @ t[p + "feed_forward.w1.weight"].T
        h = (
            h
            + (g / (1 + np.exp(-g)) * (x @ t[p + "feed_forward.w3.weight"].T))
            @ t[p + "feed_forward.w2.weight"].T
        )
    return rms(h, t["model.embedding_norm.weight"]) @ t["model.embed_tokens.weight"].T


def test_numpy_oracle_agrees_with_transformers() -> None:
    """The float64 numpy forward below reproduces the fixture (so it may
    stand in for transformers on variants the fixture does not cover)."""
    src = fixture("lfm2")
    c = json.loads((src / "config.json").read_text())
    t = {k: a.astype(np.float64) for k, (_, a) in read_tensors(src / "model.safetensors").items()}
    e = expected(src)
    assert rel(_numpy_lfm2(t, c, _ids(e)), e["logits24"]) < 1e-5


@pytest.mark.parametrize("taps", [3, 4])
def test_conv_biases_and_kernel_length(tmp_path: Path, taps: int) -> None:
    """conv_bias=True (in_proj, conv and out_proj biases) and a 4-tap
    kernel: the fixture's weights plus random biases / taps, against the
    numpy forward; prefill of 13 + decode steps through the ring too."""
    src = fixture("lfm2")
    c = json.loads((src / "config.json").read_text())
    c.update(conv_bias=True, conv_L_cache=taps)
    d = copy_fixture(src, tmp_path / "b", lambda cj: cj.update(conv_bias=True, conv_L_cache=taps),
                     skip=("model.safetensors",))  # fmt: skip
    t = read_tensors(src / "model.safetensors")
    rng = np.random.default_rng(taps)
    hid = c["hidden_size"]
    for i, kind in enumerate(c["layer_types"]):
        if kind == "conv":
            p = f"model.layers.{i}.conv."
            t[p + "in_proj.bias"] = ("F32", rng.normal(0, 0.3, 3 * hid).astype(np.float32))
            t[p + "out_proj.bias"] = ("F32", rng.normal(0, 0.3, hid).astype(np.float32))
            t[p + "conv.bias"] = ("F32", rng.normal(0, 0.3, hid).astype(np.float32))
            t[p + "conv.weight"] = ("F32", rng.normal(0, 0.5, (hid, 1, taps)).astype(np.float32))
    write_safetensors(d / "model.safetensors", t)
    ids = _ids(expected(src))
    want = _numpy_lfm2({k: a.astype(np.float64) for k, (_, a) in t.items()}, c, ids)
    model = rlx.load(str(d))
    assert (model.config.conv_kernel, model.config.conv_bias) == (taps, True)
    assert rel(model.logits(ids), want) < TOL
    model.reset(24)
    steps = [model.next_logits(ids[:13])] + [model.next_logits([x]) for x in ids[13:]]
    assert rel(np.stack(steps), want[12:]) < TOL
