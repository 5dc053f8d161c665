"""GGUF files of the state-space / linear-attention families against
transformers: ``tests/fixtures/gguf/<name>-{f32,q8_0}.gguf`` are the tiny
HF fixtures of ``tests/fixtures/hf/<name>/`` converted by llama.cpp's own
``convert_hf_to_gguf.py`` (scripts/make_seq_fixtures.py ``--what gguf``), so
the metadata keys, tensor names and layouts (``ssm_a = −exp(A_log)``,
squeezed conv taps, ``[heads, 1]`` / ``[groups, inner/groups]`` vectors, the
``+1`` baked into Qwen3-Next's norms, the split ``in_proj_qkvz``, Qwen3.5's
tiled value heads, Falcon-H1's multipliers folded into the weights, Granite's
permuted Q/K rows) are llama.cpp's, not ours.

* F32: the three checks of test_hf_dirs (24 tokens teacher-forced, 16-token
  prefill + 8 decode steps, 80 tokens) within 1e-4 of the largest |logit| on
  host, reference and metal-sim (every plan kernels only); measured on the host ≤ 2.3e-6
  (the GDN families' ``1 + w`` norms are rounded once in f32 by the
  converter).
* Q8_0: prefill + decode and 80 tokens against the HF directory whose
  weights went through the same Q8_0 round trip (``gguf.quants``; F16 for the
  2-D weights the converter cannot block: rows not a multiple of 32) —
  within 1e-4 (measured ≤ 2.1e-6, Mamba-2 bit-equal); host equals reference on the
  file. Against transformers: greedy tokens agree on ≥ 75% of 80 positions
  (a floor; measured 100% on every fixture since the fixtures are trained,
  87.5-100% when they were random; the ≥ 98% target is checked in
  test_gguf_accuracy.py) and the median per-token error is < 10% of the
  largest |logit|.
* Prefill and decode of the Q8_0 files run native kernels only, with the
  conv / gated-norm fusions on every layer they apply to.
* A bad file (missing ``ssm`` key, a tensor of the wrong shape, a missing
  tensor) is a RlxError naming the key or tensor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import pytest
import rlx
from hf_util import copy_fixture, expected, fixture, read_tensors, rel, write_safetensors
from test_hf_dirs import _three_checks

gguf = pytest.importorskip("gguf")

GGUF_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "gguf"
TOL = 1e-4
#: fixture → (GGUF architecture, mixer kind of each layer)
MODELS: dict[str, tuple[str, list[str]]] = {
    "mamba2": ("mamba2", ["mamba2"] * 2),
    "mamba2_g2": ("mamba2", ["mamba2"] * 2),
    "mamba": ("mamba", ["mamba"] * 2),
    "qwen3_next": ("qwen3next", ["gdn", "gdn", "gdn", "attention"]),
    "qwen3_5": ("qwen35", ["gdn", "gdn", "gdn", "attention"]),
    "qwen3_5_moe": ("qwen35moe", ["gdn", "gdn", "gdn", "attention"]),
    "falcon_h1": ("falcon-h1", ["mamba2_attention"] * 2),
    "granitemoehybrid": ("granitehybrid", ["mamba2", "attention", "mamba2"]),
    "granitemoehybrid_dense": ("granitehybrid", ["mamba2", "attention", "mamba2"]),
    "jamba": ("jamba", ["mamba", "attention", "mamba", "attention"]),
    "jamba_dense": ("jamba", ["mamba", "attention", "mamba", "attention"]),
}
#: metal-sim on every file (msl-sim compiles the kernels once per process)
METAL_SIM = tuple(MODELS)
#: the Q8_0 files that equal the round-tripped HF directory (Falcon-H1's
#: converter quantises the weights after folding its multipliers in)
Q8_EXACT = tuple(n for n in MODELS if n != "falcon_h1")


def _gguf(name: str, kind: str) -> Path:
    p = GGUF_DIR / f"{name}-{kind}.gguf"
    if not p.exists():
        pytest.skip(f"no {p}")
    return p


@pytest.fixture
def no_int8() -> Any:
    """Q8_0 matmuls with f32 activations (the host's int8-activation GEMVs
    round the activations too)."""
    before = rlx.set_int8_activations(False)
    yield
    rlx.set_int8_activations(before)


def _params(device_models: tuple[str, ...], devices: tuple[str, ...]) -> list[Any]:
    return [pytest.param(n, d, id=f"{n}-{d}") for n in device_models for d in devices]


@pytest.mark.parametrize(
    ("name", "device"),
    _params(tuple(MODELS), ("host", "reference")) + _params(METAL_SIM, ("metal-sim",)),
)
def test_f32_gguf_matches_transformers(name: str, device: str) -> None:
    path = _gguf(name, "f32")
    arch, mixers = MODELS[name]
    e = expected(fixture(name))
    model = rlx.load(str(path), device=device)
    assert model.weights.src.arch == arch
    assert model.config.mixers == mixers
    assert model.config.vocab == e["logits24"].shape[1]
    errs = _three_checks(model, e)
    assert max(errs) < TOL, f"{name} on {device}: full / prefill+decode / 80 = {errs}"
    if device == "metal-sim":
        ids80 = [int(t) for t in e["ids80"]]
        host = rlx.load(str(path)).logits(ids80)
        assert rel(model.logits(ids80), host) < TOL
        # every plan compiled (prefill 16 / 24 / 80 tokens, one-token decode): kernels only
        assert any(k[0] == 1 for k in model._runners) and len(model._runners) > 1
        for r in model._runners.values():
            st = r.exe.stats
            assert (st["metal_host"], st["metal_host_by_thunk"]) == (0, {}), r.exe.report()


@pytest.mark.parametrize("name", MODELS)
def test_gguf_config_equals_hf_config(name: str) -> None:
    """The sizes read from the GGUF metadata equal those of config.json."""
    g = rlx.load(str(_gguf(name, "f32"))).config
    h = rlx.load(str(fixture(name))).config
    fields = ("n_layers", "hidden", "vocab", "tied_output", "mixers", "conv_kernel", "conv_bias",
              "ssm_inner", "ssm_state", "ssm_heads", "ssm_head_dim", "ssm_groups", "ssm_dt_rank",
              "gdn_k_heads", "gdn_v_heads", "gdn_k_dim", "gdn_v_dim")  # fmt: skip
    for f in fields:
        assert getattr(g, f) == getattr(h, f), f
    if "attention" in " ".join(h.mixers):
        for f in ("heads", "kv_heads", "head_dim", "rope_dims", "rope_base"):
            assert getattr(g, f) == getattr(h, f), f
    assert (g.moe is None) == (h.moe is None)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("n_new", [13, 1])
def test_q8_0_native_kernels_and_passes(name: str, n_new: int) -> None:
    """Prefill and decode graphs of the Q8_0 file: no thunk through the numpy
    fallback, the depthwise-conv pass on every conv (SSM / GDN) layer and the
    gated-norm pass on every GDN layer."""
    model = rlx.load(str(_gguf(name, "q8_0")))
    model.reset(n_new + 1)
    stats = model._runner(n_new, model._cap, False).exe.stats
    assert stats["fallback_by_thunk"] == {}
    mixers, fired = model.config.mixers, stats["pass_matches"]
    assert fired["fuse_depthwise_conv1d_bsc"] == sum(m != "attention" for m in mixers)
    assert fired["fuse_gdn_gated_norm"] == mixers.count("gdn")


# ------------------------------------------------------------------ Q8_0
#: HF tensors llama.cpp's converter keeps in F32 (routers, conv taps, A)
_KEEP_F32 = ("conv1d", "A_log", "router", "mlp.gate.weight", "shared_expert_gate")


def _tiled_cols(a: np.ndarray, c: dict[str, Any]) -> Optional[np.ndarray]:
    """Column order of Qwen3.5's ``out_proj`` in the GGUF (value heads
    tiled), or None when the converter keeps it."""
    hk, hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
    dv = c["linear_value_head_dim"]
    if hk == hv:
        return None
    idx = np.arange(hv * dv).reshape(hk, hv // hk, dv).transpose(1, 0, 2).reshape(-1)
    assert a.shape[-1] == idx.size
    return idx


def _q8_round_trip(name: str, dst: Path) -> Path:
    """``hf/<name>`` with every weight the converter quantises put through
    the same Q8_0 (or F16) round trip."""
    import json

    from gguf import GGMLQuantizationType as T
    from gguf.quants import dequantize, quantize

    src = fixture(name)
    d = copy_fixture(src, dst)
    config = json.loads((src / "config.json").read_text())
    out = {}
    for k, (dt, a) in read_tensors(src / "model.safetensors").items():
        assert dt == "F32", k
        if a.ndim >= 2 and not any(s in k for s in _KEEP_F32):
            tiled = name.startswith("qwen3_5") and "linear_attn.out_proj" in k
            cols = _tiled_cols(a, config) if tiled else None
            w = a if cols is None else a[..., cols]
            if w.shape[-1] % 32:
                w = w.astype(np.float16).astype(np.float32)
            else:
                w = dequantize(quantize(np.ascontiguousarray(w), T.Q8_0), T.Q8_0).reshape(w.shape)
            if cols is not None:
                w = w[..., np.argsort(cols)]
            a = np.ascontiguousarray(w, np.float32)
        out[k] = (dt, a)
    write_safetensors(d / "model.safetensors", out)
    return d


@pytest.mark.parametrize("name", Q8_EXACT)
def test_q8_0_gguf_equals_the_round_tripped_hf_dir(
    tmp_path: Path, name: str, no_int8: None
) -> None:
    path = _gguf(name, "q8_0")
    want = rlx.load(str(_q8_round_trip(name, tmp_path / name)))
    got = rlx.load(str(path))
    e = expected(fixture(name))
    ref: dict[str, np.ndarray] = {}
    for k, m in (("want", want), ("got", got)):
        ids24 = [int(t) for t in e["ids24"]]
        m.reset(24)
        pre = m._feed(ids24[:16], all_rows=True)
        dec = [m.next_logits([t]) for t in ids24[16:]]
        ref[k + "_step"] = np.concatenate([pre, np.stack(dec)])
        ref[k + "_80"] = m.logits([int(t) for t in e["ids80"]])
    assert rel(ref["got_step"], ref["want_step"]) < TOL
    assert rel(ref["got_80"], ref["want_80"]) < TOL


@pytest.mark.parametrize("name", MODELS)
def test_q8_0_gguf_against_transformers(name: str, no_int8: None) -> None:
    path = _gguf(name, "q8_0")
    e = expected(fixture(name))
    ids = [int(t) for t in e["ids80"]]
    host = rlx.load(str(path)).logits(ids)
    ref = rlx.load(str(path), device="reference").logits(ids)
    assert rel(host, ref) < TOL
    want = e["logits80"]
    assert (host.argmax(-1) == want.argmax(-1)).mean() >= 0.75
    per_token = np.abs(host - want).max(-1) / np.abs(want).max()
    assert np.median(per_token) < 0.1


# ------------------------------------------------------------- bad files
def _rewrite(
    src: Path,
    dst: Path,
    drop_key: str = "",
    tensor: Optional[tuple[str, Callable[[np.ndarray], Optional[np.ndarray]]]] = None,
) -> Path:
    """Copy the F32 GGUF ``src`` to ``dst`` with metadata key ``drop_key``
    left out and tensor ``tensor[0]`` replaced by ``tensor[1](array)`` (None:
    left out), with gguf's reader / writer."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = GGUFWriter(dst, arch)
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", drop_key):
            continue
        vtype = GGUFValueType(f.types[0])
        sub = GGUFValueType(f.types[-1]) if vtype == GGUFValueType.ARRAY else None
        w.add_key_value(key, f.contents(), vtype, sub)
    for t in r.tensors:
        a = np.array(t.data).reshape([int(x) for x in reversed(t.shape)])
        if tensor is not None and t.name == tensor[0]:
            a = tensor[1](a)
            if a is None:
                continue
        w.add_tensor(t.name, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def test_rewritten_file_still_loads(tmp_path: Path) -> None:
    """The rewriting helper itself keeps a good file good."""
    name = "mamba2"
    path = _rewrite(_gguf(name, "f32"), tmp_path / "same.gguf")
    e = expected(fixture(name))
    assert rel(rlx.load(str(path)).logits([int(t) for t in e["ids24"]]), e["logits24"]) < TOL


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("mamba2", "mamba2.ssm.state_size"),
        ("mamba2", "mamba2.ssm.time_step_rank"),
        ("mamba", "mamba.ssm.inner_size"),
        ("qwen3_next", "qwen3next.ssm.group_count"),
        ("falcon_h1", "falcon-h1.ssm.conv_kernel"),
        ("jamba", "jamba.ssm.time_step_rank"),
    ],
)
def test_missing_ssm_key_is_named(tmp_path: Path, name: str, key: str) -> None:
    path = _rewrite(_gguf(name, "f32"), tmp_path / "bad.gguf", drop_key=key)
    with pytest.raises(rlx.RlxError, match=key.replace(".", r"\.")):
        rlx.load(str(path))


@pytest.mark.parametrize(
    ("name", "tensor"),
    [
        ("mamba2", "blk.1.ssm_in.weight"),
        ("mamba2", "blk.0.ssm_conv1d.weight"),
        ("mamba2_g2", "blk.1.ssm_norm.weight"),
        ("mamba", "blk.0.ssm_a"),
        ("mamba", "blk.1.ssm_x.weight"),
        ("qwen3_next", "blk.2.ssm_ba.weight"),
        ("qwen3_5", "blk.0.attn_qkv.weight"),
        ("granitemoehybrid", "blk.2.ssm_dt.bias"),
        ("jamba", "blk.2.ssm_dt_norm.weight"),
    ],
)
def test_wrong_tensor_shape_is_named(tmp_path: Path, name: str, tensor: str) -> None:
    def chop(a: np.ndarray) -> np.ndarray:
        return a[..., :-1] if a.shape[-1] > 1 else a[:-1]

    path = _rewrite(_gguf(name, "f32"), tmp_path / "bad.gguf", tensor=(tensor, chop))
    with pytest.raises(rlx.RlxError, match=tensor.replace(".", r"\.") + ".*shape"):
        rlx.load(str(path))


@pytest.mark.parametrize(
    ("name", "tensor"),
    [("mamba2", "blk.0.ssm_a"), ("falcon_h1", "blk.1.ssm_d"), ("qwen3_5", "blk.2.ssm_out.weight")],
)
def test_missing_tensor_is_named(tmp_path: Path, name: str, tensor: str) -> None:
    path = _rewrite(_gguf(name, "f32"), tmp_path / "bad.gguf", tensor=(tensor, lambda a: None))
    with pytest.raises(rlx.RlxError, match="missing tensor '" + tensor.replace(".", r"\.")):
        rlx.load(str(path))
