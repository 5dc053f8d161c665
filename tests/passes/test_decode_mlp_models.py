"""fuse_decode_mlp on the real models' one-token decode graphs: it fires on
every layer (matches == n_layers; the down + residual tail on every layer
of the models whose down output goes straight into the residual add, none
on Gemma 3, whose post-FFN norm sits in between), and greedy decoding gives
the same tokens with the pass on and off (RLX_DISABLE_PASS).

SmolLM2 (Q4_1 MLPs) and Gemma 3 (GELU) are installed on demand like the
model tests; Qwen2.5 only when present or with ``RLX_TEST_QWEN=1``.
"""

from __future__ import annotations

import os

import pytest
import rlx
from rlx.io.models import ensure_model, model_path
from rlx.models.decoder import DecoderModel

PASS = "fuse_decode_mlp"
PROMPT = "The capital of France is"
TOKENS = 12

#: model, layers, gating, whether the down GEMV feeds the residual add
MODELS = [
    ("smollm2", 30, "swiglu", True),
    ("gemma3-270m", 18, "gelu", False),
    ("qwen2.5-0.5b", 24, "swiglu", True),
]


def _path(name: str) -> str:
    if name != "qwen2.5-0.5b" or os.environ.get("RLX_TEST_QWEN") == "1":
        return str(ensure_model(name))
    path = model_path(name)
    if path is None:
        pytest.skip(f"{name} is not installed; RLX_TEST_QWEN=1 installs it")
    return str(path)


def _greedy(path: str, mp: pytest.MonkeyPatch, disable: str) -> tuple[list[int], rlx.Executable]:
    mp.setenv("RLX_DISABLE_PASS", disable)
    model = DecoderModel(path)
    ids = model.encode(PROMPT)
    out = list(model.generate_ids(ids, TOKENS, ignore_eos=True))
    decode = [r for (s, _, _), r in model._runners.items() if s == 1]
    assert decode, "no one-token graph was compiled"
    return out, decode[0].exe


@pytest.mark.parametrize(("name", "layers", "gating", "tail"), MODELS)
def test_fires_on_every_layer_and_keeps_greedy_output(
    monkeypatch: pytest.MonkeyPatch, name: str, layers: int, gating: str, tail: bool
) -> None:
    path = _path(name)
    on_ids, on = _greedy(path, monkeypatch, "")
    off_ids, off = _greedy(path, monkeypatch, PASS)
    assert on.stats["pass_matches"][PASS] == layers, on.report()
    assert off.stats["pass_matches"][PASS] == -1
    assert on.schedule.count(f"fused_mlp_gate_up_{gating}") == layers
    assert on.schedule.count("fused_mlp_down_residual") == (layers if tail else 0)
    assert on.stats["fallback_thunks"] == 0
    # 3 → 1 per layer (gate, up, and the act·mul region the graph fusions
    # make) and 2 → 1 for the tail; where the last residual add fed the
    # final norm, fuse_residual_rms_norm loses that one match to the tail
    saved = (3 if tail else 2) * layers
    assert off.stats["dispatches"] - on.stats["dispatches"] in (saved, saved - 1)
    assert on_ids == off_ids
