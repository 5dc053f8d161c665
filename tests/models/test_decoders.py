"""Decoder builders on tiny random GGUFs (F32, Q8_0, Q4_0 weights) against the
independent float64 numpy forward pass of ``tiny_gguf.py``; cached decode against
full recompute; padded buckets; chunked long prompts; bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import rlx
from rlx.models.decoder import DecoderModel, inplace_available
from rlx.sampling import SamplingParams
from tiny_gguf import INT8_PREFILL_TOL, exact_prefill, reference_logits, write_tiny

gguf = pytest.importorskip("gguf")

#: ``tiny(arch, qtype)`` → (path, loaded model), cached per module and cache mode.
Tiny = Callable[[str, str], "tuple[Path, DecoderModel]"]

ARCHS = ("llama", "qwen2", "qwen3", "gemma3")
#: max |rlx − oracle| relative to the oracle's largest |logit| with exact
#: dequantizing matmuls (F32 weights, or the int8 prefill GEMM off): f32
#: rounding only (measured ~2e-6). With the GEMM on: ``INT8_PREFILL_TOL``.
TOL = 1e-4


#: Decode steps (one row) against prefill rows with quantised weights: on CPUs
#: with AVX-512 VNNI the m <= 8 packed matmuls round activations to 8-bit blocks
#: (as llama.cpp does), bounded per output by 1/2 sum|w| * max|x|/127 per block;
#: on these tiny random models that is up to ~3% of the logits' scale. Prefill
#: (m > 8) rounds on two levels (``INT8_PREFILL_TOL``); F32 weights stay exact.
DECODE_VS_PREFILL_TOL = 5e-2


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


#: KV-cache modes to test: the copy mode always, the in-place mode once the
#: executor has share_state and attention(kv_len=). The models load with the
#: f32 cache (the GGUF default is f16): these tests hold rlx to the float64
#: oracle at f32 rounding; the f16 cache is test_kv_cache_f16.py's.
MODES = [False] + ([True] if inplace_available() else [])


@pytest.fixture(scope="module", params=MODES, ids=lambda m: "inplace" if m else "copy")
def tiny(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Tiny:
    cache: dict[tuple[str, str], tuple[Path, DecoderModel]] = {}

    def get(arch: str, qtype: str) -> tuple[Path, DecoderModel]:
        key = (arch, qtype)
        if key not in cache:
            path = write_tiny(tmp_path_factory.mktemp("tiny") / f"{arch}_{qtype}.gguf", arch, qtype)
            cache[key] = (path, rlx.load(str(path), inplace=request.param, kv_dtype="f32"))
        return cache[key]

    return get


def _ids(n: int, seed: int = 1) -> list[int]:
    return [256] + [int(t) for t in np.random.default_rng(seed).integers(0, 256, n - 1)]


@pytest.mark.parametrize("qtype", ["F32", "Q8_0", "Q4_0"])
@pytest.mark.parametrize("arch", ARCHS)
def test_logits_match_numpy_oracle(tiny: Tiny, arch: str, qtype: str) -> None:
    path, model = tiny(arch, qtype)
    ids = _ids(23)
    got = model.logits(ids)
    want = reference_logits(path, arch, ids)
    assert got.shape == want.shape == (23, model.config.vocab)
    assert _rel(got, want) < (TOL if qtype == "F32" else INT8_PREFILL_TOL)
    assert np.mean(got.argmax(-1) == want.argmax(-1)) >= 0.95
    with exact_prefill():
        assert _rel(model.logits(ids), want) < TOL


@pytest.mark.parametrize("arch", ARCHS)
def test_cached_decode_equals_full_recompute(tiny: Tiny, arch: str) -> None:
    _, model = tiny(arch, "F32")
    ids = _ids(30, seed=2)
    full = model.logits(ids)
    model.reset(len(ids))
    steps = [model.next_logits(ids[:7])]  # padded prefill (bucket 16)
    for t in ids[7:]:
        steps.append(model.next_logits([t]))  # one cached decode step each
    with pytest.raises(rlx.RlxError, match="no tokens"):
        model.next_logits([])
    assert _rel(np.stack(steps), full[6:]) < 1e-4


@pytest.mark.skipif(not inplace_available(), reason="executor lacks share_state / kv_len")
@pytest.mark.parametrize("native", [True, False], ids=["native", "numpy"])
@pytest.mark.parametrize("arch", ARCHS)
def test_decode_fast_path_equals_general_path(
    tmp_path: Path, arch: str, native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The per-token path (inputs written into the arena, by ``_rlx.DecodeStep``
    or through numpy views, then run) gives the logits of the general feed
    path bit for bit, and is taken."""
    from rlx.models import decoder

    monkeypatch.setattr(decoder, "NATIVE_STEP", native)
    path = write_tiny(tmp_path / f"{arch}.gguf", arch, "Q8_0")
    fast, slow = rlx.load(str(path), inplace=True), rlx.load(str(path), inplace=True)
    slow._step = None  # the general path: feeds dict, Executable.run
    ids = _ids(12, seed=5)
    out = {}
    for name, m in (("fast", fast), ("slow", slow)):
        m.reset(len(ids))
        rows = [m.next_logits(ids[:3])] + [m.next_logits([t]) for t in ids[3:]]
        out[name] = np.stack(rows)
    np.testing.assert_array_equal(out["fast"], out["slow"])
    step = fast._runners[(1, fast._cap, False)].step
    assert step, f"{arch}: the decode graph did not take the fast path"
    assert (step[-1] is not None) == native


def test_native_decode_step_rejects_bad_layouts() -> None:
    """``_rlx.DecodeStep`` checks its table and offsets, naming the input."""
    from rlx import _rlx

    table = np.zeros((4, 34), np.uint8)  # 4 Q8_0 rows of k=32
    ok = dict(table=table, ggml_type=8, k=32, scale=1.0, x=0, rope=[([1.0] * 4, 128, 144)],
              slots=160, kv_len=164, row=None, arena_len=256)  # fmt: skip
    _rlx.DecodeStep(**ok)
    for bad, what in (
        ({"x": 200}, "x"),
        ({"kv_len": 254}, "kv_len"),
        ({"rope": [([1.0] * 40, 128, 144)]}, "cos"),
        ({"slots": 2}, "slots"),
        ({"k": 64}, "table"),
    ):
        with pytest.raises(rlx.RlxError, match=rf"\[decode_step\].*{what}"):
            _rlx.DecodeStep(**{**ok, **bad})


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_padded_bucket_equals_exact_length(tiny: Tiny, arch: str) -> None:
    """5 tokens padded into the 16-bucket == the same 5 tokens fed one by one."""
    _, model = tiny(arch, "Q8_0")
    ids = _ids(5, seed=3)
    model.reset(8)
    padded = model._feed(ids)
    model.reset(8)
    for t in ids:
        exact = model._feed([t])
    assert _rel(padded, exact) < DECODE_VS_PREFILL_TOL


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_long_prompt_runs_in_chunks(tiny: Tiny, arch: str) -> None:
    path, model = tiny(arch, "F32")
    ids = _ids(300, seed=4)  # > the largest bucket (256): two chunks, the second cached
    got = model.logits(ids)
    want = reference_logits(path, arch, ids)
    assert _rel(got, want) < 1e-4


def test_greedy_generation_matches_oracle(tiny: Tiny) -> None:
    path, model = tiny("qwen2", "F32")
    ids = _ids(6, seed=5)
    got = list(model.generate_ids(ids, 8))
    seq = list(ids)
    for _ in range(len(got)):
        nxt = int(reference_logits(path, "qwen2", seq)[-1].argmax())
        if nxt == 257:
            break
        seq.append(nxt)
    assert got == seq[len(ids) :]


def test_seeded_sampling_is_reproducible(tiny: Tiny) -> None:
    _, model = tiny("llama", "F32")
    p = SamplingParams(temperature=1.0, top_k=50, top_p=0.9)
    a = list(model.generate_ids(_ids(4), 10, p, seed=7))
    b = list(model.generate_ids(_ids(4), 10, p, seed=7))
    assert a == b and len(a) > 0


def test_prompt_longer_than_context_fails_before_work(tiny: Tiny) -> None:
    _, model = tiny("llama", "F32")
    before = dict(model._runners)
    with pytest.raises(rlx.RlxError, match="context is 1024"):
        model.generate_ids(_ids(1024), 4)
    assert model._runners == before


def test_stop_strings_cut_the_stream(tiny: Tiny) -> None:
    _, model = tiny("llama", "F32")
    full = "".join(model.generate("ab", max_tokens=12))
    assert len(full) >= 4
    stop = full[2:4]
    cut = "".join(model.generate("ab", max_tokens=12, stop=[stop]))
    assert cut == full[: full.find(stop)]


def test_unsupported_architecture(tmp_path: Path) -> None:
    path = tmp_path / "rwkv6.gguf"
    w = gguf.GGUFWriter(str(path), "rwkv6")
    w.add_uint32("rwkv6.block_count", 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    supported = "gemma3, .*lfm2, llama, .*mixtral, olmoe, qwen2, qwen2moe, qwen3, .*qwen3moe"
    with pytest.raises(rlx.WeightFormatError, match=rf"rwkv6\.gguf.*'rwkv6'.*{supported}"):
        rlx.load(str(path))


def test_missing_tensor_is_named(tmp_path: Path) -> None:
    src = write_tiny(tmp_path / "full.gguf", "llama")
    r = gguf.GGUFReader(str(src))
    path = tmp_path / "broken.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        w.add_key_value(key, field.contents(), field.types[0], field.types[-1]
                        if field.types[0] == gguf.GGUFValueType.ARRAY else None)  # fmt: skip
    for t in r.tensors:
        if t.name != "blk.1.ffn_up.weight":
            w.add_tensor(t.name, np.asarray(t.data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(rlx.WeightFormatError, match=r"broken\.gguf.*blk\.1\.ffn_up\.weight"):
        rlx.load(str(path))


def test_unknown_name_is_an_error() -> None:
    with pytest.raises(rlx.WeightFormatError, match="smollm2"):
        rlx.load("no-such-model")


@pytest.mark.skipif(not inplace_available(), reason="executor lacks share_state / kv_len")
@pytest.mark.parametrize("arch", ARCHS)
def test_inplace_cache_matches_oracle(tmp_path: Path, arch: str) -> None:
    """The in-place cache mode (shared state, scatter, kv_len): teacher-forced
    logits over two chunks and cached greedy decode against the oracle."""
    path = write_tiny(tmp_path / f"{arch}.gguf", arch, "Q8_0")
    model = rlx.load(str(path), inplace=True, kv_dtype="f32")
    ids = _ids(300, seed=6)
    want = reference_logits(path, arch, ids)
    assert _rel(model.logits(ids), want) < INT8_PREFILL_TOL
    with exact_prefill():
        assert _rel(model.logits(ids), want) < TOL
    full = model.logits(ids[:40])
    model.reset(40)
    steps = [model._feed(ids[:7])] + [model._feed([t]) for t in ids[7:40]]
    assert _rel(np.stack(steps), full[6:]) < DECODE_VS_PREFILL_TOL


def test_bench_figures_on_tiny_model(tiny: Tiny) -> None:
    from rlx.models import bench

    path, _ = tiny("llama", "Q8_0")
    res = bench.run(str(path), repeats=1)
    assert {"load_s", "pp64", "pp256", "tg32", "tg128", "peak_rss_mib"} <= set(res)
    assert all(res[k] > 0 for k in ("pp64", "pp256", "tg32", "tg128", "peak_rss_mib"))


def test_bench_depth_and_decode_profile_shape(tiny: Tiny) -> None:
    """``rlx bench --depth N --profile``: a ``tg64@dN`` per depth and a decode
    profile whose parts (thunk kinds, executor, Python) add up to the step."""
    from rlx.models import bench

    path, _ = tiny("llama", "Q8_0")
    res = bench.run(str(path), repeats=1, depths=(0, 20), profile=True, standard=False)
    assert "pp64" not in res and res["tg64@d0"] > 0 and res["tg64@d20"] > 0
    p = res["profile"]
    parts = ("gemv", "attention", "norm", "other", "executor", "python")
    assert set(p["ms_per_token"]) == {*parts, "total"}
    ms = p["ms_per_token"]
    assert all(ms[k] >= 0 for k in parts if k != "executor") and ms["total"] > 0
    assert abs(sum(ms[k] for k in parts) - ms["total"]) < 1e-3 * ms["total"] + 1e-3
    assert abs(sum(p["fraction"].values()) - 1.0) < 1e-3
    assert p["python_cpu_ms"] >= 0 and p["python_cpu_fraction"] == pytest.approx(
        p["python_cpu_ms"] / ms["total"], rel=0.05, abs=1e-3
    )  # both rounded to 4 decimals
    assert ms["gemv"] > 0 and ms["attention"] > 0  # the tiny llama has both
    assert p["by_thunk"] and sum(p["by_thunk"].values()) <= ms["total"]
    text = bench.format_profile(p)
    assert "attention" in text and "python" in text and "ms/token" in text
    assert bench.thunk_kind("attention") == "attention"
    assert bench.thunk_kind("rms_norm") == "norm"
    assert bench.thunk_kind("dequant_matmul_gguf") == "gemv"
    assert bench.thunk_kind("fused_mlp_down_residual") == "gemv"
    assert bench.thunk_kind("rope") == "other"


@pytest.mark.parametrize(
    ("pattern", "windows"),
    [(2, [5, 0, 5]), (3, [5, 5, 0]), ([True, False, False], [5, 0, 0])],
)
def test_gemma3_layer_pattern_from_metadata(
    tmp_path: Path, pattern: object, windows: list[int]
) -> None:
    """``sliding_window_pattern`` as a period (every n-th layer global) or as
    one flag per layer (True = sliding window) picks windows and RoPE bases."""
    path = write_tiny(tmp_path / "g.gguf", "gemma3", pattern=pattern)
    cfg = rlx.load(str(path)).config
    assert cfg.windows == windows
    assert cfg.rope_bases == [10000.0 if w else 1e6 for w in windows]


@pytest.mark.parametrize("qtype", ["F32", "Q8_0", "Q4_0"])
def test_embedding_rows_match_gguf_dequantize(tmp_path: Path, qtype: str) -> None:
    """Token embeddings (native row dequantizer when present, else gguf's)."""
    from rlx.io.gguf import open_gguf
    from rlx.models.base import Weights

    path = write_tiny(tmp_path / "e.gguf", "llama", qtype)
    f = open_gguf(path)
    ids = np.array([0, 7, 256, 257, 7])
    got = Weights(f).embedding_rows("token_embd.weight", ids)
    t = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "token_embd.weight")
    want = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(258, -1)[ids]
    np.testing.assert_array_equal(got, want)
