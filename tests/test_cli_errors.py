"""The ``rlx`` command line on user errors: one ``rlx: error: ...`` line (or
argparse's usage + error for a bad argument) and a non-zero exit, never a
traceback; a closed output pipe exits quietly; Ctrl-C during ``import``
exits 130 quietly. Each case runs the CLI in a subprocess, as a user does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rlx import cli

sys.path.insert(0, str(Path(__file__).parent / "models"))


def _rlx(*args: Any, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "rlx.cli", *args],
        capture_output=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _one_line_error(r: subprocess.CompletedProcess[bytes], needle: str) -> str:
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 1, (r.returncode, err)
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("rlx: error: "), err
    assert needle in lines[0], err
    return lines[0]


@pytest.fixture(scope="module")
def tiny_decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gguf")
    from tiny_gguf import write_tiny

    return write_tiny(tmp_path_factory.mktemp("cli") / "tiny.gguf", "llama", "Q8_0")


def test_directory_without_config_json(tmp_path: Path) -> None:
    (tmp_path / "weights.bin").write_bytes(b"")
    r = _rlx("generate", str(tmp_path), "-p", "hi")
    _one_line_error(r, "without config.json")


def test_prompt_that_is_not_utf8(tiny_decoder: Path) -> None:
    # argv bytes that are not UTF-8 reach Python as lone surrogates
    r = subprocess.run(
        [sys.executable, "-m", "rlx.cli", "generate", str(tiny_decoder), "-p", b"caf\xe9 \xff"],
        capture_output=True,
        timeout=120,
    )
    _one_line_error(r, "not valid UTF-8")


@pytest.mark.parametrize(
    "args, needle",
    [
        (["generate", "x.gguf", "-p", "hi", "--seed", "-1"], "argument --seed: -1 is below"),
        (["bench", "x.gguf", "--repeats", "0"], "argument --repeats: 0 is below"),
        (["demo", "--seq", "0"], "argument --seq: 0 is below"),
        (["generate", "x.gguf", "-p", "hi", "--threads", "-2"], "argument --threads"),
        (["generate", "x.gguf", "-p", "hi", "-n", "ten"], "'ten' is not an integer"),
    ],
)
def test_bad_arguments_are_usage_errors(args: list[str], needle: str) -> None:
    r = _rlx(*args)
    err = r.stderr.decode()
    assert r.returncode == 2 and "Traceback" not in err, err
    assert needle in err and "usage:" in err, err


def test_embed_with_a_decoder_model(tiny_decoder: Path) -> None:
    r = _rlx("embed", "hello", "--model", str(tiny_decoder))
    _one_line_error(r, "not a sentence encoder")


def test_missing_file_is_one_line() -> None:
    r = _rlx("generate", "/nonexistent/model.gguf", "-p", "hi")
    _one_line_error(r, "/nonexistent/model.gguf")


def test_huge_thread_count_is_clamped(tiny_decoder: Path) -> None:
    """``--threads 100000`` warns and runs with at most 4 per core (it used
    to spawn every thread, minutes before the first token)."""
    r = _rlx("generate", str(tiny_decoder), "-p", "hi", "-n", "2", "--threads", "100000")
    err = r.stderr.decode()
    assert r.returncode == 0, err
    assert "RLX_NUM_THREADS" in err and "maximum" in err and "Traceback" not in err


def test_unwritable_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """A model download / assembly that cannot write RLX_CACHE_DIR: one line
    naming the path and the variable (the write itself is simulated: the
    packaged models are not installed on test machines)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("RLX_CACHE_DIR", str(blocker))
    import rlx.io.models as models

    def ensure(name: str, **_kw: Any) -> Path:
        target = models.cache_dir() / "models"
        target.mkdir(parents=True, exist_ok=True)  # NotADirectoryError
        raise AssertionError("unreachable")

    monkeypatch.setattr(models, "ensure_model", ensure)
    assert cli.main(["generate", "smollm2", "-p", "hi"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rlx: error: ") and err.count("\n") == 1, err
    assert str(blocker) in err and "RLX_CACHE_DIR" in err


def test_broken_pipe_exits_quietly(tiny_decoder: Path) -> None:
    """``rlx generate ... | head -c1``: the reader goes away after one byte."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "rlx.cli", "generate", str(tiny_decoder), "-p", "hello",
         "-n", "200", "--ignore-eos"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(1)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert proc.returncode in (0, 141), (proc.returncode, err)
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_ctrl_c_during_import_exits_130_quietly() -> None:
    """KeyboardInterrupt raised inside ``import rlx`` (here from the import of
    numpy, deterministically) in the ``rlx`` command: status 130, no
    traceback."""
    code = (
        "import builtins, sys\n"
        "sys.argv = ['/usr/bin/rlx']\n"
        "real = builtins.__import__\n"
        "def imp(name, *a, **k):\n"
        "    if name == 'numpy':\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = imp\n"
        "import rlx.cli\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    err = r.stderr.decode()
    assert r.returncode == 130, (r.returncode, err)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err


def test_env_lists_problems(monkeypatch: pytest.MonkeyPatch) -> None:
    r = _rlx("env", env={"RLX_SPIN_US": "99999999", "RLX_VERIFY": "maybe"})
    err = r.stderr.decode()
    assert r.returncode == 0, err
    assert "RLX_SPIN_US" in err and "maximum of 10000" in err, err
    assert "RLX_VERIFY" in err and "not a flag" in err, err
