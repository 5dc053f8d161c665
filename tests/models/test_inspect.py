"""``rlx inspect``: the compile report of a model's decode (and prefill)
graph, on tiny random GGUFs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rlx import cli
from rlx.models.decoder import BUCKETS, load
from tiny_gguf import write_tiny


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny(tmp_path_factory.mktemp("inspect") / "llama.gguf", "llama")


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert cli.main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_json_report_is_consistent(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    info = _json(["inspect", str(tiny), "--json"], capsys)
    assert (info["arch"], info["layers"]) == ("llama", 3)
    (dec,) = info["graphs"]
    assert (dec["graph"], dec["tokens"]) == ("decode", 1)
    passes = dec["passes"]
    names = [p["name"] for p in passes]
    assert names[:3] == [
        "rewrite_simple_elementwise_regions",
        "batch_elementwise_regions",
        "rewrite_dense_binary_broadcast",
    ]
    assert "fuse_residual_rms_norm" in names
    # the per-pass thunk counts chain from the lowered to the final schedule
    assert passes[0]["thunks_before"] == dec["dispatches_before"]
    for a, b in zip(passes, passes[1:]):
        assert a["thunks_after"] == b["thunks_before"]
    assert passes[-1]["thunks_after"] == dec["dispatches_after"] == dec["thunks"]
    assert dec["dispatches_after"] <= dec["dispatches_before"] + sum(p["matches"] for p in passes)
    assert 0 < dec["arena_bytes"] <= dec["naive_bytes"]
    assert dec["state_bytes"] > 0  # the KV cache
    for p in passes:
        assert p["name"] in dec["report"]
    # every schedule thunk is a kernel dispatch, a host command or nothing
    # (Nop) in the Metal plan; barriers separate dependent dispatches only
    metal = dec["metal_dispatches"] + dec["metal_host"]
    assert 0 < metal <= dec["thunks"]
    assert dec["metal_dispatches"] > 0
    assert 0 <= dec["metal_barriers"] < dec["metal_dispatches"]


def test_report_matches_a_compile_with_every_pass_off(
    tiny: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    info = _json(["inspect", str(tiny), "--json"], capsys)
    dec = info["graphs"][0]
    names = ",".join(p["name"] for p in dec["passes"])
    monkeypatch.setenv("RLX_DISABLE_PASS", names)
    _, _, exe = load(str(tiny)).compiled(1, decode=True)
    assert exe.stats["dispatches"] == dec["dispatches_before"]
    assert all(exe.stats["pass_matches"][p["name"]] == -1 for p in dec["passes"])


def test_text_report_with_prefill(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["inspect", str(tiny), "--seq", "5"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{tiny}: llama, 3 layers")
    assert "decode graph: 1 new token" in out
    # the graph a 5-token prompt runs on: the largest bucket's, on a prefix
    # of its rows (decoder.ONE_PREFILL_GRAPH), not the 16-token bucket's
    assert f"prefill graph: {BUCKETS[-1]} new tokens" in out
    assert "dispatches per decode token: " in out
    assert "metal plan per decode token: " in out and " host commands" in out
    # one row per graph (the graph-level ir_fuse_residual_rms_norm has its own)
    assert sum(line.startswith("fuse_residual_rms_norm ") for line in out.splitlines()) == 2
    assert out.count("arena ") == 2


def test_unknown_model_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["inspect", "no-such-model"]) == 1
    err = capsys.readouterr().err
    assert "no-such-model" in err and "not a packaged model" in err and "smollm2" in err


def test_bad_seq_is_an_error(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a usage error now (argparse: exit status 2, the argument named)
    with pytest.raises(SystemExit) as e:
        cli.main(["inspect", str(tiny), "--seq", "-2"])
    assert e.value.code == 2
    assert "argument --seq: -2 is below the minimum of 0" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["llama-q8_0", "qwen2-q8_0"])
def test_metal_plan_per_layer_with_the_default_f16_cache(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 14's bound: at most 8 Metal dispatches per layer of a decode
    step — with the GGUF default f16 KV cache, whose rows the k / v
    dispatches round to half as they append them (no cast dispatch)."""
    path = Path(__file__).resolve().parent.parent / "fixtures" / "gguf" / f"{name}.gguf"
    assert load(str(path)).kv_dtype == "f16"
    info = _json(["inspect", str(path), "--json"], capsys)
    (dec,) = info["graphs"]
    per = dec["metal_per_layer"]
    assert len(per["dispatches"]) == info["layers"]
    assert 0 < max(per["dispatches"]) <= 8, per
    # every dispatch and barrier is counted once, in a layer or outside them
    assert sum(per["dispatches"]) + per["outside"][0] == dec["metal_dispatches"]
    assert sum(per["barriers"]) + per["outside"][1] == dec["metal_barriers"]
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    line = f"metal plan per layer: at most {max(per['dispatches'])} dispatches and "
    assert line in out, out
