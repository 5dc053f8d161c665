"""Whisper (log-mel features, conv + pre-LN encoder, decoder with a
self-attention KV cache and cross-attention K/V kept per utterance, greedy
transcription) against the transformers fixture
``tests/fixtures/hf/whisper-tiny`` (scripts/make_whisper_fixture.py: a tiny
random-initialised ``WhisperForConditionalGeneration``, 80 mels, d_model 64,
2 + 2 layers, 4 heads, a 2 s chunk, a 290-token byte-level BPE tokenizer
built by the script, noise on every 1-D parameter).

Tolerances: features, encoder output and decoder logits (first token, six
tokens at once, six tokens one at a time through the cache) within 1e-4 of
the largest |value| of transformers' on the host, the reference executor and
metal-sim, every metal-sim plan without a host command; generated ids and
text equal to ``generate``'s."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rlx
from hf_util import expected, fixture
from rlx.models.whisper import WhisperModel

TOL = 1e-4
PROMPT = [281, 282, 285, 289]  # <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>
_MODELS: dict[str, WhisperModel] = {}


def _model(device: str) -> WhisperModel:
    m = _MODELS.get(device)
    if m is None:
        m = _MODELS[device] = rlx.load(str(fixture("whisper-tiny")), device=device)
    assert isinstance(m, WhisperModel)
    return m


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


def _meta() -> dict[str, Any]:
    return json.loads((fixture("whisper-tiny") / "meta.json").read_text())


@pytest.mark.parametrize("device", ["host", "reference", "metal-sim"])
def test_features_encoder_and_decoder_match_transformers(device: str) -> None:
    e = expected(fixture("whisper-tiny"))
    m = _model(device)
    feats = m.features(e["waveform"])
    errs = {
        "features": _rel_err(feats, e["features"]),
        "features_np": _rel_err(feats, e["features_np"]),
        "encoder": _rel_err(m.encode(e["features"]), e["encoder_output"]),
        "logits1": _rel_err(m.decoder_logits(e["encoder_output"], e["ids6"][:1]), e["logits1"]),
        "logits6": _rel_err(m.decoder_logits(e["encoder_output"], e["ids6"]), e["logits6"]),
    }
    m.start(e["encoder_output"])
    steps = np.concatenate([m.decode([t]) for t in e["ids6"]])
    errs["cached"] = _rel_err(steps, e["logits_cached"])
    assert m.n_cached == 6
    # prompt of 4 at once, then 2 cached steps: the same rows
    m.start(e["encoder_output"])
    mixed = np.concatenate(
        [m.decode(e["ids6"][:4]), m.decode(e["ids6"][4:5]), m.decode(e["ids6"][5:])]
    )
    errs["mixed"] = _rel_err(mixed, e["logits_cached"])
    bad = {k: v for k, v in errs.items() if not v <= TOL}
    assert not bad, f"{device}: {errs}"
    if device == "metal-sim":
        for name, exe in m.compiled.items():
            assert exe.stats["metal_host"] == 0, (name, exe.report())


@pytest.mark.parametrize("device", ["host", "metal-sim"])
def test_greedy_generation_matches_transformers(device: str) -> None:
    e = expected(fixture("whisper-tiny"))
    m = _model(device)
    n = _meta()["max_new_tokens"]
    assert m.generate_ids(e["waveform"], max_new_tokens=n) == e["generated"].tolist()
    if device == "metal-sim":
        return  # the features graph costs 2-3 s a run there
    assert m.generate_ids(e["waveform"], "de", max_new_tokens=n) == e["generated_de"].tolist()
    got = m.generate_ids(e["waveform"], task="translate", max_new_tokens=n)
    assert got == e["generated_translate"].tolist()


def test_attention_modes_agree() -> None:
    """The host default (bidirectional attention in batched GEMMs + softmax)
    and the ``attention`` op (Metal's default) both match transformers; a bad
    mode is refused."""
    d = fixture("whisper-tiny")
    e = expected(d)
    assert _model("host").attention == "gemm"
    assert "attention" not in _model("host")._exe("encoder").schedule
    sdpa = WhisperModel(d, attention="sdpa")
    assert "attention" in sdpa._exe("encoder").schedule
    assert _rel_err(sdpa.encode(e["features"]), e["encoder_output"]) <= TOL
    got = sdpa.decoder_logits(e["encoder_output"], e["ids6"])
    assert _rel_err(got, e["logits6"]) <= TOL
    with pytest.raises(rlx.UnsupportedOpError, match=r"\[whisper\] attention must be"):
        WhisperModel(d, attention="flash")


def test_prompt_and_text() -> None:
    m = _model("host")
    e, meta = expected(fixture("whisper-tiny")), _meta()
    assert m.prompt() == PROMPT
    assert m.prompt("de") == [281, 283, 285, 289]
    assert m.prompt("<|de|>", "translate") == [281, 283, 284, 289]
    assert m.prompt(task="translate") == [281, None, 284, 289]  # language detected
    assert int(e["detected_language"]) == 282
    text = m.transcribe(e["waveform"], max_new_tokens=meta["max_new_tokens"])
    assert text == meta["text"]
    assert m.tokenizer.decode(meta["generated_de"], skip_special_tokens=True) == meta["text_de"]
    # without a token limit the decoder stops at the end of its position table
    assert len(m.generate_ids(e["waveform"])) <= m.config.tgt_pos - len(PROMPT)


def test_suppressed_tokens_are_never_generated() -> None:
    """Token 23 is the fixture's most frequent output: suppressing it changes
    the transcript and it never appears."""
    e = expected(fixture("whisper-tiny"))
    m = WhisperModel(fixture("whisper-tiny"))
    m.generation = {**m.generation, "suppress_tokens": [23, *m.generation["suppress_tokens"]]}
    ids = m.generate_ids(e["waveform"], max_new_tokens=12)
    assert 23 in e["generated"].tolist() and 23 not in ids and len(ids) == 12
    m.generation = {**m.generation, "begin_suppress_tokens": [19]}
    assert m.generate_ids(e["waveform"], max_new_tokens=1)[0] != 19


def test_long_audio_is_transcribed_by_chunks() -> None:
    e = expected(fixture("whisper-tiny"))
    m = _model("host")
    one = m.transcribe(e["waveform"], max_new_tokens=3)
    chunk = np.zeros(m.n_samples, np.float32)
    chunk[: len(e["waveform"])] = e["waveform"]
    assert m.transcribe(np.concatenate([chunk, chunk]), max_new_tokens=3) == one + one


def test_sharded_weights_load(tmp_path: Path) -> None:
    """A checkpoint split over two safetensors files (as the large ones are)
    gives the same logits; a missing tensor is named."""
    from hf_util import read_tensors, write_safetensors

    d = fixture("whisper-tiny")
    e = expected(d)
    for f in d.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, tmp_path / f.name)
    tensors = read_tensors(d / "model.safetensors")
    names = sorted(tensors)
    write_safetensors(tmp_path / "model-00001-of-00002.safetensors",
                      {k: tensors[k] for k in names[::2]})  # fmt: skip
    write_safetensors(tmp_path / "model-00002-of-00002.safetensors",
                      {k: tensors[k] for k in names[1::2] if "fc1.bias" not in k})  # fmt: skip
    with pytest.raises(rlx.WeightFormatError, match=r"tensor '.*fc1.bias' missing"):
        WhisperModel(tmp_path)
    write_safetensors(tmp_path / "model-00002-of-00002.safetensors",
                      {k: tensors[k] for k in names[1::2]})  # fmt: skip
    got = WhisperModel(tmp_path).decoder_logits(e["encoder_output"], e["ids6"])
    assert _rel_err(got, e["logits6"]) <= 1e-6


def test_bad_inputs_name_the_parameter() -> None:
    m = _model("host")
    e = expected(fixture("whisper-tiny"))
    with pytest.raises(
        rlx.ShapeError, match=r"\[whisper\] waveform must be 1-D .* got shape \[2, 5\]"
    ):
        m.features(np.zeros((2, 5), np.float32))
    with pytest.raises(
        rlx.DTypeError, match=r"\[whisper\] waveform must be floating point, got int16"
    ):
        m.transcribe(np.zeros(100, np.int16))
    with pytest.raises(rlx.ShapeError, match=r"\[whisper\] features must be \[80, 200\]"):
        m.encode(np.zeros((80, 100), np.float32))
    with pytest.raises(rlx.DTypeError, match=r"\[whisper\] features must be floating"):
        m.encode(np.zeros((80, 200), np.int32))
    with pytest.raises(rlx.ShapeError, match=r"\[whisper\] encoder_output must be \[100, 64\]"):
        m.decoder_logits(np.zeros((100, 32), np.float32), [281])
    with pytest.raises(rlx.ShapeError, match=r"\[whisper\] token_ids must lie in \[0, 290\)"):
        m.decoder_logits(e["encoder_output"], [281, 290])
    with pytest.raises(rlx.ShapeError, match=r"\[whisper\] token_ids must be a non-empty 1-D"):
        m.decoder_logits(e["encoder_output"], [[281]])
    m.start(e["encoder_output"])
    m.decode(list(range(30)))
    with pytest.raises(
        rlx.RlxError, match=r"30 cached \+ 3 new tokens exceed max_target_positions 32"
    ):
        m.decode([1, 2, 3])
    with pytest.raises(rlx.RlxError, match=r"\[transcribe\] language 'fr' is not in lang_to_id"):
        m.prompt("fr")
