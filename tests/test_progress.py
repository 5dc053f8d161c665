"""Progress bars: a long prefill draws a tqdm bar on a terminal and nothing
when stderr is not one (pytest captures it: not a TTY)."""

from __future__ import annotations

from pathlib import Path

import pytest
import rlx
from rlx import progress

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
