"""Every malformed GGUF / safetensors file and every bad hyper-parameter
raises an :class:`rlx.RlxError` subclass naming the file and the field at
fault (issue 15, point 3), never a raw ValueError / IndexError /
RecursionError / OverflowError / MemoryError / ZeroDivisionError.

The GGUF files are written byte by byte here (:func:`gguf_bytes`), so each
test controls exactly the one field it corrupts; the model-level tests
rewrite one metadata value of the fuzz corpus's tiny llama
(``fuzz/corpus/model/llama.gguf``) with ``gguf``'s own writer as reference
for the rest of the file.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rlx.errors import RlxError, WeightFormatError
from rlx.io.gguf import GGUFFile
from rlx.io.safetensors import SafetensorsFile

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "fuzz" / "corpus" / "model" / "llama.gguf"


# ------------------------------------------------------------------ builders
def _str(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv_u32(key: str, v: int) -> bytes:
    return _str(key) + struct.pack("<II", 4, v)


def kv_u64(key: str, v: int) -> bytes:
    return _str(key) + struct.pack("<IQ", 10, v)


def kv_f32(key: str, v: float) -> bytes:
    return _str(key) + struct.pack("<If", 6, v)


def kv_string(key: str, v: str) -> bytes:
    return _str(key) + struct.pack("<I", 8) + _str(v)


def gguf_bytes(kvs: list[bytes], tensors: list[tuple[str, list[int], int, int]],
               data: bytes = b"", align: int = 32) -> bytes:  # fmt: skip
    """A GGUF v3 file: metadata entries (already encoded), tensor infos
    ``(name, dims fastest-first, type id, relative offset)`` and the data."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)))
    for kv in kvs:
        out += kv
    for name, dims, ty, off in tensors:
        out += _str(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ty, off)
    out += b"\0" * (-len(out) % align)
    return bytes(out + data)


def write(tmp_path: Path, raw: bytes, name: str = "x.gguf") -> Path:
    p = tmp_path / name
    p.write_bytes(raw)
    return p


def gguf_error(tmp_path: Path, raw: bytes, *needles: str) -> str:
    p = write(tmp_path, raw)
    with pytest.raises(WeightFormatError) as ei:
        f = GGUFFile(p)
        for t in f.tensors:  # the views too, for files the reader accepted
            f.tensor_rows(t.name)
    msg = str(ei.value)
    assert str(p) in msg
    for n in needles:
        assert n in msg, msg
    return msg


F32 = 0
ARCH = kv_string("general.architecture", "test")


def test_valid_file_reads(tmp_path: Path) -> None:
    data = np.arange(6, dtype=np.float32).tobytes()
    f = GGUFFile(write(tmp_path, gguf_bytes([ARCH], [("t", [3, 2], F32, 0)], data)))
    np.testing.assert_array_equal(f.tensor_array("t"), np.arange(6).reshape(2, 3))
    f.check_unchanged()


# --------------------------------------------------------------------- GGUF
def test_gguf_zero_dims(tmp_path: Path) -> None:
    gguf_error(tmp_path, gguf_bytes([ARCH], [("t", [], F32, 0)], b"\0" * 32), "'t'", "0 dims")


def test_gguf_too_many_dims(tmp_path: Path) -> None:
    gguf_error(tmp_path, gguf_bytes([ARCH], [("t", [1] * 5, F32, 0)], b"\0" * 32), "5 dims")


def test_gguf_zero_dim(tmp_path: Path) -> None:
    gguf_error(tmp_path, gguf_bytes([ARCH], [("t", [4, 0], F32, 0)], b"\0" * 32), "dim 1 = 0")


@pytest.mark.parametrize("dims", [[4, 1 << 62], [1 << 32, 1 << 32, 16], [1 << 63, 2]])
def test_gguf_wrapping_element_count(tmp_path: Path, dims: list[int]) -> None:
    # numpy's int64 product wraps (2^32·2^32·16 → 0); the reader must not
    gguf_error(tmp_path, gguf_bytes([ARCH], [("t", dims, F32, 0)], b"\0" * 64), "'t'")


def test_gguf_misaligned_offset(tmp_path: Path) -> None:
    raw = gguf_bytes([ARCH], [("t", [2], F32, 4)], b"\0" * 64)
    gguf_error(tmp_path, raw, "'t'", "not a multiple of the alignment 32")


def test_gguf_bad_alignment(tmp_path: Path) -> None:
    raw = gguf_bytes([ARCH, kv_u32("general.alignment", 24)], [], b"")
    gguf_error(tmp_path, raw + b"\0" * 32, "general.alignment", "power of two")


def test_gguf_overlapping_tensors(tmp_path: Path) -> None:
    raw = gguf_bytes([ARCH], [("a", [16], F32, 0), ("b", [16], F32, 32)], b"\0" * 128)
    gguf_error(tmp_path, raw, "'a'", "'b'", "overlap")


def test_gguf_tensor_past_the_end(tmp_path: Path) -> None:
    gguf_error(tmp_path, gguf_bytes([ARCH], [("t", [64], F32, 0)], b"\0" * 32), "truncated", "'t'")


def test_gguf_duplicate_metadata_key(tmp_path: Path) -> None:
    raw = gguf_bytes([ARCH, kv_u32("test.block_count", 1), kv_u32("test.block_count", 2)], [])
    gguf_error(tmp_path, raw + b"\0" * 32, "'test.block_count'", "twice")


def test_gguf_duplicate_tensor(tmp_path: Path) -> None:
    raw = gguf_bytes([ARCH], [("t", [8], F32, 0), ("t", [8], F32, 32)], b"\0" * 64)
    gguf_error(tmp_path, raw, "'t'", "twice")


def test_gguf_unknown_type(tmp_path: Path) -> None:
    gguf_error(tmp_path, gguf_bytes([ARCH], [("t", [8], 99, 0)], b"\0" * 32), "type id 99")


def test_gguf_nested_arrays_too_deep(tmp_path: Path) -> None:
    depth = 5000  # recursion would blow Python's stack without the bound
    body = _str("test.deep") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * depth
    body += struct.pack("<IQ", 4, 0)
    gguf_error(tmp_path, gguf_bytes([ARCH, body], []) + b"\0" * 32, "'test.deep'", "nested")


def test_gguf_huge_counts(tmp_path: Path) -> None:
    raw = bytearray(gguf_bytes([ARCH], []) + b"\0" * 32)
    raw[16:24] = struct.pack("<Q", 1 << 62)  # metadata count
    gguf_error(tmp_path, bytes(raw), "corrupt header")
    arr = _str("test.a") + struct.pack("<IIQ", 9, 4, 1 << 60)
    gguf_error(tmp_path, gguf_bytes([ARCH, arr], []) + b"\0" * 32, "'test.a'")


def test_gguf_not_a_regular_file(tmp_path: Path) -> None:
    with pytest.raises(WeightFormatError, match="not a regular file"):
        GGUFFile(tmp_path)


def test_gguf_truncated_while_loaded(tmp_path: Path) -> None:
    data = np.arange(64, dtype=np.float32).tobytes()
    p = write(tmp_path, gguf_bytes([ARCH], [("t", [64], F32, 0)], data))
    f = GGUFFile(p)
    f.check_unchanged()
    with open(p, "r+b") as fh:  # truncate in place: the mapped inode shrinks
        fh.truncate(100)
    with pytest.raises(WeightFormatError, match="changed size while loaded"):
        f.check_unchanged()


def test_gguf_rewritten_while_loaded(tmp_path: Path) -> None:
    data = np.arange(64, dtype=np.float32).tobytes()
    p = write(tmp_path, gguf_bytes([ARCH], [("t", [64], F32, 0)], data))
    f = GGUFFile(p)
    st = p.stat()
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(WeightFormatError, match="rewritten while loaded"):
        f.check_unchanged()


def test_gguf_replaced_by_rename_is_fine(tmp_path: Path) -> None:
    data = np.arange(64, dtype=np.float32).tobytes()
    p = write(tmp_path, gguf_bytes([ARCH], [("t", [64], F32, 0)], data))
    f = GGUFFile(p)
    q = write(tmp_path, b"other", "y.gguf")
    q.replace(p)  # the map keeps the old inode: its bytes stay valid
    f.check_unchanged()
    assert float(f.tensor_array("t")[63]) == 63.0


# -------------------------------------------------------------- safetensors
def st_bytes(header: Any, data: bytes = b"", raw_header: bytes | None = None) -> bytes:
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def st_error(tmp_path: Path, raw: bytes, *needles: str) -> str:
    p = write(tmp_path, raw, "x.safetensors")
    with pytest.raises(WeightFormatError) as ei:
        f = SafetensorsFile(p)
        for k in f.keys():
            f.tensor(k)
    msg = str(ei.value)
    assert str(p) in msg
    for n in needles:
        assert n in msg, msg
    return msg


def _entry(shape: Any, offs: Any, dtype: str = "F32") -> dict[str, Any]:
    return {"dtype": dtype, "shape": shape, "data_offsets": offs}


def test_safetensors_valid(tmp_path: Path) -> None:
    raw = st_bytes({"w": _entry([2, 2], [0, 16])}, np.arange(4, dtype=np.float32).tobytes())
    f = SafetensorsFile(write(tmp_path, raw, "ok.safetensors"))
    np.testing.assert_array_equal(f.tensor("w"), [[0, 1], [2, 3]])
    f.check_unchanged()


def test_safetensors_1e400_shape(tmp_path: Path) -> None:
    raw = st_bytes(
        None, b"\0" * 16, b'{"w": {"dtype": "F32", "shape": [1e400], "data_offsets": [0, 16]}}'
    )
    st_error(tmp_path, raw, "'w'", "shape")


@pytest.mark.parametrize("shape", [[2.5], [True, 2], ["4"], [-4], {"a": 1}, [[2]]])
def test_safetensors_non_integer_shape(tmp_path: Path, shape: Any) -> None:
    st_error(tmp_path, st_bytes({"w": _entry(shape, [0, 16])}, b"\0" * 16), "'w'", "shape")


@pytest.mark.parametrize("offs", [[0.0, 16], [0], [0, "16"], None, [-16, 0]])
def test_safetensors_bad_offsets(tmp_path: Path, offs: Any) -> None:
    st_error(tmp_path, st_bytes({"w": _entry([4], offs)}, b"\0" * 16), "'w'")


def test_safetensors_wrapping_shape(tmp_path: Path) -> None:
    # [2^32, 2^32, 16] wraps to 0 elements in int64; must not pass as empty
    raw = st_bytes({"w": _entry([1 << 32, 1 << 32, 16], [0, 0])}, b"")
    st_error(tmp_path, raw, "'w'", "2^63")


@pytest.mark.parametrize("shape", [[0, 1 << 64], [1 << 62, 1 << 62, 0], [1 << 62, 4]])
def test_safetensors_dims_past_numpy_limits(tmp_path: Path, shape: list[int]) -> None:
    # zero elements but dims numpy cannot represent (a campaign finding)
    st_error(tmp_path, st_bytes({"z": _entry(shape, [0, 0])}), "'z'")


def test_safetensors_huge_integer(tmp_path: Path) -> None:
    raw = st_bytes(
        None,
        b"",
        b'{"w": {"dtype": "F32", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 0]}}',
    )
    st_error(tmp_path, raw, "JSON")


def test_safetensors_overlap(tmp_path: Path) -> None:
    raw = st_bytes({"a": _entry([4], [0, 16]), "b": _entry([4], [8, 24])}, b"\0" * 24)
    st_error(tmp_path, raw, "'a'", "'b'", "overlap")


def test_safetensors_duplicate_keys(tmp_path: Path) -> None:
    e = b'{"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}'
    h = b'{"w": ' + e + b', "w": ' + e + b"}"
    st_error(tmp_path, st_bytes(None, b"\0" * 4, h), "repeats the key 'w'")
    h = b'{"w": {"dtype": "F32", "dtype": "F16", "shape": [1], "data_offsets": [0, 4]}}'
    st_error(tmp_path, st_bytes(None, b"\0" * 4, h), "repeats the key 'dtype'")


def test_safetensors_deep_nesting(tmp_path: Path) -> None:
    st_error(tmp_path, st_bytes(None, b"", b"[" * 100000 + b"]" * 100000), "nests too deeply")
    st_error(tmp_path, st_bytes(None, b"", b'{"a": ' * 100000), "JSON")
    deep = b'{"__metadata__": ' + b"[" * 50 + b"]" * 50 + b"}"
    st_error(tmp_path, st_bytes(None, b"", deep), "__metadata__")


def test_safetensors_entry_not_object(tmp_path: Path) -> None:
    st_error(tmp_path, st_bytes({"w": [1, 2]}), "'w'", "not a JSON object")
    st_error(tmp_path, st_bytes({"w": _entry([1], [0, 4], "Q4")}, b"\0" * 4), "'w'", "dtype")


def test_safetensors_truncated_while_loaded(tmp_path: Path) -> None:
    raw = st_bytes({"w": _entry([64], [0, 256])}, b"\0" * 256)
    p = write(tmp_path, raw, "t.safetensors")
    f = SafetensorsFile(p)
    with open(p, "r+b") as fh:
        fh.truncate(40)
    with pytest.raises(WeightFormatError, match="changed size while loaded"):
        f.check_unchanged()


# ------------------------------------------------------ model hyper-parameters
gguf = pytest.importorskip("gguf")


def rewrite(tmp_path: Path, changes: dict[str, Any], drop: tuple[str, ...] = ()) -> Path:
    """The tiny llama with metadata ``changes`` (key → (GGUFValueType, value))."""
    r = gguf.GGUFReader(str(TINY))
    out = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(out), "llama")
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture" or f.name in drop:
            continue
        if f.name in changes:
            continue
        vt = f.types[0]
        if vt == gguf.GGUFValueType.ARRAY:
            w.add_key_value(f.name, f.contents(), vt, sub_type=f.types[-1])
        else:
            w.add_key_value(f.name, f.contents(), vt)
    for k, (vt, v) in changes.items():
        w.add_key_value(k, v, vt)
    for t in r.tensors:
        w.add_tensor(t.name, np.asarray(t.data))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


U32, I32, F = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.INT32, gguf.GGUFValueType.FLOAT32
U64 = gguf.GGUFValueType.UINT64


def load_error(path: Path, *needles: str) -> str:
    from rlx.models.registry import open_model

    with pytest.raises(RlxError) as ei:
        open_model(path)
    msg = str(ei.value)
    for n in needles:
        assert n in msg, msg
    return msg


def test_tiny_model_loads(tmp_path: Path) -> None:
    from rlx.models.registry import open_model

    _, cfg, _, tok = open_model(rewrite(tmp_path, {}))
    assert (cfg.n_layers, cfg.heads, cfg.vocab, tok.vocab_size) == (1, 2, 8, 8)


@pytest.mark.parametrize(
    ("key", "vt", "value", "needle"),
    [
        ("llama.block_count", U32, 0, "must be ≥ 1"),
        ("llama.block_count", I32, -1, "out of range"),
        ("llama.block_count", U64, 1 << 62, "out of range"),
        ("llama.block_count", U32, 1 << 20, "out of range [1, 65536]"),
        ("llama.expert_count", U32, 1 << 30, "out of range [0, 65536]"),
        ("llama.attention.head_count", U32, 0, "must be ≥ 1"),
        ("llama.attention.head_count", U32, 3, "does not divide"),
        ("llama.attention.head_count_kv", U32, 0, "kv_heads"),
        ("llama.rope.freq_base", F, 0.0, "> 0"),
        ("llama.rope.freq_base", F, -5.0, "> 0"),
        ("llama.rope.freq_base", F, float("nan"), "not finite"),
        ("llama.rope.freq_base", F, float("inf"), "not finite"),
        ("llama.embedding_length", U32, 0, "must be ≥ 1"),
    ],
)
def test_gguf_hyper_parameters(tmp_path: Path, key: str, vt: Any, value: Any, needle: str) -> None:
    p = rewrite(tmp_path, {key: (vt, value)})
    msg = load_error(p, needle)
    assert str(p) in msg


def test_tokenizer_larger_than_embedding(tmp_path: Path) -> None:
    toks = ["a", "b", "c", "d", "ab", "cd", "<s>", "</s>", "x", "y"]
    p = rewrite(tmp_path, {
        "tokenizer.ggml.tokens": (gguf.GGUFValueType.ARRAY, toks),
        "tokenizer.ggml.token_type": (gguf.GGUFValueType.ARRAY, [1] * 8 + [1, 1]),
    })  # fmt: skip
    load_error(p, "tokenizer has 10 tokens", "8 rows")


def test_tokenizers_exception_wrapped(tmp_path: Path) -> None:
    # a merge of tokens missing from the vocabulary: tokenizers raises a bare
    # Exception. The BPE pipeline is built on first use (a model run on token
    # ids never pays for it), so loading succeeds and the first encode raises
    # a WeightFormatError naming the file, from every thread that asks.
    from rlx.models.registry import open_model

    p = rewrite(tmp_path, {"tokenizer.ggml.merges": (gguf.GGUFValueType.ARRAY, ["q z"])})
    tok = open_model(p)[3]
    for _ in range(2):  # not cached as a half-built pipeline
        with pytest.raises(WeightFormatError) as ei:
            tok.encode("hello")
        assert "[tokenizer]" in str(ei.value) and str(p) in str(ei.value), ei.value


def _llama3(**kw: Any) -> dict[str, Any]:
    p = {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0, "low_freq_factor": 1.0,
         "high_freq_factor": 4.0, "original_max_position_embeddings": 64}  # fmt: skip
    p.update(kw)
    return {"rope_parameters": p}


def test_hf_config_validation(tmp_path: Path) -> None:
    from rlx.models.registry import open_model

    src = ROOT / "tests" / "fixtures" / "hf" / "llama"
    for change, needle in [
        ({"num_hidden_layers": 0}, "num_hidden_layers"),
        ({"num_hidden_layers": 1 << 20}, "out of range [1, 65536]"),
        ({"num_hidden_layers": 1 << 40}, "out of range"),
        ({"num_attention_heads": 0}, "positive"),
        ({"num_key_value_heads": 0}, "num_key_value_heads"),
        ({"rope_parameters": {"rope_theta": 0, "rope_type": "default"}}, "rope_theta"),
        ({"rope_parameters": {"rope_theta": -1.0}}, "rope_theta"),
        ({"rope_parameters": None, "rope_theta": float("nan")}, "rope_theta"),
        ({"rms_norm_eps": float("inf")}, "finite"),
        ({"hidden_size": 2.5}, "not an integer"),
        # campaign findings (ZeroDivisionError in the llama3 frequencies)
        (_llama3(low_freq_factor=0.0), "low_freq_factor"),
        (_llama3(high_freq_factor=0.0), "low_freq_factor"),
        (_llama3(low_freq_factor=4.0), "low_freq_factor"),
        (_llama3(original_max_position_embeddings=0), "original_max_position_embeddings"),
        (_llama3(original_max_position_embeddings=10**40), "original_max_position_embeddings"),
        ({"hidden_size": 10**45}, "out of range"),  # a campaign finding (OverflowError)
        ({"hidden_size": 1e300}, "out of range"),
    ]:
        d = tmp_path / f"hf{abs(hash(str(change)))}"
        d.mkdir()
        for f in src.iterdir():
            (d / f.name).symlink_to(f)
        (d / "config.json").unlink()
        cfg = json.loads((src / "config.json").read_text())
        cfg.update(change)
        (d / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(RlxError) as ei:
            open_model(d)
        assert needle in str(ei.value), (change, str(ei.value))
    # fields a family's builder divides by / takes a root of (campaign findings)
    for fixture, change, needle in [
        ("granitemoehybrid", {"logits_scaling": 0}, "'logits_scaling' = 0 must be > 0"),
        ("gemma3", {"query_pre_attn_scalar": -1}, "'query_pre_attn_scalar' = -1 must be > 0"),
    ]:
        fx = ROOT / "tests" / "fixtures" / "hf" / fixture
        d = tmp_path / fixture
        d.mkdir()
        for f in fx.iterdir():
            if f.name != "config.json":
                (d / f.name).symlink_to(f)
        cfg = json.loads((fx / "config.json").read_text())
        cfg.update(change)
        (d / "config.json").write_text(json.dumps(cfg))
        with pytest.raises(WeightFormatError, match=needle):
            open_model(d)
    d = tmp_path / "deep"
    d.mkdir()
    (d / "config.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(WeightFormatError, match="nested too deeply|not valid JSON"):
        open_model(d)


def test_model_file_truncated_under_a_loaded_model(tmp_path: Path) -> None:
    from rlx.models.decoder import DecoderModel

    p = rewrite(tmp_path, {})
    m = DecoderModel(p, inplace=False)
    first = m.next_logits([0, 1])
    with open(p, "r+b") as fh:  # in place: the mapped inode loses its tensors
        fh.truncate(p.stat().st_size // 2)
    with pytest.raises(WeightFormatError, match=r"m\.gguf.*changed size while loaded"):
        m.next_logits([0, 1])
    assert first.shape == (8,)


def test_head_count_zero_only_without_attention(tmp_path: Path) -> None:
    # a pure SSM GGUF (Mamba-2) stores attention.head_count = 0: not an error
    from rlx.models.hf_config import check_gguf_metadata

    kvs = [ARCH, kv_u32("test.block_count", 1), kv_u32("test.embedding_length", 8),
           kv_u32("test.attention.head_count", 0)]  # fmt: skip
    data = b"\0" * 32
    ssm = GGUFFile(write(tmp_path, gguf_bytes(kvs, [("blk.0.ssm_in.weight", [8], F32, 0)], data)))
    check_gguf_metadata(ssm)
    attn = gguf_bytes(kvs, [("blk.0.attn_q.weight", [8], F32, 0)], data)
    with pytest.raises(WeightFormatError, match="'test.attention.head_count' = 0 must be ≥ 1"):
        check_gguf_metadata(GGUFFile(write(tmp_path, attn, "attn.gguf")))
