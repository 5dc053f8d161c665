"""``rlx.load(dir, quantize=scheme)``: the F32 linear weights of the tiny HF
llama fixture quantised at load to int8 / int4 / FP8 / NVFP4 (and GGUF
Q8_0), run by the quantised matmul kernels.

Two oracles:

* transformers' F32 logits (``expected.npz``): the quantised model is within
  the format's rounding error of them. The fixture's random weights make the
  logits sensitive (a weight error of e becomes ~3–5·e of the largest
  |logit|); measured max |rlx − transformers| / max |logit| on the 24-token
  sequence: int8 0.020, int8/32a 0.018, q8_0 0.018, fp8_e4m3 0.137
  (per tensor 0.104), fp8_e5m2 0.152, int4/32 0.351, int4/32a 0.336, nvfp4
  0.348. Bounds (``BOUNDS``) are those with ~2× headroom: the accuracy of the
  formats on this model, not of the kernels. Per-layer relative weight errors
  (``WEIGHT_BOUNDS``): int8 ≤ 0.0064, fp8_e4m3 ≤ 0.027, fp8_e5m2 ≤ 0.052,
  int4 / nvfp4 ≤ 0.10 measured;
* the kernels exactly: the same model loaded as F32 from a copy of the
  fixture whose weights hold the dequantised values (``Quantized.dequantize``,
  numpy) must give the same logits within 1e-4 of the largest |logit| (f32
  summation order only; measured 5e-7 – 9e-7).

``rlx inspect --quantize`` reports each layer's relative weight error.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import rlx
from hf_util import copy_fixture, expected, fixture, read_tensors, rel, write_safetensors

BOUNDS = {
    "int8": 0.04,
    "int8/32a": 0.04,
    "int4/32": 0.6,
    "int4/32a": 0.6,
    "fp8_e4m3": 0.25,
    "fp8_e5m2": 0.3,
    "fp8_e4m3/tensor": 0.25,
    "nvfp4": 0.6,
    "q8_0": 0.04,
}
WEIGHT_BOUNDS = {
    "int8": 0.01,
    "int8/32a": 0.01,
    "int4/32": 0.13,
    "int4/32a": 0.12,
    "fp8_e4m3": 0.04,
    "fp8_e5m2": 0.07,
    "fp8_e4m3/tensor": 0.04,
    "nvfp4": 0.13,
    "q8_0": 0.01,
}
EXACT = 1e-4


def _dequantised_copy(src: Path, dst: Path, scheme: str, names: list[str]) -> Path:
    """``src`` with every weight in ``names`` replaced by its dequantised
    value; a tied output matrix gets its own (dequantised) ``lm_head``."""
    d = copy_fixture(src, dst)
    tensors = read_tensors(d / "model.safetensors")
    cfg = json.loads((d / "config.json").read_text())
    for name in names:
        dt, w = tensors[name]
        dq = rlx.quantize(w.astype(np.float32), scheme).dequantize()
        if name == "model.embed_tokens.weight":
            tensors["lm_head.weight"] = ("F32", dq)
            cfg["tie_word_embeddings"] = False
        else:
            tensors[name] = ("F32", dq)
    write_safetensors(d / "model.safetensors", tensors)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("scheme", sorted(BOUNDS))
def test_quantised_llama_is_close_to_f32_and_exact_to_its_weights(
    tmp_path: Path, scheme: str
) -> None:
    src = fixture("llama")
    e = expected(src)
    ids = [int(t) for t in e["ids24"]]
    model = rlx.load(str(src), quantize=scheme)
    errs = model.weights.quant_errors
    # every projection of both layers (q, k, v, o, gate, up, down) + the output
    assert len(errs) == 2 * 7 + 1, sorted(errs)
    assert all(0 < v < WEIGHT_BOUNDS[scheme] for v in errs.values()), errs
    got = model.logits(ids)
    err = rel(got, e["logits24"])
    assert err < BOUNDS[scheme], f"{scheme}: {err:.3g}"
    # the kernels against F32 weights holding the dequantised values
    ref_dir = _dequantised_copy(src, tmp_path / "dq", scheme, sorted(errs))
    want = rlx.load(str(ref_dir)).logits(ids)
    assert rel(got, want) < EXACT, f"{scheme}: {rel(got, want):.3g}"


@pytest.mark.parametrize("scheme", ["int8/32a", "int4/32a", "fp8_e4m3/tensor", "nvfp4"])
def test_quantised_llama_on_metal_sim_matches_host(scheme: str) -> None:
    """The whole decoder on metal-sim, every matmul a quant_formats kernel
    (no host command); measured 5e-7 – 6.4e-7 of the largest |logit|."""
    src = fixture("llama")
    ids = [int(t) for t in expected(src)["ids24"]][:8]
    host = rlx.load(str(src), quantize=scheme).logits(ids)
    model = rlx.load(str(src), quantize=scheme, device="metal-sim")
    sim = model.logits(ids)
    assert rel(sim, host) < EXACT
    _, _, exe = model.compiled(1, True)
    assert exe.stats["metal_host"] == 0


def test_unknown_scheme_fails_at_load() -> None:
    with pytest.raises(rlx.QuantizeError, match="unknown scheme 'int5'"):
        rlx.load(str(fixture("llama")), quantize="int5")


def test_inspect_reports_per_layer_error(capsys: pytest.CaptureFixture[str]) -> None:
    from rlx.cli import inspect_model, main

    src = str(fixture("llama"))
    info = inspect_model(src, 0, "int8")
    errs = info["quant_errors"]
    assert "model.layers.0.self_attn.q_proj.weight" in errs
    assert max(errs.values()) < 0.02
    assert main(["inspect", src, "--quantize", "fp8_e4m3"]) == 0
    out = capsys.readouterr().out
    assert "quantised to fp8_e4m3" in out
    assert "model.layers.1.mlp.down_proj.weight" in out
