"""rlx.Tokenizer against token ids from independent tokenizers.

tests/fixtures/tokenizer_<model>.json is written by scripts/make_fixtures.py
from llama.cpp (llama-cpp-python) and/or transformers' GGUF conversion; the
``primary`` field says whose ids are in ``ids``. Neither oracle is needed here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
import rlx
from rlx.io.gguf import GGUFFile
from rlx.tokenizer import Tokenizer

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MODELS = [
    "smollm2",
    "gemma3-270m",
    pytest.param("qwen2.5-0.5b", marks=pytest.mark.qwen),
]

_TOKENIZERS: dict[str, Tokenizer] = {}


def _fixture(model: str) -> dict[str, Any]:
    path = FIXTURES / f"tokenizer_{model}.json"
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(params=MODELS)
def model(request: pytest.FixtureRequest) -> str:
    """The model under test."""
    return request.param


@pytest.fixture
def tok(model: str, model_or_skip: Callable[[str], Path]) -> Tokenizer:
    """The model's tokenizer, built once per session."""
    if model not in _TOKENIZERS:
        _TOKENIZERS[model] = Tokenizer.from_gguf(model_or_skip(model))
    return _TOKENIZERS[model]


@pytest.fixture
def fx(model: str) -> dict[str, Any]:
    """The model's fixture file."""
    return _fixture(model)


def test_fixture_ids_exact(tok: Tokenizer, fx: dict[str, Any]) -> None:
    """Every case's ids equal the oracle's exactly."""
    assert fx["file"] == Path(tok.path).name
    mismatches = []
    for case in fx["cases"]:
        got = tok.encode(case["text"], add_special=case["add_special"])
        if got != case["ids"]:
            mismatches.append((case["name"], got, case["ids"]))
    assert not mismatches, f"{len(mismatches)}/{len(fx['cases'])} differ: {mismatches[:3]}"
    assert len(fx["cases"]) >= 18


def test_chat_template_and_ids(tok: Tokenizer, fx: dict[str, Any]) -> None:
    """The rendered chat prompt equals the oracle's text, and so do its ids."""
    chat = fx["chat"]
    assert chat is not None
    text = tok.apply_chat_template(chat["messages"], chat["add_generation_prompt"])
    assert text == chat["text"]
    ids = tok.encode(text, add_special=chat["add_special"])
    assert ids == chat["ids"]
    # control tokens come out whole: the prompt starts a turn with one id
    start = "<start_of_turn>" if tok.architecture.startswith("gemma") else "<|im_start|>"
    assert tok.token_id(start) in ids


def test_roundtrip_decode(tok: Tokenizer, fx: dict[str, Any]) -> None:
    """decode(encode(text)) gives the text back for every case."""
    for case in fx["cases"]:
        ids = tok.encode(case["text"], add_special=False)
        assert tok.decode(ids) == case["text"], case["name"]
        assert tok.decode(case["ids"], skip_special=True) == case["text"], case["name"]


def test_stream_decoder_utf8_across_tokens(tok: Tokenizer, fx: dict[str, Any]) -> None:
    """Streaming decode never emits half a character, and adds up to the text."""
    split_somewhere = False
    for case in fx["cases"]:
        stream = tok.stream()
        parts = [stream.push(i) for i in case["ids"]]
        parts.append(stream.flush())
        assert "".join(parts) == case["text"], case["name"]
        assert all("\ufffd" not in p for p in parts)
        for i in case["ids"]:
            piece = tok.decode_piece(i)
            try:
                piece.decode("utf-8")
            except UnicodeDecodeError:
                split_somewhere = True
    assert split_somewhere, "no case splits a character across tokens: the test tests nothing"


def test_special_ids(tok: Tokenizer, model: str) -> None:
    """BOS / EOS / end-of-turn ids (from the GGUF metadata and known turn tokens)."""
    expect = {
        "smollm2": (1, {0, 2}, False),
        "gemma3-270m": (2, {1, 106}, True),
        "qwen2.5-0.5b": (151643, {151643, 151645}, False),
    }[model]
    assert (tok.bos_id, set(tok.eos_ids), tok.add_bos) == expect
    turn_end = "<end_of_turn>" if model.startswith("gemma") else "<|im_end|>"
    assert tok.token_id(turn_end) in tok.eos_ids
    assert tok.decode([tok.token_id(turn_end)]) == turn_end
    assert tok.decode([tok.token_id(turn_end)], skip_special=True) == ""


def test_parse_special_off(tok: Tokenizer, model: str) -> None:
    """With parse_special=False a control token written in text is plain text."""
    marker = "<start_of_turn>" if model.startswith("gemma") else "<|im_start|>"
    on = tok.encode(marker, add_special=False)
    off = tok.encode(marker, add_special=False, parse_special=False)
    assert on == [tok.token_id(marker)]
    assert len(off) > 1 and tok.decode(off) == marker


def test_fixture_oracles_recorded() -> None:
    """Each fixture says which tool produced it; where both oracles ran, report
    how often they agree (they need not: the primary one is asserted)."""
    for model in ("smollm2", "gemma3-270m", "qwen2.5-0.5b"):
        fx = _fixture(model)
        assert fx["primary"] in fx["generated_by"]
        assert all(c["ids"] == c[f"ids_{fx['primary'].replace('.', '_')}"] for c in fx["cases"])


def test_bad_tokenizer_metadata(tmp_path: Path) -> None:
    """A GGUF without tokenizer metadata fails with WeightFormatError naming the key."""
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "notok.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(rlx.WeightFormatError, match=r"notok\.gguf.*tokenizer\.ggml\.model"):
        Tokenizer.from_gguf(path)


def test_find_strs_and_lazy_tokens(tmp_path: Path) -> None:
    """GGUFFile.find_strs gives the last index of each text (absent ones left
    out) as a text → id dict over the decoded list would; the tokenizer's
    vocabulary is decoded on first use and matches get_str_list."""
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "strs.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    items = ["a", "<|im_end|>", "ünï", "<end_of_turn>", "a", "ab"]
    w.add_array("tokenizer.ggml.tokens", items)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    f = GGUFFile(path)
    want = ["a", "ünï", "<end_of_turn>", "missing", "b"]
    assert f.find_strs("tokenizer.ggml.tokens", want) == {
        t: i for i, t in enumerate(items) if t in want
    }
    assert f.str_list_len("tokenizer.ggml.tokens") == len(items)
    assert f.get_str_list("tokenizer.ggml.tokens") == items


def test_vocab_decoded_lazily(model_or_skip: Callable[[str], Path]) -> None:
    t = Tokenizer.from_gguf(model_or_skip("smollm2"))
    assert t._tokens is None and t._hf_built is None  # nothing decoded / built yet
    n = t.vocab_size
    assert t.tokens == GGUFFile(t.path).get_str_list("tokenizer.ggml.tokens")
    assert len(t.tokens) == n
