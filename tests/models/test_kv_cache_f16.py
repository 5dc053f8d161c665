"""The half-precision KV cache (``rlx.load(..., kv_dtype="f16")``) on the tiny
random GGUFs of ``tiny_gguf.py``:

* logits equal the float64 numpy oracle run on keys / values rounded to
  float16 (``reference_logits(kv_f16=True)``) to f32 rounding, in both cache
  modes (copy and in-place), for every tiny architecture (GQA, Q/K norms,
  Gemma 3's sliding-window layers), teacher-forced and one token at a time,
  and over a 300-token prompt in two chunks;
* greedy generation gives the same tokens as the f32 cache;
* the cache states are float16 and take half the bytes;
* batched decode (one step for several sequences over an f16 cache) equals
  each sequence decoded alone;
* the reference device runs the same graphs;
* the converting ScatterND write stores the same bits, and gives the same
  logits bit for bit, as the explicit cast node it replaced (one thunk
  fewer per K and per V per layer);
* a bad ``kv_dtype`` is a :class:`rlx.DTypeError` naming the argument.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rlx
from rlx.graph import Node
from rlx.models.base import Config
from rlx.models.decoder import inplace_available
from tiny_gguf import exact_prefill, reference_logits, write_tiny

pytest.importorskip("gguf")

ARCHS = ("llama", "qwen2", "qwen3", "gemma3")
#: max |rlx − oracle| / max |oracle| with exact matmuls: f32 rounding, plus
#: the odd key rounded to the other f16 neighbour (rlx rounds f32 values, the
#: oracle float64 ones); measured up to 6.3e-5
TOL = 1e-4
MODES = [False] + ([True] if inplace_available() else [])


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _ids(n: int, seed: int = 1) -> list[int]:
    return [256] + [int(t) for t in np.random.default_rng(seed).integers(0, 256, n - 1)]


@pytest.mark.parametrize("inplace", MODES, ids=lambda m: "inplace" if m else "copy")
@pytest.mark.parametrize("arch", ARCHS)
def test_f16_cache_matches_the_f16_rounded_oracle(tmp_path: Path, arch: str, inplace: bool) -> None:
    path = write_tiny(tmp_path / f"{arch}.gguf", arch, "F32")
    model = rlx.load(str(path), inplace=inplace, kv_dtype="f16")
    assert model.kv_dtype == "f16"
    ids = _ids(23)
    want = reference_logits(path, arch, ids, kv_f16=True)
    with exact_prefill():
        err = _rel(model.logits(ids), want)
        assert err < TOL
        # the f16 rounding is what is measured: the f32 oracle is far further
        # away (2.4e-5 on Gemma 3 to 8.6e-4 on Qwen2)
        assert _rel(model.logits(ids), reference_logits(path, arch, ids)) > 5 * err
        model.reset(len(ids))
        steps = [model.next_logits(ids[:5])] + [model.next_logits([t]) for t in ids[5:]]
    assert _rel(np.stack(steps), want[4:]) < TOL


@pytest.mark.parametrize("arch", ARCHS)
def test_long_prompt_in_two_chunks(tmp_path: Path, arch: str) -> None:
    """300 tokens (two prefill chunks, the second over the cached first):
    within 5e-4 of the f16-rounded oracle. Over this many keys a few round to
    the other f16 neighbour than the oracle's (rlx rounds an f32 key, the
    oracle its float64 value): measured 5e-6 (Gemma 3) to 2.1e-4 (Llama)."""
    path = write_tiny(tmp_path / f"{arch}.gguf", arch, "Q8_0")
    model = rlx.load(str(path), kv_dtype="f16")
    ids = _ids(300, seed=6)
    with exact_prefill():
        got = model.logits(ids)
    assert _rel(got, reference_logits(path, arch, ids, kv_f16=True)) < 5e-4


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_tokens_equal_the_f32_cache(tmp_path: Path, arch: str) -> None:
    path = write_tiny(tmp_path / f"{arch}.gguf", arch, "Q8_0")
    tokens = {}
    for kv in ("f32", "f16"):
        m = rlx.load(str(path), kv_dtype=kv)
        tokens[kv] = list(m.generate_ids(_ids(9, seed=3), 24, ignore_eos=True))
    assert len(tokens["f16"]) == 24
    assert tokens["f16"] == tokens["f32"]


@pytest.mark.parametrize("inplace", MODES, ids=lambda m: "inplace" if m else "copy")
def test_cache_states_are_half_the_bytes(tmp_path: Path, inplace: bool) -> None:
    path = write_tiny(tmp_path / "llama.gguf", "llama", "F32")
    exes = {}
    for kv in ("f32", "f16"):
        m = rlx.load(str(path), inplace=inplace, kv_dtype=kv)
        m.next_logits(_ids(3))
        m.next_logits([5])  # a decode step: the graph that holds the cache
        _, _, exes[kv] = m.compiled(1, True)
        state = exes[kv].states["k0"]
        assert state.np_dtype == np.dtype(np.float16 if kv == "f16" else np.float32)
        if not inplace:  # the cache's master copy too
            assert m._k.dtype == state.np_dtype
    b16, b32 = (exes[kv].stats["state_bytes"] for kv in ("f16", "f32"))
    assert b16 * 2 == b32 > 0


def test_gguf_default_is_f16_and_hf_f32(tmp_path: Path) -> None:
    path = write_tiny(tmp_path / "qwen3.gguf", "qwen3", "F32")
    assert rlx.load(str(path)).kv_dtype == "f16"
    assert rlx.load(str(path), kv_dtype="f32").kv_dtype == "f32"


@pytest.mark.skipif(not inplace_available(), reason="executor lacks share_state / kv_len")
def test_batched_decode_over_an_f16_cache_equals_each_alone(tmp_path: Path) -> None:
    from rlx.models.batch import BatchDecoder

    path = write_tiny(tmp_path / "gemma3.gguf", "gemma3", "Q8_0")  # sliding windows
    model = rlx.load(str(path), kv_dtype="f16")
    prompts = [_ids(7, seed=11), _ids(4, seed=12), _ids(12, seed=13)]
    bd = BatchDecoder(model, slots=3, ctx=64)
    assert bd.cache_bytes == 2 * 3 * 64 * model.config.kv_dim * 2 * model.config.n_layers
    toks, pos, alone = [], [], []
    for row, p in enumerate(prompts):
        s = model.session()
        s.reset(len(p) + 4)
        first = int(np.argmax(s.next_logits(p)))
        bd.load(row, s, len(p))
        toks.append(first)
        pos.append(len(p))
        ref = [first]
        for _ in range(3):
            ref.append(int(np.argmax(s.next_logits([ref[-1]]))))
        alone.append(ref)
    got = [[t] for t in toks]
    for _ in range(3):
        logits = bd.step(toks, pos)
        toks = [int(np.argmax(r)) for r in logits]
        pos = [p + 1 for p in pos]
        for g, t in zip(got, toks):
            g.append(t)
    assert got == alone


def _cast_then_scatter(
    g: rlx.Graph, new: Node, name: str, slots: Node, c: int, cfg: Config, kv_dtype: str
) -> Node:
    """The decoders' cache write before ScatterND converted on write: an
    explicit cast node to the cache's dtype, then the scatter."""
    s = new.shape[1]
    upd = g.reshape(new, [s, cfg.kv_dim])
    if kv_dtype != "f32":
        upd = g.cast(upd, kv_dtype)
    full = g.scatter_nd(g.state(name, [c, cfg.kv_dim], kv_dtype), slots, upd)
    return g.reshape(full, [1, c, cfg.kv_dim])


@pytest.mark.skipif(not inplace_available(), reason="executor lacks share_state / kv_len")
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_converting_write_is_bit_identical_to_cast_then_scatter(
    tmp_path: Path, arch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The f16 cache written by the converting ScatterND holds the same bits,
    and the decoder gives the same logits bit for bit, as with the explicit
    cast node it replaced — which cost one extra thunk per K and per V per
    layer."""
    from rlx.models import mixers

    path = write_tiny(tmp_path / f"{arch}.gguf", arch, "Q8_0")
    ids = _ids(11, seed=5)
    runs = []
    for explicit in (False, True):
        if explicit:
            monkeypatch.setattr(mixers, "_scatter_cache", _cast_then_scatter)
        m = rlx.load(str(path), inplace=True, kv_dtype="f16")
        m.reset(len(ids))
        logits = [m.next_logits(ids[:6])] + [m.next_logits([t]) for t in ids[6:]]
        _, _, exe = m.compiled(1, True)
        states = {n: np.asarray(exe.state(n)).copy() for n in ("k0", "v0", "k1", "v1")}
        runs.append((logits, states, exe.stats["by_thunk"], m.config.n_layers))
    (got, got_states, got_thunks, layers), (want, want_states, want_thunks, _) = runs
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    for n, v in want_states.items():
        assert v.dtype == np.float16
        np.testing.assert_array_equal(got_states[n].view(np.uint16), v.view(np.uint16))
    extra = sum(want_thunks.values()) - sum(got_thunks.values())
    assert extra == 2 * layers, (got_thunks, want_thunks)


def test_reference_device_runs_the_f16_cache(tmp_path: Path) -> None:
    path = write_tiny(tmp_path / "qwen2.gguf", "qwen2", "F32")
    ids = _ids(6, seed=4)
    want = reference_logits(path, "qwen2", ids, kv_f16=True)
    model = rlx.load(str(path), device="reference", kv_dtype="f16")
    assert _rel(model.logits(ids), want) < TOL


@pytest.mark.parametrize("bad", ["bf16", "float16", "F16", 16])
def test_bad_kv_dtype_names_the_argument(tmp_path: Path, bad: object) -> None:
    path = write_tiny(tmp_path / "llama.gguf", "llama", "F32")
    with pytest.raises(rlx.DTypeError, match=r"\[load\] kv_dtype must be one of f16, f32"):
        rlx.load(str(path), kv_dtype=bad)  # type: ignore[arg-type]
