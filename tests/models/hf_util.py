"""Helpers for the HF-directory tests: the committed tiny transformers
fixtures (``tests/fixtures/hf/<model_type>/``, made by
scripts/make_hf_fixtures.py on branch wt-fix), copies of them with a changed
config or re-encoded weights, and a safetensors writer."""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "hf"
#: the attention-only families (lfm2 has its own tests too)
DENSE = ("llama", "qwen2", "qwen3", "gemma3")


def fixture(name: str) -> Path:
    """The directory of fixture ``name`` (the test is skipped when absent)."""
    import pytest

    d = FIXTURES / name
    if not (d / "expected.npz").exists():
        pytest.skip(f"no HF fixture {d}")
    return d


def expected(d: Path) -> dict[str, np.ndarray]:
    """``expected.npz``: ids24 / logits24, prefill16_decode8, ids80 / logits80."""
    with np.load(d / "expected.npz") as e:
        return {k: e[k] for k in e.files}


def read_tensors(path: Path) -> dict[str, tuple[str, np.ndarray]]:
    """Every tensor of a safetensors file as (dtype name, raw array)."""
    from rlx.io.safetensors import open_safetensors

    f = open_safetensors(path)
    return {k: (f.info(k).dtype, np.array(f.tensor(k))) for k in f.keys()}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, np.ndarray]]) -> None:
    """Write ``{name: (dtype name, array)}`` (BF16 as uint16 bits)."""
    header: dict[str, Any] = {}
    blobs, off = [], 0
    for name, (dt, a) in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)))
        fh.write(h)
        for b in blobs:
            fh.write(b)


def copy_fixture(
    src: Path,
    dst: Path,
    config: Optional[Callable[[dict[str, Any]], None]] = None,
    skip: tuple[str, ...] = (),
) -> Path:
    """Copy fixture ``src`` to ``dst`` (weights too), editing config.json
    in place with ``config``; files named in ``skip`` are left out."""
    dst.mkdir(parents=True, exist_ok=True)
    for p in src.iterdir():
        if p.name not in skip and p.name != "expected.npz":
            shutil.copy(p, dst / p.name)
    if config is not None:
        c = json.loads((dst / "config.json").read_text())
        config(c)
        (dst / "config.json").write_text(json.dumps(c))
    return dst


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """f32 → bf16 bits (round to nearest even)."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits: np.ndarray) -> np.ndarray:
    """bf16 bits → f32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def rel(a: np.ndarray, b: np.ndarray) -> float:
    """max |a − b| over the largest |b|."""
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def hf_to_gguf(src: Path, path: Path, qtype: str = "F32") -> Path:
    """Convert fixture ``src`` to a GGUF file the way llama.cpp's
    convert_hf_to_gguf.py does (tensor names from gguf-py's own
    ``TensorNameMap``; llama's Q/K rows permuted for its rope mode, Gemma's
    norms stored as ``1 + w``, LFM2's conv taps squeezed to 2-D and its KV
    head count given per layer; MoE experts stacked ``[E, n, k]`` per layer,
    Mixtral written as ``llama``); matrices stored as ``qtype``."""
    import gguf

    c = json.loads((src / "config.json").read_text())
    mt = c["model_type"]
    arch = {"gemma3_text": "gemma3", "mixtral": "llama", "qwen2_moe": "qwen2moe",
            "qwen3_moe": "qwen3moe"}.get(mt, mt)  # fmt: skip
    n = c["num_hidden_layers"]
    heads, kvh = c["num_attention_heads"], c["num_key_value_heads"]
    hidden = c["hidden_size"]
    hd = c.get("head_dim") or hidden // heads
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], n)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_uint32(f"{arch}.block_count", n)
    w.add_uint32(f"{arch}.context_length", c["max_position_embeddings"])
    w.add_uint32(f"{arch}.embedding_length", hidden)
    w.add_uint32(f"{arch}.feed_forward_length", c["intermediate_size"])
    w.add_uint32(f"{arch}.attention.head_count", heads)
    types = c.get("layer_types") or ["full_attention"] * n
    if arch == "lfm2":
        w.add_array(f"{arch}.attention.head_count_kv",
                    [kvh if t == "full_attention" else 0 for t in types])  # fmt: skip
        w.add_uint32(f"{arch}.shortconv.l_cache", c["conv_L_cache"])
    else:
        w.add_uint32(f"{arch}.attention.head_count_kv", kvh)
    w.add_uint32(f"{arch}.attention.key_length", hd)
    w.add_uint32(f"{arch}.attention.value_length", hd)
    n_exp = c.get("num_experts") or c.get("num_local_experts")
    if n_exp:
        w.add_uint32(f"{arch}.expert_count", n_exp)
        w.add_uint32(f"{arch}.expert_used_count", c["num_experts_per_tok"])
        if "moe_intermediate_size" in c:
            w.add_uint32(f"{arch}.expert_feed_forward_length", c["moe_intermediate_size"])
        if c.get("shared_expert_intermediate_size"):
            w.add_uint32(f"{arch}.expert_shared_feed_forward_length",
                         c["shared_expert_intermediate_size"])  # fmt: skip
    eps = c.get("rms_norm_eps", c.get("norm_eps"))
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", eps)
    rp = c["rope_parameters"]
    w.add_float32(f"{arch}.rope.freq_base", rp.get("full_attention", rp)["rope_theta"])
    if arch == "gemma3":
        w.add_uint32(f"{arch}.attention.sliding_window", c["sliding_window"])
        w.add_array(f"{arch}.attention.sliding_window_pattern",
                    [t == "sliding_attention" for t in types])  # fmt: skip
        w.add_float32(f"{arch}.rope.freq_base_swa", rp["sliding_attention"]["rope_theta"])
    tok = json.loads((src / "tokenizer.json").read_text())
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    special = {t["id"] for t in tok["added_tokens"] if t["special"]}
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "gpt-2")  # llama.cpp's name (it refuses "gpt2")
    w.add_array("tokenizer.ggml.tokens", [t for t, _ in vocab])
    w.add_array("tokenizer.ggml.token_type", [3 if i in special else 1 for _, i in vocab])
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_array("tokenizer.ggml.merges", merges)
    w.add_uint32("tokenizer.ggml.bos_token_id", 0)
    w.add_uint32("tokenizer.ggml.eos_token_id", 0)
    qt = gguf.GGMLQuantizationType[qtype]

    def permute(a: np.ndarray, h: int) -> np.ndarray:
        return a.reshape(h, 2, a.shape[0] // h // 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)

    tensors = {k: a for k, (_, a) in read_tensors(src / "model.safetensors").items()}
    experts: dict[str, list[tuple[int, np.ndarray]]] = {}
    for name in [k for k in tensors if ".experts." in k]:
        m = re.fullmatch(r"(.+\.experts)\.(\d+)\.(.+)", name)
        assert m is not None, name
        experts.setdefault(f"{m.group(1)}.{m.group(3)}", []).append(
            (int(m.group(2)), tensors.pop(name))
        )
    for name, parts in experts.items():
        tensors[name] = np.stack([a for _, a in sorted(parts, key=lambda t: t[0])])
    for name, a in tensors.items():
        if name == "lm_head.weight" and c.get("tie_word_embeddings"):
            continue
        base, suffix = name.rsplit(".", 1)
        gname = names.get_name(base)
        assert gname is not None, name
        a = a.astype(np.float32)
        if arch == "llama" and base.endswith("q_proj"):
            a = permute(a, heads)
        if arch == "llama" and base.endswith("k_proj"):
            a = permute(a, kvh)
        if arch == "gemma3" and base.endswith("norm"):
            a = a + 1
        if arch == "lfm2" and base.endswith("conv.conv"):
            a = a.squeeze(1)
        full = f"{gname}.{suffix}"
        if qtype != "F32" and a.ndim >= 2 and a.shape[-1] % gguf.GGML_QUANT_SIZES[qt][0]:
            # rows that are not whole blocks: F16, as llama.cpp's converter falls back
            w.add_tensor(full, np.ascontiguousarray(a, np.float16))
        elif a.ndim == 3 and qtype != "F32":
            w.add_tensor(full, gguf.quants.quantize(a, qt), raw_dtype=qt)
        elif a.ndim == 2 and qtype != "F32" and not base.endswith("conv.conv"):
            w.add_tensor(full, gguf.quants.quantize(a, qt), raw_dtype=qt)
        else:
            w.add_tensor(full, np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
