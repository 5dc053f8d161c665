"""The bounded fuzzing run of CI (issue 15, point 4): each target of
``fuzz/targets.py`` gets a fixed number of mutated inputs from the seeded
mutation fuzzer ``fuzz/mutate.py`` (deterministic for a given seed, capped
at 6 s per target on a slow machine). Every input must be accepted or
rejected with an :class:`rlx.RlxError`; any other exception or a hang
fails the test and leaves the input under the test's tmp dir. The recorded
1,000,000-input campaign and the atheris harnesses are in the README,
"Fuzzing"."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"
sys.path.insert(0, str(FUZZ))

pytest.importorskip("gguf")

import mutate  # noqa: E402

RUNS = {"gguf": 20000, "safetensors": 20000, "model": 8000, "graph_json": 20000, "gguf_rows": 20000,
        "hf_config": 8000}  # fmt: skip


@pytest.mark.parametrize("target", sorted(RUNS))
def test_bounded_fuzz_run(target: str, tmp_path: Path) -> None:
    res = mutate.run(target, RUNS[target], 6.0, seed=15, corpus_dir=FUZZ / "corpus" / target,
                     out=tmp_path, timeout=10.0, quiet=True)  # fmt: skip
    assert res["findings"] == 0, res["findings_list"][:3]
    # the harness really exercised the reader: seeds accepted, mutants rejected
    assert res["ok"] >= 1 and res["rlx_error"] >= 1, res
    assert res["executions"] >= min(RUNS[target], 1000), res
