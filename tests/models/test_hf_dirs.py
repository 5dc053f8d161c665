"""``rlx.load(dir)`` on Hugging Face directories against transformers: the
tiny models of ``tests/fixtures/hf/<model_type>/`` (briefly trained on a fixed
text by scripts/make_seq_fixtures.py; config.json, model.safetensors,
tokenizer.json; logits computed by transformers 5.25 in
float32, see their meta.json) — llama, qwen2, qwen3, gemma3 (text) and the
hybrid lfm2 (short-conv + attention layers).

Per model and device, three checks: teacher-forced logits of the 24-token
sequence, a 16-token prefill followed by 8 single-token decode steps
(``next_logits``) against transformers' own cached decode, and the 80-token
sequence (two prompt buckets: 64 + 16). Tolerance: max |rlx − transformers|
≤ 1e-4 of the largest |logit| (f32 summation order only; measured ≤ 2e-6).
The host's int8-activation GEMVs apply to quantised GGUF matmuls only; these
are F32 checkpoints, so nothing is switched off.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import rlx
from hf_util import DENSE, expected, fixture, rel

TOL = 1e-4
MODELS = (*DENSE, "lfm2")
#: metal-sim compiles the kernels once per process (msl-sim cache), then a
#: model's three checks take ~1-3 s
DEVICES = ("host", "reference", "metal-sim")


def _three_checks(model: rlx.DecoderModel, e: dict[str, np.ndarray]) -> tuple[float, ...]:
    ids24 = [int(t) for t in e["ids24"]]
    full = model.logits(ids24)
    # prefill rows 0..15 with all rows, then 8 decode steps on the same cache
    model.reset(24)
    pre = model._feed(ids24[:16], all_rows=True)
    dec = [model.next_logits([t]) for t in ids24[16:]]
    step = np.concatenate([pre, np.stack(dec)])
    ids80 = [int(t) for t in e["ids80"]]
    long = model.logits(ids80)
    return (
        rel(full, e["logits24"]),
        rel(step, e["prefill16_decode8"]),
        rel(long, e["logits80"]),
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", MODELS)
def test_logits_match_transformers(name: str, device: str) -> None:
    d = fixture(name)
    e = expected(d)
    t0 = time.perf_counter()
    model = rlx.load(str(d), device=device)
    assert model.config.vocab == e["logits24"].shape[1]
    errs = _three_checks(model, e)
    took = time.perf_counter() - t0
    assert max(errs) < TOL, f"{name} on {device}: full / prefill+decode / 80 = {errs}"
    if device == "metal-sim":
        print(f"{name} metal-sim: {took:.1f} s")
        # every plan (prefill 16 / 24 / 80, decode): kernels only
        assert any(k[0] == 1 for k in model._runners) and len(model._runners) > 1
        for r in model._runners.values():
            st = r.exe.stats
            assert (st["metal_host"], st["metal_host_by_thunk"]) == (0, {}), r.exe.report()


@pytest.mark.parametrize("name", DENSE)
def test_copy_cache_mode(name: str) -> None:
    """The copy KV-cache mode (explicit masks, cache rows synced per graph)
    on the attention-only families."""
    d = fixture(name)
    errs = _three_checks(rlx.load(str(d), inplace=False), expected(d))
    assert max(errs) < TOL, errs


@pytest.mark.parametrize("name", MODELS)
def test_greedy_generation_follows_the_logits(name: str) -> None:
    """generate_ids (prefill + cached decode) picks the argmax of the
    teacher-forced logits at every step."""
    d = fixture(name)
    model = rlx.load(str(d))
    prompt = [int(t) for t in expected(d)["ids24"][:5]]
    out = list(model.generate_ids(prompt, 6, ignore_eos=True))
    assert len(out) == 6
    full = model.logits(prompt + out)
    assert [int(x) for x in full[4:-1].argmax(-1)] == out
