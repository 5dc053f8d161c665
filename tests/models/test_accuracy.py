"""Accuracy of the real decoders against transformers (F32, same GGUF) and
llama.cpp, through the fixtures of ``scripts/make_fixtures.py --what llm``.

* Teacher-forced next-token top-1 over the fixture passage (≥ 200 tokens)
  must agree with transformers at ≥ 98% of the positions (issue 4). The
  positions where they differ are printed with transformers' top-1/top-2
  margin, which shows whether they are near-ties.
* The same passage fed one token at a time (decode steps: m = 1 GEMVs,
  whose default host path rounds the activations to int8 on two code
  levels, ``rlx.set_int8_activation_levels``) must agree at ≥ 98% too
  (issue 14); with one level it gave 0.985 / 0.953 / 0.990 on SmolLM2 /
  Gemma3 / Qwen2.5, llama.cpp 0.969 / 0.959 / 0.984.
* Greedy 32-token continuations: the leading 16 tokens must equal
  transformers' on most prompts (here: all but at most 2 of the 6); the exact
  agreement lengths are printed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import rlx

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

MODELS = [
    pytest.param("smollm2", id="smollm2"),
    pytest.param("gemma3-270m", id="gemma3"),
    pytest.param("qwen2.5-0.5b", id="qwen2.5", marks=pytest.mark.qwen),
]

_loaded: dict[str, Any] = {}


def _fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"llm_{name}.json").read_text())


def _model(name: str, model_or_skip: Callable[[str], Path]) -> Any:
    if name not in _loaded:
        _loaded.clear()  # one real model in memory at a time
        _loaded[name] = rlx.load(str(model_or_skip(name)))
    return _loaded[name]


@pytest.mark.parametrize("name", MODELS)
def test_teacher_forced_top1(name: str, model_or_skip: Callable[[str], Path]) -> None:
    fx = _fixture(name)
    p = fx["passage"]
    ids = [int(t) for t in p["ids"]]
    assert len(ids) >= 200
    m = _model(name, model_or_skip)
    top1 = np.argmax(m.logits(ids), axis=-1)
    ref = np.asarray(p["top1"])
    assert top1.shape == ref.shape
    agree = top1 == ref
    frac = float(agree.mean())
    worst = [(i, int(top1[i]), int(ref[i]), float(p["margin"][i])) for i in np.flatnonzero(~agree)]
    print(f"\n{name}: teacher-forced top-1 agreement {agree.sum()}/{agree.size} = {frac:.4f}")
    print(f"  mismatches (pos, rlx, transformers, transformers margin): {worst}")
    assert frac >= 0.98, f"{name}: top-1 agreement {frac:.4f} < 0.98; mismatches {worst}"


@pytest.mark.parametrize("name", MODELS)
def test_decode_top1(name: str, model_or_skip: Callable[[str], Path]) -> None:
    fx = _fixture(name)
    p = fx["passage"]
    ids = [int(t) for t in p["ids"]]
    m = _model(name, model_or_skip)
    m.reset(len(ids))
    top1 = np.array([int(np.argmax(m.next_logits([t]))) for t in ids])
    ref = np.asarray(p["top1"])
    agree = top1 == ref
    frac = float(agree.mean())
    worst = [(i, int(top1[i]), int(ref[i]), float(p["margin"][i])) for i in np.flatnonzero(~agree)]
    print(f"\n{name}: one-token-at-a-time top-1 agreement {agree.sum()}/{agree.size} = {frac:.4f}")
    print(f"  mismatches (pos, rlx, transformers, transformers margin): {worst}")
    assert frac >= 0.98, f"{name}: decode top-1 agreement {frac:.4f} < 0.98; mismatches {worst}"


@pytest.mark.parametrize("name", MODELS)
def test_greedy_continuations(name: str, model_or_skip: Callable[[str], Path]) -> None:
    fx = _fixture(name)
    m = _model(name, model_or_skip)
    lengths = {}
    for pr in fx["prompts"]:
        ref = [int(t) for t in pr["greedy_transformers"]]
        got = list(m.generate_ids(pr["ids"], len(ref), ignore_eos=True))
        same = next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), len(ref))
        lengths[pr["name"]] = same
    print(f"\n{name}: greedy agreement with transformers (of 32): {lengths}")
    short = [k for k, v in lengths.items() if v < 16]
    assert len(short) <= 2, f"{name}: leading 16 tokens differ on {short}: {lengths}"
