"""Qwen2 / Qwen2.5: llama block with Q/K/V biases, NeoX (rotate-half) RoPE
with base 1e6 (from metadata), untied output matrix."""

from __future__ import annotations

from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config


def config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``qwen2`` file."""
    return Config.from_gguf(f, rope_kind="neox"), ArchSpec(qkv_bias=True)
