"""Mixture-of-experts families from Hugging Face directories against
transformers: the tiny random models ``tests/fixtures/hf/{mixtral,
qwen2_moe, qwen3_moe, olmoe}`` (4 experts, top-2, noise on every 1-D
parameter, routers balanced so every expert is chosen; see their
meta.json ``routing`` and scripts/make_moe_fixtures.py).

Per model and device (host, reference, metal-sim): teacher-forced logits of the 24-token sequence, a
16-token prefill + 8 ``next_logits`` decode steps, the 80-token sequence.
On metal-sim every plan (prefill and decode) is kernel dispatches only: the
grouped expert matmuls run as ``moe.metal`` kernels (per-expert GEMMs for
prefill, GEMVs over the chosen experts for decode), the router gather as
``gather_elements``; no host command is left.
Tolerance: max |rlx − transformers| ≤ 1e-4 of the largest |logit| (f32
summation order only). A routing-sensitive check makes sure the tests can
fail: without the top-k renormalisation (or with it where the model has
none) the logits move far beyond the tolerance.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import rlx
from hf_util import FIXTURES, copy_fixture, expected, fixture, hf_to_gguf, rel
from rlx.graph import Graph
from rlx.models import moe
from rlx.models.base import Weights
from rlx.node import Node
from test_hf_dirs import _three_checks
from test_hf_loading import _reencode

TOL = 1e-4
MODELS = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe")
DEVICES = ("host", "reference", "metal-sim")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", MODELS)
def test_moe_logits_match_transformers(name: str, device: str) -> None:
    d = fixture(name)
    e = expected(d)
    model = rlx.load(str(d), device=device)
    assert model.config.moe is not None and model.config.moe.n_experts == 4
    errs = _three_checks(model, e)
    assert max(errs) < TOL, f"{name} on {device}: full / prefill+decode / 80 = {errs}"
    if device == "metal-sim":
        _assert_all_kernels(model)


def _assert_all_kernels(model: rlx.DecoderModel) -> None:
    """Every compiled plan (prefill graphs and the one-token decode graph)
    of a metal-sim model is kernel dispatches only, the expert matmuls
    among them."""
    runners = list(model._runners.values())
    assert any(k[0] == 1 for k in model._runners) and any(k[0] > 1 for k in model._runners)
    for r in runners:
        st = r.exe.stats
        assert (st["metal_host"], st["metal_host_by_thunk"]) == (0, {}), r.exe.report()
        grouped = sum(v for k, v in st["by_thunk"].items() if "grouped_matmul" in k)
        assert grouped == 3 * model.config.n_layers, st["by_thunk"]


@pytest.mark.parametrize("name", ["mixtral", "olmoe"])
def test_wrong_normalisation_is_caught(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Flipping norm_topk (mixtral renormalises, olmoe does not) breaks parity."""
    d = fixture(name)
    orig = moe.moe_ffn

    def flipped(g: Graph, w: Weights, x: Node, prefix: str, spec: moe.MoeSpec) -> Node:
        return orig(g, w, x, prefix, replace(spec, norm_topk=not spec.norm_topk))

    monkeypatch.setattr("rlx.models.blocks.moe_ffn", flipped)
    model = rlx.load(str(d))
    ids24 = [int(t) for t in expected(d)["ids24"]]
    assert rel(model.logits(ids24), expected(d)["logits24"]) > 100 * TOL


def test_mlp_only_layers_are_dense(tmp_path: Path) -> None:
    """qwen2_moe ``mlp_only_layers`` make a layer dense: rlx then asks for the
    dense MLP tensors (absent from this checkpoint) and says which."""
    d = copy_fixture(fixture("qwen2_moe"), tmp_path / "q", lambda c: c.update(mlp_only_layers=[1]))
    with pytest.raises(rlx.RlxError, match=r"blk\.1\.ffn_gate\.weight"):
        rlx.load(str(d)).logits([1, 2, 3])


def test_bad_moe_config_is_refused(tmp_path: Path) -> None:
    d = copy_fixture(fixture("mixtral"), tmp_path / "m", lambda c: c.update(num_experts_per_tok=5))
    with pytest.raises(rlx.RlxError, match="top_k 5"):
        rlx.load(str(d))


@pytest.mark.parametrize("name", MODELS)
def test_moe_gguf_f32_matches_transformers(tmp_path: Path, name: str) -> None:
    """The fixture converted to GGUF as llama.cpp does (stacked
    ``ffn_*_exps``, Mixtral as ``llama`` with permuted Q/K rows): same
    numbers as transformers. (llama.cpp's own convert_hf_to_gguf.py output,
    checked by hand on 2026-12-03: ≤ 7e-7 for all four.)"""
    src = fixture(name)
    # f32 KV cache: checked at f32 rounding (the f16 default moves it 2.8e-4 to 3.7e-4)
    model = rlx.load(str(hf_to_gguf(src, tmp_path / f"{name}.gguf")), kv_dtype="f32")
    got, want = model.config.moe, rlx.load(str(src)).config.moe
    assert got is not None and want is not None
    assert replace(got, layers=()) == replace(want, layers=())
    errs = _three_checks(model, expected(src))
    assert max(errs) < TOL, errs


@pytest.mark.parametrize("name", MODELS)
def test_moe_gguf_q8_0(tmp_path: Path, name: str) -> None:
    """Q8_0 experts (``dequant_grouped_mat_mul``): the host equals the numpy
    reference on the same file, and the greedy token agrees with
    transformers' on ≥ 90% of the 80 positions. (Q8_0 noise flips the
    routing of a few tokens — the routers were balanced to small margins —
    so the logits of those move by up to ~0.3 of the largest |logit|; the
    median token is within ~2%.)"""
    src = fixture(name)
    path = hf_to_gguf(src, tmp_path / f"{name}.gguf", "Q8_0")
    e = expected(src)
    ids = [int(t) for t in e["ids80"]]
    before = rlx.set_int8_activations(False)
    try:
        host = rlx.load(str(path)).logits(ids)
        ref = rlx.load(str(path), device="reference").logits(ids)
    finally:
        rlx.set_int8_activations(before)
    assert rel(host, ref) < TOL
    assert (host.argmax(-1) == e["logits80"].argmax(-1)).mean() >= 0.9
    per_token = np.abs(host - e["logits80"]).max(-1) / np.abs(e["logits80"]).max()
    assert np.median(per_token) < 0.05


def test_expert_dispatch_is_grouped() -> None:
    """Prefill and decode graphs run the experts as three native
    ``grouped_matmul`` thunks per MoE layer (rows sorted by expert, one
    GEMM per chosen expert), never through the numpy fallback."""
    model = rlx.load(str(fixture("qwen2_moe")))
    model.reset(24)
    model._feed(list(range(1, 17)), all_rows=True)
    model.next_logits([17])
    runners = list(model._runners.values())
    assert len(runners) >= 2  # a prefill graph and a one-token decode graph
    for r in runners:
        st = r.exe.stats
        assert st["by_thunk"].get("grouped_matmul", 0) == 3 * model.config.n_layers, st
        assert not st["fallback_by_thunk"], st["fallback_by_thunk"]


@pytest.mark.parametrize("packed", [False, True])
def test_grouped_matmul_reads_only_chosen_experts(packed: bool) -> None:
    """What makes a decode step cheap: the host kernels (``grouped_matmul``
    and ``dequant_grouped_mat_mul``, here its F32 row format) touch only the
    experts some row chose. Experts 1 and 3 are NaN; rows routed to 0 and 2
    come out finite and equal to numpy (were they read, NaN would spread)."""
    rng = np.random.default_rng(0)
    g = rlx.Graph("moe_nan")
    x = g.input("x", [2, 8])
    idx = g.input("idx", [2], "i32")
    wv = rng.standard_normal((4, 5, 8)).astype(np.float32)  # [E, n, k]
    wv[[1, 3]] = np.nan
    if packed:
        wq = g.param("w", [4, 5, 32], "u8")
        y_node = g.dequant_grouped_matmul(x, wq, idx, scheme="f32", num_experts=4, n=5)
        value = wv.view(np.uint8).reshape(4, 5, 32)
    else:
        y_node = g.grouped_matmul(x, g.param("w", [4, 8, 5]), idx)
        value = np.ascontiguousarray(wv.transpose(0, 2, 1))
    g.outputs(g.apply({"op": "reshape", "dims": [2, 5]}, y_node, name="y"))
    xv = rng.standard_normal((2, 8)).astype(np.float32)
    iv = np.array([2, 0], np.int32)
    exe = rlx.compile(g, device="host")
    exe.set_param("w", value)
    y = exe.run(x=xv, idx=iv)["y"]
    want = np.einsum("mk,mnk->mn", xv.astype(np.float64), wv[iv].astype(np.float64))
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def _np_moe(x: np.ndarray, t: dict[str, np.ndarray], p: str, spec: moe.MoeSpec) -> np.ndarray:
    """The MoE block in float64 numpy from the HF tensors (transformers'
    definition: gate → softmax / sigmoid → top-k → optional renormalisation
    → SwiGLU experts → weighted sum; shared expert × sigmoid gate)."""

    def silu(z: np.ndarray) -> np.ndarray:
        return z / (1 + np.exp(-z))

    logits = x @ t[p + "mlp.gate.weight"].T
    if spec.gating == "softmax":
        z = np.exp(logits - logits.max(-1, keepdims=True))
        probs = z / z.sum(-1, keepdims=True)
    else:
        probs = 1 / (1 + np.exp(-logits))
    out = np.zeros_like(x)
    for r in range(x.shape[0]):
        top = np.argsort(-probs[r])[: spec.top_k]
        wts = probs[r, top] / (probs[r, top].sum() if spec.norm_topk else 1.0)
        for e, wt in zip(top, wts):
            q = f"{p}mlp.experts.{e}."
            h = silu(x[r] @ t[q + "gate_proj.weight"].T) * (x[r] @ t[q + "up_proj.weight"].T)
            out[r] += wt * (h @ t[q + "down_proj.weight"].T)
    if spec.shared_ffn:
        q = p + "mlp.shared_expert."
        h = silu(x @ t[q + "gate_proj.weight"].T) * (x @ t[q + "up_proj.weight"].T)
        sh = h @ t[q + "down_proj.weight"].T
        if spec.shared_gate:
            sh = sh / (1 + np.exp(-(x @ t[p + "mlp.shared_expert_gate.weight"].T)))
        out += sh
    return out


@pytest.mark.parametrize(
    "gating,norm_topk,top_k", [("softmax", False, 2), ("sigmoid", True, 2), ("sigmoid", False, 3)]
)
def test_moe_ffn_against_numpy(gating: str, norm_topk: bool, top_k: int) -> None:
    """:func:`moe.moe_ffn` alone (as the qwen3_next / granite builders will
    call it), including the sigmoid router no fixture here uses, against a
    float64 numpy block on qwen2_moe's layer-0 tensors (with shared expert)."""
    from hf_util import read_tensors
    from rlx.models.registry import open_model

    d = fixture("qwen2_moe")
    src, cfg, _, _ = open_model(d)
    assert cfg.moe is not None
    spec = replace(cfg.moe, gating=gating, norm_topk=norm_topk, top_k=top_k)
    w = Weights(src)
    g = rlx.Graph("moe_ffn")
    x = g.input("x", [1, 7, cfg.hidden])
    g.outputs(g.apply({"op": "reshape", "dims": [7, cfg.hidden]},
                      moe.moe_ffn(g, w, x, "blk.0.", spec), name="y"))  # fmt: skip
    exe = rlx.compile(g, device="host")
    for name in exe.params:
        exe.set_param(name, w.values[name])
    xv = np.random.default_rng(1).standard_normal((7, cfg.hidden)).astype(np.float32)
    y = exe.run(x=xv[None])["y"]
    t = {k: a.astype(np.float64) for k, (_, a) in read_tensors(d / "model.safetensors").items()}
    want = _np_moe(xv.astype(np.float64), t, "model.layers.0.", spec)
    assert rel(y, want) < 1e-5


@pytest.mark.parametrize("dtype", ["F16", "BF16"])
def test_half_experts_stay_half(tmp_path: Path, dtype: str) -> None:
    """An F16 / BF16 checkpoint keeps its experts in that dtype (stacked
    rows, ``dequant_grouped_mat_mul``), with the same logits as the F32
    checkpoint of the same rounded values."""
    src = fixture("qwen2_moe")
    half_dir = _reencode(src, tmp_path / "half", dtype)
    f32_dir = half_dir / "f32"
    ids = [int(t) for t in expected(src)["ids24"]]
    half, ref = rlx.load(str(half_dir)), rlx.load(str(f32_dir))
    assert rel(half.logits(ids), ref.logits(ids)) < 1e-5
    w = half.weights.values["blk.0.ffn_up_exps.weight"]
    assert w.dtype == np.uint8 and w.shape == (4, 32, 64 * 2)


@pytest.mark.parametrize("name", MODELS)
def test_llama_cpp_q8_0_gguf(name: str) -> None:
    """``tests/fixtures/gguf/<name>-q8_0.gguf``, written by llama.cpp's own
    convert_hf_to_gguf.py (scripts/make_moe_fixtures.py --what gguf; qwen2_moe's
    shared down projection, 48 wide, is F16 there): host equals the numpy
    reference, greedy tokens agree with transformers on >= 90% of 80
    positions (measured 93.75-98.75%; Q8_0 noise flips a few routings)."""
    path = FIXTURES.parent / "gguf" / f"{name}-q8_0.gguf"
    if not path.exists():
        pytest.skip(f"no {path}")
    e = expected(fixture(name))
    ids = [int(t) for t in e["ids80"]]
    before = rlx.set_int8_activations(False)
    try:
        host = rlx.load(str(path)).logits(ids)
        ref = rlx.load(str(path), device="reference").logits(ids)
        # metal-sim: the Q8_0 experts through moe.metal's grouped_*_q8_0
        # (80 tokens: prefill GEMMs; then a prefill + 2 decode steps)
        sim = rlx.load(str(path), device="metal-sim")
        sim_full = sim.logits(ids)
        sim.reset(24)
        sim_step = [sim._feed(ids[:16], all_rows=True)[-1]]
        sim_step += [sim.next_logits([t]) for t in ids[16:18]]
        host_m = rlx.load(str(path))
        host_m.reset(24)
        host_step = [host_m._feed(ids[:16], all_rows=True)[-1]]
        host_step += [host_m.next_logits([t]) for t in ids[16:18]]
    finally:
        rlx.set_int8_activations(before)
    assert rel(host, ref) < TOL
    assert rel(sim_full, host) < TOL
    assert rel(np.stack(sim_step), np.stack(host_step)) < TOL
    _assert_all_kernels(sim)
    assert (host.argmax(-1) == e["logits80"].argmax(-1)).mean() >= 0.9
