"""Write the committed seed corpus (tiny valid inputs) under ``fuzz/corpus/``:
run by hand (``python fuzz/make_seeds.py``) when the formats the targets
read change. Every seed is a few hundred bytes to a few KB, so mutations
land in headers, not in tensor data."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import gguf
import numpy as np
import rlx

OUT = Path(__file__).resolve().parent / "corpus"


def _gguf(path: Path, arch: str, fill: callable) -> None:  # type: ignore[valid-type]
    w = gguf.GGUFWriter(str(path), arch)
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_seeds(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)

    def plain(w: gguf.GGUFWriter) -> None:
        w.add_uint32("test.block_count", 2)
        w.add_float32("test.rope.freq_base", 10000.0)
        w.add_string("general.name", "seed")
        w.add_bool("test.flag", True)
        w.add_int64("test.i64", -5)
        w.add_float64("test.f64", 0.5)
        w.add_array("test.ints", [1, 2, 3])
        w.add_array("test.strs", ["a", "bc", ""])
        w.add_tensor("a", rng.standard_normal((2, 3)).astype(np.float32))
        w.add_tensor("b", rng.standard_normal(4).astype(np.float16))
        w.add_tensor("c", rng.standard_normal((2, 2, 2)).astype(np.float32))

    def quant(w: gguf.GGUFWriter) -> None:
        w.add_uint32("general.alignment", 64)
        q = gguf.quants.quantize(rng.standard_normal((2, 32)).astype(np.float32),
                                 gguf.GGMLQuantizationType.Q8_0)  # fmt: skip
        w.add_tensor("q", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor("bf", rng.integers(0, 1 << 16, (2, 2)).astype(np.uint16),
                     raw_dtype=gguf.GGMLQuantizationType.BF16)  # fmt: skip

    _gguf(d / "plain.gguf", "test", plain)
    _gguf(d / "quant.gguf", "test", quant)
    # a nested array (written by hand: GGUFWriter has no nested arrays)
    raw = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, 1))
    key = b"test.nested"
    raw += struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 9, 2)
    for items in ([1, 2], [3]):
        raw += struct.pack("<IQ", 4, len(items)) + b"".join(struct.pack("<I", i) for i in items)
    (d / "nested.gguf").write_bytes(bytes(raw) + b"\0" * 16)


def tiny_model(path: Path, untied: bool = False) -> None:
    """A 1-layer llama-family model: hidden 8, 2 heads of 4, 1 KV head, vocab 8."""
    rng = np.random.default_rng(1)
    arch = "llama"
    hidden, ffn, heads, kvh, hd = 8, 16, 2, 1, 4
    tokens = ["a", "b", "c", "d", "ab", "cd", "<s>", "</s>"]

    def fill(w: gguf.GGUFWriter) -> None:
        w.add_uint32(f"{arch}.block_count", 1)
        w.add_uint32(f"{arch}.context_length", 64)
        w.add_uint32(f"{arch}.embedding_length", hidden)
        w.add_uint32(f"{arch}.feed_forward_length", ffn)
        w.add_uint32(f"{arch}.attention.head_count", heads)
        w.add_uint32(f"{arch}.attention.head_count_kv", kvh)
        w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
        w.add_float32(f"{arch}.rope.freq_base", 10000.0)
        w.add_string("tokenizer.ggml.model", "gpt2")
        w.add_string("tokenizer.ggml.pre", "gpt2")
        w.add_array("tokenizer.ggml.tokens", tokens)
        w.add_array("tokenizer.ggml.token_type", [1] * 6 + [3, 3])
        w.add_array("tokenizer.ggml.merges", ["a b", "c d"])
        w.add_uint32("tokenizer.ggml.bos_token_id", 6)
        w.add_uint32("tokenizer.ggml.eos_token_id", 7)

        def mat(name: str, n: int, k: int) -> None:
            w.add_tensor(name, (rng.standard_normal((n, k)) * 0.3).astype(np.float32))

        mat("token_embd.weight", len(tokens), hidden)
        w.add_tensor("blk.0.attn_norm.weight", np.ones(hidden, np.float32))
        mat("blk.0.attn_q.weight", heads * hd, hidden)
        mat("blk.0.attn_k.weight", kvh * hd, hidden)
        mat("blk.0.attn_v.weight", kvh * hd, hidden)
        mat("blk.0.attn_output.weight", hidden, heads * hd)
        w.add_tensor("blk.0.ffn_norm.weight", np.ones(hidden, np.float32))
        mat("blk.0.ffn_gate.weight", ffn, hidden)
        mat("blk.0.ffn_up.weight", ffn, hidden)
        mat("blk.0.ffn_down.weight", hidden, ffn)
        w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
        if untied:
            mat("output.weight", len(tokens), hidden)

    _gguf(path, arch, fill)


def safetensors(
    tensors: dict[str, tuple[str, list[int], bytes]], meta: dict | None = None
) -> bytes:  # type: ignore[type-arg]
    """A safetensors file from ``name -> (dtype, shape, bytes)``."""
    header: dict = {}  # type: ignore[type-arg]
    if meta is not None:
        header["__metadata__"] = meta
    data, off = b"", 0
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        data += raw
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(2)
    f32 = rng.standard_normal((2, 3)).astype(np.float32)
    (d / "plain.safetensors").write_bytes(safetensors({
        "w": ("F32", [2, 3], f32.tobytes()),
        "b": ("F16", [3], np.ones(3, np.float16).tobytes()),
        "s": ("I8", [], b"\x05"),
    }, {"format": "pt"}))  # fmt: skip
    (d / "kinds.safetensors").write_bytes(safetensors({
        "bf": ("BF16", [2, 2], np.arange(4, dtype=np.uint16).tobytes()),
        "i64": ("I64", [1, 2], np.arange(2, dtype=np.int64).tobytes()),
        "z": ("F32", [0, 4], b""),
        "u": ("U8", [4], b"\x01\x02\x03\x04"),
        "bool": ("BOOL", [2], b"\x00\x01"),
    }))  # fmt: skip


def graph_seeds(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    g = rlx.Graph("seed")
    x = g.input("x", [2, 4])
    w = g.param("w", [4, 3])
    g.outputs(g.softmax(g.matmul(x, w), axis=-1))
    (d / "matmul.json").write_text(g.to_json())
    g = rlx.Graph("sym")
    x = g.input("x", ["n", 8])
    g.outputs(g.rms_norm(g.add(x, x), g.param("gamma", [8]), eps=1e-5))
    (d / "sym.json").write_text(g.to_json())
    g = rlx.Graph("ops")
    q = g.input("q", [1, 4, 16])
    k = g.input("k", [1, 4, 8])
    a = g.attention(q, k, k, heads=2, kv_heads=1)
    r = g.reshape(a, [4, 16])
    t = g.transpose(r)
    c = g.concat([t, t], axis=0)
    n = g.narrow(c, 0, 1, 8)
    s = g.sum(g.silu(g.mul(n, n)), axis=-1)
    wq = g.param("wq", [3, 34], "u8")
    dm = g.dequant_matmul(g.input("h", [2, 32]), wq, scheme="q8_0", n=3, k=32)
    ln = g.layer_norm(dm, g.param("lg", [3]), g.param("lb", [3]), eps=1e-5)
    emb = g.gather(g.param("emb", [10, 4]), g.input("ids", [3], "i32"))
    g.outputs(s, g.softmax(g.cast(ln, "f32"), axis=-1), emb)
    (d / "ops.json").write_text(g.to_json())


def gguf_rows_seeds(d: Path) -> None:
    """Inputs of ``targets.gguf_rows_target``: Q8_0 / Q4_K / F32 / F16 rows."""
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    for name, k in (("Q8_0", 64), ("Q4_K", 256), ("F32", 8), ("F16", 8)):
        t = gguf.GGMLQuantizationType[name]
        bs, bb = gguf.GGML_QUANT_SIZES[t]
        rows = rng.integers(0, 256, (3, k // bs * bb), dtype=np.uint8)
        if name == "F32":
            rows = rng.standard_normal((3, k)).astype(np.float32).view(np.uint8)
        ids = [0, 2, 1]
        head = struct.pack("<IIBB", int(t), k, len(ids), 3) + struct.pack("<3h", *ids)
        (d / f"{name}.bin").write_bytes(head + rows.tobytes())


def main() -> None:
    gguf_seeds(OUT / "gguf")
    (OUT / "model").mkdir(parents=True, exist_ok=True)
    tiny_model(OUT / "model" / "llama.gguf")
    tiny_model(OUT / "model" / "llama_untied.gguf", untied=True)
    safetensors_seeds(OUT / "safetensors")
    graph_seeds(OUT / "graph_json")
    gguf_rows_seeds(OUT / "gguf_rows")
    for p in sorted(OUT.rglob("*")):
        if p.is_file():
            print(p.relative_to(OUT), p.stat().st_size)


if __name__ == "__main__":
    main()
