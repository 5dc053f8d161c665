"""The GGUF reader on the real SmolLM2 file (facts from MODELS.md) and on
broken copies of it; Gemma3 / Qwen2.5 headers where present."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import rlx
from rlx import _rlx
from rlx.io.gguf import GGUFFile, _Truncated, open_gguf, string_offsets


def test_smollm2_metadata_matches_models_md(smollm2: GGUFFile) -> None:
    f = smollm2
    assert f.architecture == "llama"
    assert f.version == 3
    assert f.arch_int("block_count") == 30
    assert f.arch_int("embedding_length") == 576
    assert f.arch_int("feed_forward_length") == 1536
    assert f.arch_int("attention.head_count") == 9
    assert f.arch_int("attention.head_count_kv") == 3
    assert f.arch_int("context_length") == 8192
    assert f.arch_int("vocab_size") == 49152
    assert f.arch_float("rope.freq_base") == 1e5
    assert f.arch_float("attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)
    assert f.get_str("tokenizer.ggml.model") == "gpt2"
    assert f.get_str("tokenizer.ggml.pre") == "smollm"
    assert len(f.get_str_list("tokenizer.ggml.tokens")) == 49152
    assert f.get_bool("tokenizer.ggml.add_bos_token") is False
    assert "<|im_start|>" in f.get_str("tokenizer.chat_template")
    assert f.value_types("tokenizer.ggml.token_type") == ["ARRAY", "INT32"]


def test_smollm2_tensor_census(smollm2: GGUFFile) -> None:
    assert len(smollm2) == 272
    assert smollm2.type_census() == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    assert all(t.supported for t in smollm2.tensors)
    emb = smollm2.tensor("token_embd.weight")
    assert emb.ggml_type == "Q8_0"
    # GGUF lists [576, 49152] (fastest first); rlx is row-major: 49152 rows of 576.
    assert emb.shape == (49152, 576)
    assert emb.n_bytes == 49152 * (576 // 32) * 34
    down = smollm2.tensor("blk.0.ffn_down.weight")
    assert (down.ggml_type, down.shape) == ("Q4_1", (576, 1536))
    assert down.row_bytes == 1536 // 32 * 20
    assert smollm2.tensor("blk.29.attn_norm.weight").shape == (576,)


def test_tensor_views_are_zero_copy(smollm2: GGUFFile) -> None:
    mm = smollm2.mmap
    assert isinstance(mm, np.memmap)
    for t in smollm2.tensors[:20]:
        raw = smollm2.tensor_bytes(t.name)
        assert raw.nbytes == t.n_bytes
        assert np.shares_memory(raw, mm)
        assert raw.__array_interface__["data"][0] == mm.__array_interface__["data"][0] + t.offset
    rows = smollm2.tensor_rows("blk.0.ffn_down.weight")
    assert rows.shape == (576, 960) and rows.dtype == np.uint8 and np.shares_memory(rows, mm)
    norm = smollm2.tensor_array("output_norm.weight")
    assert norm.dtype == np.float32 and norm.shape == (576,) and np.shares_memory(norm, mm)
    assert not norm.flags.writeable
    types = smollm2.get_array("tokenizer.ggml.token_type")
    assert np.shares_memory(types, mm) and len(types) == 49152
    with pytest.raises(rlx.WeightFormatError, match="not a plain float type"):
        smollm2.tensor_array("blk.0.ffn_down.weight")


def test_matches_gguf_reader_oracle(smollm2: GGUFFile) -> None:
    """Our header parser against the gguf package's own reader."""
    gguf = pytest.importorskip("gguf")
    ref = gguf.GGUFReader(smollm2.path)
    assert [t.name for t in ref.tensors] == [t.name for t in smollm2.tensors]
    for r in ref.tensors:
        ours = smollm2.tensor(r.name)
        assert ours.shape == tuple(int(d) for d in reversed(r.shape.tolist()))
        assert ours.type_id == int(r.tensor_type)
        assert ours.offset == r.data_offset and ours.n_bytes == r.n_bytes
        assert np.array_equal(smollm2.tensor_bytes(r.name), r.data.reshape(-1).view(np.uint8))
    for key in ("llama.block_count", "llama.rope.freq_base", "tokenizer.ggml.pre"):
        assert smollm2.get(key) == ref.fields[key].contents()
    assert (
        smollm2.get_str_list("tokenizer.ggml.merges")
        == ref.fields["tokenizer.ggml.merges"].contents()
    )


def test_dequantized_row_is_sane(smollm2: GGUFFile) -> None:
    """The packed bytes we hand out dequantize (with gguf's numpy code) to
    finite, non-trivial weights: the offsets point at real data."""
    gguf = pytest.importorskip("gguf")
    rows = smollm2.tensor_rows("blk.0.attn_q.weight")
    w = gguf.quants.dequantize(np.ascontiguousarray(rows[:4]), gguf.GGMLQuantizationType.Q4_1)
    assert w.shape == (4, 576)
    assert np.isfinite(w).all() and 0.001 < float(np.abs(w).mean()) < 10


def test_missing_and_mistyped_keys_name_file_and_key(smollm2: GGUFFile) -> None:
    name = smollm2.path.name
    with pytest.raises(rlx.WeightFormatError, match=rf"{name}.*'llama\.nope' is missing"):
        smollm2.get_int("llama.nope")
    with pytest.raises(rlx.WeightFormatError, match=r"'general\.architecture' is STRING"):
        smollm2.get_int("general.architecture")
    with pytest.raises(rlx.WeightFormatError, match=r"'llama\.block_count' is UINT32"):
        smollm2.get_str("llama.block_count")
    with pytest.raises(rlx.WeightFormatError, match=r"ARRAY/INT32, expected an array of strings"):
        smollm2.get_str_list("tokenizer.ggml.token_type")
    with pytest.raises(rlx.WeightFormatError, match="no tensor named 'nope'"):
        smollm2.tensor("nope")
    assert smollm2.get_int("llama.nope", 7) == 7
    with pytest.raises(rlx.WeightFormatError, match="architecture is 'llama', expected 'qwen2'"):
        open_gguf(smollm2.path, expect_arch="qwen2")


# ----------------------------------------------------------------- bad files
def _copy_prefix(src: Path, dst: Path, n: int) -> Path:
    with open(src, "rb") as f:
        dst.write_bytes(f.read(n))
    return dst


@pytest.mark.parametrize("keep", [10, 100, 5000, 1_000_000, 98_000_000])
def test_truncated_file(smollm2_path: Path, tmp_path: Path, keep: int) -> None:
    bad = _copy_prefix(smollm2_path, tmp_path / "cut.gguf", keep)
    with pytest.raises(rlx.WeightFormatError) as e:
        GGUFFile(bad)
    assert str(bad) in str(e.value)
    assert "truncated" in str(e.value) or "too short" in str(e.value)


def test_wrong_magic(smollm2_path: Path, tmp_path: Path) -> None:
    bad = _copy_prefix(smollm2_path, tmp_path / "magic.gguf", 4096)
    data = bytearray(bad.read_bytes())
    data[:4] = b"GGML"
    bad.write_bytes(bytes(data))
    with pytest.raises(rlx.WeightFormatError, match=rf"{bad}.*wrong magic b'GGML'"):
        GGUFFile(bad)
    txt = tmp_path / "notes.gguf"
    txt.write_text("just some text, not a model at all")
    with pytest.raises(rlx.WeightFormatError, match="not a GGUF file"):
        GGUFFile(txt)


def _tensor_type_offset(f: GGUFFile, index: int) -> int:
    """Byte offset of tensor ``index``'s type field in the tensor table."""
    buf = f.mmap
    # The tensor table starts with the first tensor's name (u64 length + bytes).
    first = f.tensors[0].name.encode()
    pos = bytes(buf[: f.data_offset]).index(struct.pack("<Q", len(first)) + first)
    for i in range(index + 1):
        (n,) = struct.unpack_from("<Q", buf, pos)
        pos += 8 + n
        (dims,) = struct.unpack_from("<I", buf, pos)
        pos += 4 + 8 * dims
        if i == index:
            return pos
        pos += 4 + 8
    raise AssertionError


def test_unknown_tensor_type(smollm2_path: Path, tmp_path: Path) -> None:
    good = GGUFFile(smollm2_path)
    at = _tensor_type_offset(good, 3)
    assert struct.unpack_from("<I", good.mmap, at)[0] == good.tensors[3].type_id
    bad = tmp_path / "type.gguf"
    shutil.copyfile(smollm2_path, bad)
    with open(bad, "r+b") as fh:
        fh.seek(at)
        fh.write(struct.pack("<I", 999))
    with pytest.raises(rlx.WeightFormatError) as e:
        GGUFFile(bad)
    msg = str(e.value)
    assert str(bad) in msg and "unknown tensor type id 999" in msg
    assert repr(good.tensors[3].name) in msg


def test_block_table_matches_gguf_package() -> None:
    """rlx's own block geometry (the parser no longer imports ``gguf``) agrees
    with the ``gguf`` package's ``GGML_QUANT_SIZES`` for every type it lists."""
    import gguf
    from rlx.io.gguf import BLOCK_SIZES, RLX_TYPE_NAMES

    assert set(BLOCK_SIZES) == set(RLX_TYPE_NAMES) - {9}  # Q8_1: see BLOCK_SIZES
    for type_id, geometry in BLOCK_SIZES.items():
        qtype = gguf.GGMLQuantizationType(type_id)
        assert geometry == tuple(gguf.GGML_QUANT_SIZES[qtype]), qtype.name
        assert RLX_TYPE_NAMES[type_id] == qtype.name


def test_unsupported_version_and_missing_file(smollm2_path: Path, tmp_path: Path) -> None:
    bad = _copy_prefix(smollm2_path, tmp_path / "v9.gguf", 4096)
    data = bytearray(bad.read_bytes())
    data[4:8] = struct.pack("<I", 9)
    bad.write_bytes(bytes(data))
    with pytest.raises(rlx.WeightFormatError, match="unsupported GGUF version 9"):
        GGUFFile(bad)
    with pytest.raises(FileNotFoundError):
        GGUFFile(tmp_path / "absent.gguf")


# ------------------------------------------------------------ other models
def test_gemma3_header(model_or_skip: Callable[[str], Path]) -> None:
    f = GGUFFile(model_or_skip("gemma3-270m"))
    assert f.architecture == "gemma3"
    assert (f.arch_int("block_count"), f.arch_int("embedding_length")) == (18, 640)
    assert (f.arch_int("attention.head_count"), f.arch_int("attention.head_count_kv")) == (4, 1)
    assert f.arch_int("attention.key_length") == 256
    assert f.arch_int("attention.sliding_window") == 512
    assert f.arch_float("rope.freq_base") == 1e6
    assert f.type_census() == {"F32": 109, "Q5_0": 81, "Q4_K": 27, "Q8_0": 10, "Q6_K": 9}
    assert f.tensor("token_embd.weight").shape == (262144, 640)
    assert f.size == 253_113_024


@pytest.mark.qwen
def test_qwen25_header(model_or_skip: Callable[[str], Path]) -> None:
    f = GGUFFile(model_or_skip("qwen2.5-0.5b"))
    assert f.architecture == "qwen2"
    assert (f.arch_int("block_count"), f.arch_int("embedding_length")) == (24, 896)
    assert (f.arch_int("attention.head_count"), f.arch_int("attention.head_count_kv")) == (14, 2)
    assert f.type_census() == {"Q5_0": 133, "F32": 121, "Q8_0": 13, "Q6_K": 12, "Q4_K": 12}
    assert "blk.0.attn_q.bias" in {t.name for t in f.tensors}
    assert f.tensor("output.weight").shape == (151936, 896)
    assert f.size == 491_400_064


def _strings(items: list[bytes], endian: str) -> np.ndarray:
    raw = b"".join(struct.pack(endian + "Q", len(b)) + b for b in items)
    return np.frombuffer(b"\x00" * 5 + raw, dtype=np.uint8)  # items start at 5


@pytest.mark.parametrize("endian", ["<", ">"])
def test_string_offsets(endian: str) -> None:
    """The native scan of a metadata string array against offsets computed
    here with struct: in bounds, truncated mid-length, mid-text, and a length
    that would overflow."""
    items = [b"", b"a", "é".encode(), b"xyz" * 100, b"<eos>"]
    buf = _strings(items, endian)
    want = [5]
    for b in items:
        want.append(want[-1] + 8 + len(b))
    assert string_offsets(buf, 5, len(items), endian).tolist() == want
    assert string_offsets(buf, 5, 0, endian).tolist() == [5]
    for cut in (want[3] + 4, want[3] + 20, len(buf) - 1):
        with pytest.raises(_Truncated, match="runs past the end"):
            string_offsets(buf[:cut].copy(), 5, len(items), endian)
    huge = np.frombuffer(struct.pack(endian + "Q", 2**64 - 1) + b"abc", dtype=np.uint8)
    with pytest.raises(_Truncated, match="string 0 of 1 at offset 0"):
        string_offsets(huge, 0, 1, endian)
    out = np.empty(2, np.uint64)
    with pytest.raises(rlx.ShapeError, match="overlaps"):
        _rlx.gguf_string_offsets(out.view(np.uint8), 0, 1, False, out)
    with pytest.raises(rlx.ShapeError, match=r"out must be a writable \[2\]"):
        _rlx.gguf_string_offsets(buf, 5, 1, False, np.empty(3, np.uint64))
