"""Active extent: a graph compiled for a bucket of token rows runs on a prefix
of them (``Executable.set_active_extent`` / ``run_active``), and the decoders
use it for prompts shorter than their bucket instead of computing the padding."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import rlx
from rlx.models import decoder
from rlx.models.decoder import inplace_available
from tiny_gguf import INT8_PREFILL_TOL, exact_prefill, reference_logits, write_tiny

ARCHS = ("llama", "qwen2", "qwen3", "gemma3")


def _rms(x: np.ndarray, g: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    x64 = x.astype(np.float64)
    return x64 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps) * g


def _rowwise_graph(rows: int) -> rlx.Graph:
    g = rlx.Graph("rowwise")
    x = g.input("x", [rows, 24])
    gamma = g.param("g", [24])
    w = g.param("w", [24, 16])
    b = g.param("b", [16])
    h = g.rms_norm(x, gamma)
    g.outputs(g.gelu(g.add(g.matmul(h, w), b), name="y"))
    return g


def test_prefix_rows_match_numpy_and_the_full_run() -> None:
    rng = np.random.default_rng(0)
    exe = rlx.compile(_rowwise_graph(16))
    gamma = rng.standard_normal(24).astype(np.float32)
    w = rng.standard_normal((24, 16)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    exe.set_param("g", gamma)
    exe.set_param("w", w)
    exe.set_param("b", b)
    # every thunk here is row-wise (norm, matmul + bias + gelu, fused or not)
    assert exe.set_active_extent(16, ["x"]) == exe._native.num_thunks() >= 2
    x = rng.standard_normal((16, 24)).astype(np.float32)
    full = exe.run(x=x)["y"]
    h = _rms(x, gamma) @ w + b
    want = 0.5 * h * (1 + np.vectorize(math.erf)(h / np.sqrt(2)))
    assert np.max(np.abs(full - want)) < 1e-4 * np.max(np.abs(want))
    for a in (1, 5, 15, 16):
        got = exe.run_active(a, x=x)["y"]
        assert np.array_equal(got[:a], full[:a]), a


def test_rows_out_of_range_and_missing_plan_are_errors() -> None:
    exe = rlx.compile(_rowwise_graph(8))
    for name in ("g", "w", "b"):
        exe.set_param(name, np.ones(exe.params[name].shape, np.float32))
    x = np.ones((8, 24), np.float32)
    with pytest.raises(rlx.RlxError, match=r"set_active_extent"):
        exe.run_active(3, x=x)
    with pytest.raises(rlx.RlxError, match=r"no input named 'z'"):
        exe.set_active_extent(8, ["z"])
    exe.set_active_extent(8, ["x"])
    for bad in (0, 9):
        with pytest.raises(rlx.RlxError, match=rf"\[active extent\] {bad} active rows of a 8-row"):
            exe.run_active(bad, x=x)


def test_a_thunk_without_prefix_form_is_named() -> None:
    """A transpose puts the token axis inside: no prefix of its output is a
    prefix of its rows, so the plan refuses and names the thunk."""
    g = rlx.Graph("transposed")
    x = g.input("x", [8, 4])
    g.outputs(g.add(g.transpose(x), 1.0, name="y"))
    exe = rlx.compile(g)
    with pytest.raises(rlx.RlxError, match=r"\[active extent\] thunk \d+ \(\w+\) reads token rows"):
        exe.set_active_extent(8, ["x"])


@pytest.mark.skipif(not inplace_available(), reason="executor lacks share_state / kv_len")
@pytest.mark.parametrize("arch", ARCHS)
def test_decoders_run_short_prompts_on_a_prefix(tmp_path: Path, arch: str) -> None:
    """Every architecture's prefill buckets accept the active extent, and the
    logits of a 23-token prompt in the 64-bucket equal both the padded run
    and the float64 oracle."""
    path = write_tiny(tmp_path / f"{arch}.gguf", arch, "Q8_0")
    ids = [256] + [int(t) for t in np.random.default_rng(4).integers(0, 256, 22)]
    # the f32 cache: the oracle comparison below is at f32 rounding
    model = rlx.load(str(path), inplace=True, kv_dtype="f32")
    got = model.logits(ids)
    # the chunk ran on a prefix of the largest bucket's graph (ONE_PREFILL_GRAPH)
    runner = model._runners[(decoder.BUCKETS[-1], model._cap, True)]
    assert runner.active, runner.active_error
    try:
        decoder.ACTIVE_EXTENT = False
        padded_model = rlx.load(str(path), inplace=True, kv_dtype="f32")
        padded = padded_model.logits(ids)
        assert not padded_model._runners[(64, padded_model._cap, True)].active
    finally:
        decoder.ACTIVE_EXTENT = True
    scale = np.max(np.abs(padded))
    assert np.max(np.abs(got - padded)) <= 1e-5 * scale
    want = reference_logits(path, arch, ids)
    assert np.max(np.abs(got - want)) <= INT8_PREFILL_TOL * np.max(np.abs(want))
    with exact_prefill():
        exact = model.logits(ids)
    assert np.max(np.abs(exact - want)) <= 1e-4 * np.max(np.abs(want))
    # generation after an active-extent prefill continues from the right cache
    model.reset(len(ids) + 4)
    first = list(model.generate_ids(ids, 4))
    assert first == list(padded_model.generate_ids(ids, 4))


@pytest.mark.skipif(not inplace_available(), reason="executor lacks share_state / kv_len")
@pytest.mark.parametrize("arch", ARCHS)
def test_prompts_share_one_prefill_graph_and_arena(tmp_path: Path, arch: str) -> None:
    """Prompts of any length run on prefixes of one graph (the largest
    bucket's), last-row select included, so a model holds one prefill arena,
    not one per bucket: prompts of 2, 20, 70 and 300 tokens and a few decode
    steps leave exactly the 256-token graph and the decode graph compiled.
    Before, the last-row graphs had no prefix form (their final norm reads
    the gathered row from an arena range reused from a dead token-major
    tensor) and every bucket compiled its own graph and arena. The logits
    still match the float64 oracle, and the bucket-per-prompt path."""
    path = write_tiny(tmp_path / f"{arch}.gguf", arch, "Q8_0")
    rng = np.random.default_rng(5)
    prompts = [[256] + [int(t) for t in rng.integers(0, 256, n - 1)] for n in (2, 20, 70, 300)]
    model = rlx.load(str(path), kv_dtype="f32")
    try:
        decoder.ONE_PREFILL_GRAPH = False
        buckets = rlx.load(str(path), kv_dtype="f32")
    finally:
        decoder.ONE_PREFILL_GRAPH = True
    for ids in prompts:
        want = reference_logits(path, arch, ids)[-1]
        for m in (model, buckets):
            m.reset(len(ids) + 4)
            got = m.next_logits(ids)
            assert np.max(np.abs(got - want)) <= INT8_PREFILL_TOL * np.max(np.abs(want)), arch
            for t in (3, 4):  # decode steps after the prompt
                m.next_logits([t])
    big, cap = decoder.BUCKETS[-1], model._cap
    assert set(model._runners) == {(big, cap, False), (1, cap, False)}
    assert model._runners[(big, cap, False)].active, model._runners[(big, cap, False)].active_error
    # the arenas the model holds: the largest prefill graph's and decode's
    # only; the bucket path holds one more per bucket the prompts used
    held = sum(r.exe.arena_bytes for r in model._runners.values())
    per_bucket = sum(r.exe.arena_bytes for r in buckets._runners.values())
    assert {k[0] for k in buckets._runners} == {1, 16, 64, big}
    assert held == sum(buckets._runners[(s, cap, False)].exe.arena_bytes for s in (1, big))
    assert held < per_bucket
