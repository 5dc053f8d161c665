"""The torch / transformers oracle fixtures of ``scripts/make_seq_fixtures.py`` are well formed.

These tests read only the committed files (no torch): every ``tests/fixtures/hf/<name>/``
has a readable config, safetensors weights and a tokenizer, an ``expected.npz`` with the
documented keys, finite logits that are not constant, ``logits80`` rows 0..23 equal to
``logits24`` (same ids, causal model), and the oracle's prefill + one-token decode path
agreeing with its full forward within 1e-4 * max|logit| (that validates the cache path the
decode fixtures come from). The recurrent-layer fixtures in ``tests/fixtures/rnn/`` carry
torch's weight names and output shapes.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from rlx.models.registry import AUDIO_MODEL_TYPES, VISION_MODEL_TYPES

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
HF = FIXTURES / "hf"
RNN = FIXTURES / "rnn"
GGUF = FIXTURES / "gguf"
#: the decoder fixtures (image classifiers such as resnet-tiny / vit-tiny and the
#: whisper-tiny speech model have their own tests)
HF_NAMES = sorted(
    p.name
    for p in (HF.iterdir() if HF.is_dir() else [])
    if p.is_dir()
    and json.loads((p / "config.json").read_text()).get("model_type")
    not in {**VISION_MODEL_TYPES, **AUDIO_MODEL_TYPES}
)
RNN_FILES = sorted(p.name for p in RNN.glob("*.npz")) if RNN.is_dir() else []
#: <name>-q8_0.gguf and <name>-f16.gguf for every convertible fixture, <name>-f32.gguf for
#: the SSM / GDN ones
GGUF_FILES = sorted(p.name for p in GGUF.glob("*.gguf")) if GGUF.is_dir() else []
VOCAB = 512
#: the HF fixtures scripts/make_seq_fixtures.py writes (other scripts add more)
SEQ_NAMES = {
    "llama",
    "qwen2",
    "qwen3",
    "gemma3",
    "lfm2",
    "mamba2",
    "mamba2_g2",
    "mamba",
    "qwen3_next",
    "qwen3_next_dense",
    "qwen3_5",
    "qwen3_5_moe",
    "falcon_h1",
    "granitemoehybrid",
    "jamba",
}
#: Relative tolerance between the oracle's own forms (full forward vs prefill + decode).
DECODE_RTOL = 1e-4


def test_fixture_sets_present() -> None:
    """The fixture sets the script writes are all there."""
    expected = SEQ_NAMES
    assert expected <= set(HF_NAMES), HF_NAMES
    assert len(RNN_FILES) == 64, len(RNN_FILES)


@pytest.mark.parametrize("name", HF_NAMES)
def test_hf_fixture(name: str) -> None:
    """config, weights, tokenizer and expected logits of one tiny model."""
    d = HF / name
    config = json.loads((d / "config.json").read_text())
    assert config["vocab_size"] == VOCAB
    assert config["hidden_size"] == 64
    assert config["architectures"] and config["model_type"]
    meta = json.loads((d / "meta.json").read_text())
    assert meta["transformers"] and meta["torch"]
    # safetensors header: 8-byte little-endian length, then JSON naming every tensor
    raw = (d / "model.safetensors").read_bytes()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + hlen])
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    assert tensors and all(v["dtype"] == "F32" for v in tensors.values())
    end = max(v["data_offsets"][1] for v in tensors.values())
    assert 8 + hlen + end == len(raw)
    tok = json.loads((d / "tokenizer.json").read_text())
    assert len(tok["model"]["vocab"]) + len(tok["added_tokens"]) >= VOCAB - 1
    json.loads((d / "tokenizer_config.json").read_text())

    with np.load(d / "expected.npz") as z:
        assert set(z.files) == {"ids24", "logits24", "prefill16_decode8", "ids80", "logits80"}
        ids24, ids80 = z["ids24"], z["ids80"]
        l24, pd, l80 = z["logits24"], z["prefill16_decode8"], z["logits80"]
    assert ids24.shape == (24,) and ids80.shape == (80,)
    assert ids24.min() >= 0 and ids80.max() < VOCAB
    assert l24.shape == pd.shape == (24, VOCAB) and l80.shape == (80, VOCAB)
    for arr in (l24, pd, l80):
        assert arr.dtype == np.float32
        assert np.isfinite(arr).all()
    assert l24.std(axis=-1).min() > 1e-2, "logits nearly constant"
    scale = float(np.abs(l24).max())
    agree = ids80[:24] == ids24
    assert agree.all()
    np.testing.assert_allclose(l80[:24][agree], l24[agree], rtol=0, atol=1e-5 * scale)
    np.testing.assert_allclose(pd, l24, rtol=0, atol=DECODE_RTOL * scale)


@pytest.mark.parametrize("fname", RNN_FILES)
def test_rnn_fixture(fname: str) -> None:
    """torch.nn recurrent-layer fixture: torch's weight names, shapes, finite outputs."""
    mode = fname.split("_l")[0]
    gates = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}[mode]
    with np.load(RNN / fname) as z:
        a = {k: z[k] for k in z.files}
    layers, hid = int(a["num_layers"]), int(a["hidden_size"])
    dirs = 2 if bool(a["bidirectional"]) else 1
    x = a["x"]
    batch_first = bool(a["batch_first"])
    batch, seq = (x.shape[0], x.shape[1]) if batch_first else (x.shape[1], x.shape[0])
    for layer in range(layers):
        for sfx in ("", "_reverse")[:dirs]:
            in_size = x.shape[-1] if layer == 0 else dirs * hid
            assert a[f"weight_ih_l{layer}{sfx}"].shape == (gates * hid, in_size)
            assert a[f"weight_hh_l{layer}{sfx}"].shape == (gates * hid, hid)
            assert a[f"bias_ih_l{layer}{sfx}"].shape == (gates * hid,)
            assert a[f"bias_hh_l{layer}{sfx}"].shape == (gates * hid,)
    out_shape = (batch, seq, dirs * hid) if batch_first else (seq, batch, dirs * hid)
    assert a["output"].shape == out_shape
    assert a["h_n"].shape == (layers * dirs, batch, hid)
    if mode == "lstm":
        assert a["c_n"].shape == (layers * dirs, batch, hid)
    if fname.endswith("_h0.npz"):
        assert a["h0"].shape == (layers * dirs, batch, hid)
        assert ("c0" in a) == (mode == "lstm")
    for k, v in a.items():
        if v.dtype.kind == "f":
            assert v.dtype == np.float32 and np.isfinite(v).all(), k
    # the last layer's forward direction ends where its output's last step is
    last = a["output"][:, -1] if batch_first else a["output"][-1]
    np.testing.assert_array_equal(last[:, :hid], a["h_n"][(layers - 1) * dirs])


def _safetensors(path: Path) -> dict[str, np.ndarray]:
    """The F32 tensors of a safetensors file (numpy only)."""
    raw = path.read_bytes()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + hlen])
    out = {}
    for k, v in header.items():
        if k != "__metadata__":
            a, b = v["data_offsets"]
            out[k] = np.frombuffer(raw[8 + hlen + a : 8 + hlen + b], dtype="<f4").reshape(
                v["shape"]
            )
    return out


def test_gguf_fixture_set() -> None:
    """Every HF fixture the converter supports has its Q8_0 GGUF (qwen3_next_dense: refused)."""
    convertible = SEQ_NAMES - {"qwen3_next_dense"}
    gguf_names = {f.removesuffix("-q8_0.gguf") for f in GGUF_FILES if f.endswith("-q8_0.gguf")}
    f32_names = {f.removesuffix("-f32.gguf") for f in GGUF_FILES if f.endswith("-f32.gguf")}
    f16_names = {f.removesuffix("-f16.gguf") for f in GGUF_FILES if f.endswith("-f16.gguf")}
    assert f32_names <= gguf_names and f16_names <= gguf_names
    assert set(GGUF_FILES) == {f"{n}-q8_0.gguf" for n in gguf_names} | {
        f"{n}-f32.gguf" for n in f32_names
    } | {f"{n}-f16.gguf" for n in f16_names}
    # every GGUF converts an HF fixture (the MoE ones come from make_moe_fixtures.py)
    assert convertible <= gguf_names <= set(HF_NAMES)


@pytest.mark.parametrize("fname", GGUF_FILES)
def test_gguf_fixture(fname: str) -> None:
    """A converted GGUF: header, vocabulary = tokenizer.json's, and the token embedding
    within Q8_0 error of the safetensors one (rows in the same order; F32: equal)."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    name, _, kind = fname.removesuffix(".gguf").rpartition("-")
    with open(GGUF / fname, "rb") as f:
        head = f.read(8)
    assert head[:4] == b"GGUF" and struct.unpack("<I", head[4:8])[0] == 3
    r = GGUFReader(GGUF / fname)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    tok = json.loads((HF / name / "tokenizer.json").read_text())
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    by_id.update({t["id"]: t["content"] for t in tok["added_tokens"]})
    assert tokens[: len(by_id)] == [by_id[i] for i in range(len(by_id))]
    assert r.fields["tokenizer.ggml.pre"].contents() == "gpt-2"
    emb = next(t for t in r.tensors if t.name == "token_embd.weight")
    got = dequantize(emb.data, emb.tensor_type).reshape(VOCAB, -1)
    st = _safetensors(HF / name / "model.safetensors")
    hf = [v for k, v in st.items() if "embed" in k and v.shape == (VOCAB, 64)]
    assert len(hf) == 1
    config = json.loads((HF / name / "config.json").read_text())
    # Falcon-H1: the converter folds embedding_multiplier into token_embd
    mult = config["embedding_multiplier"] if name == "falcon_h1" else 1.0
    want = hf[0] * np.float32(mult)
    if kind == "f32":  # the same float32 values
        assert emb.tensor_type.name == "F32" and np.array_equal(got, want)
        return
    if kind == "f16":  # rounded to nearest f16
        assert emb.tensor_type.name == "F16"
        assert np.array_equal(got, want.astype(np.float16).astype(np.float32))
        return
    # Q8_0: blocks of 32, scale max|x| / 127 stored as f16: error <= half a step plus the
    # scale's f16 rounding (127 * 2**-11 of a step)
    step = np.abs(want.reshape(VOCAB, -1, 32)).max(axis=-1, keepdims=True) / 127
    err = np.abs(got.reshape(VOCAB, -1, 32) - want.reshape(VOCAB, -1, 32))
    assert (err <= 0.57 * step + 1e-7).all()
