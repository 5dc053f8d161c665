"""Traces (``RLX_TRACE`` / ``--trace``): the file is a valid Chrome / Perfetto
trace-event document (checked with ``jsonschema`` against the schema below,
written from the trace-event format's description: JSON-object form,
complete ``X`` events with µs ``ts`` / ``dur``, ``M`` metadata naming the
process and threads), and it holds what it promises: compile slices with
their stages, one slice per thunk inside its run slice with the bytes its
operands span (checked against sizes computed here from the shapes), native
vs fallback, prefill and per-token generation spans."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rlx
from rlx import trace
from rlx.cli import main

jsonschema = pytest.importorskip("jsonschema")

LLAMA = Path(__file__).resolve().parent / "fixtures" / "gguf" / "llama-q8_0.gguf"

_NUM = {"type": "number", "minimum": 0}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {"type": "array", "items": {"$ref": "#/$defs/event"}},
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
    },
    "$defs": {
        "event": {
            "type": "object",
            "required": ["name", "ph", "pid", "tid"],
            "properties": {
                "name": {"type": "string"},
                "cat": {"type": "string"},
                "ph": {"enum": ["X", "B", "E", "i", "I", "C", "M", "b", "e", "n", "s", "t", "f"]},
                "pid": {"type": "integer"},
                "tid": {"type": "integer"},
                "ts": _NUM,
                "dur": _NUM,
                "args": {"type": "object"},
            },
            "allOf": [
                {
                    "if": {"properties": {"ph": {"const": "X"}}},
                    "then": {"required": ["ts", "dur", "cat"]},
                },
                {
                    "if": {"properties": {"ph": {"const": "M"}}},
                    "then": {
                        "required": ["args"],
                        "properties": {
                            "name": {
                                "enum": [
                                    "process_name",
                                    "thread_name",
                                    "process_sort_index",
                                    "thread_sort_index",
                                    "process_labels",
                                ]
                            },  # fmt: skip
                            "args": {"required": ["name"]},
                        },
                    },
                },
            ],
        }
    },
}


def _load(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, SCHEMA)
    return doc


def _slices(doc: dict[str, Any], cat: str) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and e.get("cat") == cat]


def test_schema_rejects_broken_events() -> None:
    """The schema has teeth: a slice without ``dur`` or a bad phase fails."""
    bad = [
        {"traceEvents": [{"name": "a", "ph": "X", "pid": 1, "tid": 1, "ts": 0, "cat": "c"}]},
        {"traceEvents": [{"name": "a", "ph": "Q", "pid": 1, "tid": 1}]},
        {
            "traceEvents": [
                {"name": "a", "ph": "X", "pid": 1, "tid": 1, "ts": -1, "dur": 1, "cat": "c"}
            ]
        },  # fmt: skip
    ]
    for doc in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(doc, SCHEMA)


def test_generate_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "trace.json"
    rc = main(["generate", str(LLAMA), "-p", "hello world", "-n", "6", "--ignore-eos",
               "--trace", str(out)])  # fmt: skip
    assert rc == 0
    assert "trace of" in capsys.readouterr().err
    doc = _load(out)
    assert trace.current() is None  # stopped after the command
    compiles = _slices(doc, "compile")
    names = {e["name"] for e in compiles}
    assert {"check", "fuse", "lower + plan", "passes"} <= names
    assert any(n.startswith("graph s=") for n in names)  # the decoder's graph build
    gen = _slices(doc, "generate")
    assert [e["name"] for e in gen].count("prefill") == 1
    assert [e["name"] for e in gen].count("token") == 5  # tokens 2..6
    whole = next(e for e in gen if e["name"] == "generate")
    assert whole["args"]["tokens"] == 6
    runs = _slices(doc, "run")
    thunks = _slices(doc, "thunk")
    assert len(runs) == 6  # one prefill chunk + 5 decode steps
    for r in runs:  # every thunk slice lies inside exactly one run slice
        inside = [t for t in thunks if r["ts"] <= t["ts"] and
                  t["ts"] + t["dur"] <= r["ts"] + r["dur"] + 1.0]  # fmt: skip
        assert len(inside) == r["args"]["thunks"] > 0
    assert sum(r["args"]["thunks"] for r in runs) == len(thunks)
    for t in thunks:
        a = t["args"]
        assert a["bytes_read"] >= 0 and a["bytes_written"] > 0 and isinstance(a["native"], bool)
    threads = [e for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
    assert threads


def test_thunk_bytes_and_native_flag(tmp_path: Path) -> None:
    """An add of two f32[4, 8] reads 2 × 128 bytes and writes 128; on the
    reference device the same thunk is a fallback (native = false)."""
    g = rlx.Graph("add")
    a = g.input("a", [4, 8])
    b = g.input("b", [4, 8])
    g.outputs(g.add(a, b, name="sum"))
    feeds = {"a": np.ones((4, 8), np.float32), "b": np.ones((4, 8), np.float32)}
    for device, native in (("host", True), ("reference", False)):
        tr = trace.start(tmp_path / f"{device}.json")
        exe = rlx.compile(g, device=device)
        exe.run(**feeds)
        trace.stop()
        doc = _load(tr.path)
        (t,) = _slices(doc, "thunk")
        assert t["args"]["bytes_read"] == 2 * 4 * 8 * 4
        assert t["args"]["bytes_written"] == 4 * 8 * 4
        assert t["args"]["native"] is native
        (r,) = _slices(doc, "run")
        assert r["name"] == "run add" and r["args"]["device"] == device
        assert any(e["name"] == "compile add" for e in _slices(doc, "compile"))
    # tracing off: the executor records nothing
    exe.run(**feeds)
    assert exe._native.take_trace() == []


def test_rlx_trace_env_writes_at_exit(tmp_path: Path) -> None:
    out = tmp_path / "env.json"
    code = (
        "import numpy as np, rlx\n"
        "g = rlx.Graph('env'); x = g.input('x', [2, 3]); g.outputs(g.relu(x))\n"
        "rlx.compile(g).run(x=np.ones((2, 3), np.float32))\n"
    )
    env = {**os.environ, "RLX_TRACE": str(out)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    doc = _load(out)
    assert [e["name"] for e in _slices(doc, "run")] == ["run env"]
    assert len(_slices(doc, "thunk")) >= 1


def test_trace_to_missing_directory_is_a_user_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["generate", str(LLAMA), "-p", "hi", "-n", "1",
               "--trace", str(tmp_path / "no" / "t.json")])  # fmt: skip
    assert rc == 1 and "does not exist" in capsys.readouterr().err
