"""The packaged all-MiniLM-L6-v2 (safetensors BERT) against transformers'
sentence embeddings in ``tests/fixtures/minilm.json``: token ids identical,
cosine ≥ 0.9999 per sentence (issue 4); and the safetensors reader's errors."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import rlx
from rlx.cli import main
from rlx.io.models import ensure_model
from rlx.io.safetensors import open_safetensors

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "minilm.json"


@pytest.fixture(scope="module")
def minilm() -> object:
    return rlx.load(str(ensure_model("minilm")))


def test_embeddings_match_transformers(minilm: object) -> None:
    fx = json.loads(FIXTURE.read_text())
    worst = 1.0
    for s in fx["sentences"]:
        assert minilm.encode(s["text"]) == s["ids"]  # type: ignore[attr-defined]
        got = minilm.embed(s["text"])[0]  # type: ignore[attr-defined]
        ref = np.asarray(s["embedding"], np.float64)
        assert abs(float(np.linalg.norm(got)) - 1.0) < 1e-5
        cos = float(got @ ref / np.linalg.norm(ref))
        worst = min(worst, cos)
        assert cos >= 0.9999, (s["text"], cos)
    print(f"\nminilm: worst cosine vs transformers {worst:.7f}")


def test_embed_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["embed", "--json", "a cat", "a dog"]) == 0
    vecs = np.asarray(json.loads(capsys.readouterr().out))
    assert vecs.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


def _write(path: Path, header: dict[str, object], data: bytes) -> Path:
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)
    return path


def test_reader_is_zero_copy_and_exact(tmp_path: Path) -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    p = _write(
        tmp_path / "t.safetensors",
        {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}},
        a.tobytes(),
    )
    f = open_safetensors(p)
    t = f.tensor("a")
    np.testing.assert_array_equal(t, a)
    assert not t.flags.owndata and not t.flags.writeable


@pytest.mark.parametrize(
    "header,data,match",
    [
        ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, "truncated"),
        ({"a": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4, "unknown dtype"),
        ({"a": {"dtype": "F32", "shape": [1]}}, b"\0" * 4, "malformed entry"),
    ],
)
def test_reader_errors_name_the_tensor(
    tmp_path: Path, header: dict[str, object], data: bytes, match: str
) -> None:
    p = _write(tmp_path / "bad.safetensors", header, data)
    with pytest.raises(rlx.WeightFormatError, match=match) as e:
        open_safetensors(p)
    assert "'a'" in str(e.value) and "bad.safetensors" in str(e.value)


def test_reader_rejects_garbage(tmp_path: Path) -> None:
    p = tmp_path / "junk.safetensors"
    p.write_bytes(b"\xff" * 64)
    with pytest.raises(rlx.WeightFormatError, match="junk.safetensors"):
        open_safetensors(p)
    with pytest.raises(rlx.WeightFormatError, match="missing tensor 'nope'"):
        f = open_safetensors(
            _write(tmp_path / "ok.safetensors", {}, b""),
        )
        f.info("nope")
