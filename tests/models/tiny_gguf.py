"""Tiny random decoder GGUFs (written with gguf's GGUFWriter) and an
independent float64 numpy forward pass to check the builders against.

The oracle reads the file back with ``gguf.GGUFReader`` and dequantizes with
``gguf.quants.dequantize``; it shares no code with ``rlx.models``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

VOCAB_TEXT = 250  # byte-alphabet tokens; + BOS + EOS
HIDDEN, FFN, LAYERS = 64, 128, 3


def _bytes() -> list[int]:
    """The bytes in vocabulary order: the printable ones, then the rest."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    return bs + [b for b in range(256) if b not in bs]


def _byte_alphabet() -> list[str]:
    """GPT-2's byte-to-unicode alphabet in vocabulary order: printable bytes
    stand for themselves, the others for 256, 257, … in byte order."""
    bs = _bytes()
    n_print = 188  # the printable bytes come first in ``_bytes()``
    return [chr(b) for b in bs[:n_print]] + [chr(256 + i) for i in range(256 - n_print)]


def byte_token_ids(text: str) -> list[int]:
    """The ids of ``text`` in the tiny models' vocabulary: one token per UTF-8
    byte (the vocabulary has no merges); token ``i`` is byte ``_bytes()[i]``."""
    order = _bytes()
    return [order.index(b) for b in text.encode()]


def geometry(arch: str) -> dict[str, int]:
    """Heads / head_dim per test architecture."""
    if arch == "gemma3":
        return {"heads": 4, "kv_heads": 1, "head_dim": 32}
    return {"heads": 4, "kv_heads": 2, "head_dim": 16}


def write_tiny(path: Path, arch: str, qtype: str = "F32", seed: int = 0,
               window: int = 5, pattern: object = 2,
               chat_template: Optional[str] = None) -> Path:  # fmt: skip
    """A 3-layer random ``arch`` model with 2-D weights stored as ``qtype``
    (and ``tokenizer.chat_template`` when ``chat_template`` is given). Its
    tokenizer has one token per byte (GPT-2 byte alphabet, no merges) plus
    ``<s>`` (256) and ``</s>`` (257): see :func:`byte_token_ids`."""
    rng = np.random.default_rng(seed)
    geo = geometry(arch)
    heads, kvh, hd = geo["heads"], geo["kv_heads"], geo["head_dim"]
    tokens = _byte_alphabet()[:256] + ["<s>", "</s>"]
    vocab = len(tokens)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_uint32(f"{arch}.block_count", LAYERS)
    w.add_uint32(f"{arch}.context_length", 1024)
    w.add_uint32(f"{arch}.embedding_length", HIDDEN)
    w.add_uint32(f"{arch}.feed_forward_length", FFN)
    w.add_uint32(f"{arch}.attention.head_count", heads)
    w.add_uint32(f"{arch}.attention.head_count_kv", kvh)
    w.add_uint32(f"{arch}.attention.key_length", hd)
    w.add_uint32(f"{arch}.attention.value_length", hd)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32(f"{arch}.rope.freq_base", 10000.0 if arch == "llama" else 1e6)
    if arch == "gemma3":
        w.add_uint32(f"{arch}.attention.sliding_window", window)
        if isinstance(pattern, list):
            w.add_array(f"{arch}.attention.sliding_window_pattern", pattern)
        else:
            w.add_uint32(f"{arch}.attention.sliding_window_pattern", int(pattern))  # type: ignore[call-overload]
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "gpt2")
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [1] * 256 + [3, 3])
    w.add_array("tokenizer.ggml.merges", [])
    w.add_uint32("tokenizer.ggml.bos_token_id", 256)
    w.add_uint32("tokenizer.ggml.eos_token_id", 257)
    w.add_bool("tokenizer.ggml.add_bos_token", True)
    if chat_template is not None:
        w.add_string("tokenizer.chat_template", chat_template)

    qt = gguf.GGMLQuantizationType[qtype]

    def mat(name: str, n: int, k: int, scale: float = 0.2) -> None:
        a = (rng.standard_normal((n, k)) * scale).astype(np.float32)
        if qtype == "F32":
            w.add_tensor(name, a)
        else:
            w.add_tensor(name, gguf.quants.quantize(a, qt), raw_dtype=qt)

    def vec(name: str, n: int, base: float = 1.0, scale: float = 0.1) -> None:
        w.add_tensor(name, (base + rng.standard_normal(n) * scale).astype(np.float32))

    mat("token_embd.weight", vocab, HIDDEN, 1.0)
    for i in range(LAYERS):
        p = f"blk.{i}."
        vec(p + "attn_norm.weight", HIDDEN)
        mat(p + "attn_q.weight", heads * hd, HIDDEN)
        mat(p + "attn_k.weight", kvh * hd, HIDDEN)
        mat(p + "attn_v.weight", kvh * hd, HIDDEN)
        mat(p + "attn_output.weight", HIDDEN, heads * hd)
        if arch == "qwen2":
            for t, n in (("q", heads * hd), ("k", kvh * hd), ("v", kvh * hd)):
                vec(p + f"attn_{t}.bias", n, 0.0, 0.3)
        if arch in ("gemma3", "qwen3"):
            vec(p + "attn_q_norm.weight", hd)
            vec(p + "attn_k_norm.weight", hd)
        if arch == "gemma3":
            vec(p + "post_attention_norm.weight", HIDDEN)
            vec(p + "post_ffw_norm.weight", HIDDEN)
        vec(p + "ffn_norm.weight", HIDDEN)
        mat(p + "ffn_gate.weight", FFN, HIDDEN)
        mat(p + "ffn_up.weight", FFN, HIDDEN)
        mat(p + "ffn_down.weight", HIDDEN, FFN)
    vec("output_norm.weight", HIDDEN)
    if arch == "qwen2":
        mat("output.weight", vocab, HIDDEN)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# ---------------------------------------------------------------- the oracle
def _weights(path: Path) -> dict[str, np.ndarray]:
    r = gguf.GGUFReader(str(path))
    out = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type)
        out[t.name] = np.asarray(a, np.float64).reshape([int(d) for d in reversed(t.shape)])
    return out


def _rms(x: np.ndarray, g: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def _rope(x: np.ndarray, base: float, interleaved: bool) -> np.ndarray:
    """x ``[n, heads, d]`` rotated by position ``0..n-1``."""
    n, _, d = x.shape
    inv = base ** (-np.arange(0, d, 2) / d)
    ang = np.arange(n)[:, None, None] * inv[None, None, :]
    c, s = np.cos(ang), np.sin(ang)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        a, b = x[..., : d // 2], x[..., d // 2 :]
    ra, rb = a * c - b * s, a * s + b * c
    out = np.empty_like(x)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = ra, rb
    else:
        out[..., : d // 2], out[..., d // 2 :] = ra, rb
    return out


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def reference_logits(
    path: Path, arch: str, ids: list[int], window: int = 5, kv_f16: bool = False
) -> np.ndarray:
    """float64 logits ``[len(ids), vocab]`` of the tiny model at ``path``;
    ``kv_f16``: keys (after RoPE) and values rounded to float16 as a half KV
    cache stores them (numpy's round to nearest even)."""
    W = _weights(path)
    geo = geometry(arch)
    heads, kvh, hd = geo["heads"], geo["kv_heads"], geo["head_dim"]
    n = len(ids)
    h = W["token_embd.weight"][ids]
    if arch == "gemma3":
        h = h * np.sqrt(HIDDEN)
    for i in range(LAYERS):
        p = f"blk.{i}."
        x = _rms(h, W[p + "attn_norm.weight"])
        q, k, v = (x @ W[p + f"attn_{t}.weight"].T for t in "qkv")
        if arch == "qwen2":
            q, k, v = (a + W[p + f"attn_{t}.bias"] for a, t in zip((q, k, v), "qkv"))
        q, k, v = q.reshape(n, heads, hd), k.reshape(n, kvh, hd), v.reshape(n, kvh, hd)
        if arch in ("gemma3", "qwen3"):
            q, k = _rms(q, W[p + "attn_q_norm.weight"]), _rms(k, W[p + "attn_k_norm.weight"])
        local = arch == "gemma3" and (i + 1) % 2 != 0
        base = 10000.0 if arch == "llama" or local else 1e6
        q, k = _rope(q, base, arch == "llama"), _rope(k, base, arch == "llama")
        if kv_f16:
            k, v = (a.astype(np.float16).astype(np.float64) for a in (k, v))
        qi, kj = np.arange(n)[:, None], np.arange(n)[None, :]
        visible = kj <= qi
        if local:
            visible &= qi - kj < window
        o = np.empty((n, heads, hd))
        for hh in range(heads):
            kv = hh // (heads // kvh)
            sc = q[:, hh] @ k[:, kv].T / np.sqrt(hd)
            sc = np.where(visible, sc, -np.inf)
            pr = np.exp(sc - sc.max(axis=1, keepdims=True))
            pr /= pr.sum(axis=1, keepdims=True)
            o[:, hh] = pr @ v[:, kv]
        a = o.reshape(n, heads * hd) @ W[p + "attn_output.weight"].T
        if arch == "gemma3":
            a = _rms(a, W[p + "post_attention_norm.weight"])
        h = h + a
        x = _rms(h, W[p + "ffn_norm.weight"])
        gate, up = x @ W[p + "ffn_gate.weight"].T, x @ W[p + "ffn_up.weight"].T
        act = _gelu_tanh(gate) if arch == "gemma3" else gate / (1 + np.exp(-gate))
        f = (act * up) @ W[p + "ffn_down.weight"].T
        if arch == "gemma3":
            f = _rms(f, W[p + "post_ffw_norm.weight"])
        h = h + f
    out = W.get("output.weight", W["token_embd.weight"])
    return _rms(h, W["output_norm.weight"]) @ out.T


#: max |rlx − oracle| over the oracle's largest |logit| for quantised weights
#: with the int8 prefill GEMM (m > 8 on CPUs with AVX-512 VNNI, on by default):
#: activations are rounded per block of 32 to two int8 levels, at most
#: max|x|/127/512 per element; through 3 layers and the output head that
#: measured 1.1e-4 – 3.7e-4 here. With the GEMM off (:func:`exact_prefill`)
#: the quantised matmuls dequantize exactly and 1e-4 holds.
INT8_PREFILL_TOL = 1e-3


@contextlib.contextmanager
def exact_prefill() -> Iterator[None]:
    """Runs the block with the int8 prefill GEMM off (f32 panels on the
    dequantized weights), restoring the previous setting after."""
    import rlx

    old = rlx.set_int8_prefill_gemm(False)
    try:
        yield
    finally:
        rlx.set_int8_prefill_gemm(old)
