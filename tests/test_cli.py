"""The ``rlx`` command line."""

from __future__ import annotations

import subprocess
import sys

import pytest
from rlx import cli


def test_demo_prints_graph_and_symbolic_output_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["demo"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("graph demo (")
    for op in ("gather(", "rms_norm{", "rope{", "attention{", "fused_swiglu{", "mat_mul("):
        assert op in out, op
    assert "mask=causal" in out and "kv_heads=2" in out
    assert "output logits: f32[1, seq, 256]" in out


def test_demo_graph_structure() -> None:
    g = cli.build_demo_graph(layers=2)
    ops = [n.op for n in g]
    assert ops.count("attention") == 2 and ops.count("fused_swiglu") == 2
    (logits,) = g.outputs()
    assert logits.shape == (1, "seq", 256) and logits.dtype == "f32"
    att = next(n for n in g if n.op == "attention")
    assert att.attrs["heads"] == 4 and att.attrs["kv_heads"] == 2
    assert att.inputs[1].shape == (1, "seq", 32)  # GQA: fewer kv heads


def test_env_and_entry_point() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "rlx.cli", "env"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and "RLX_" in r.stdout
    r = subprocess.run(
        [sys.executable, "-m", "rlx.cli", "demo", "--layers", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert "output logits: f32[1, seq, 256]" in r.stdout
