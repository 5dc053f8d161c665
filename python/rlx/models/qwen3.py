"""Qwen3 (dense): llama block without biases, RMSNorm on each query / key head
before NeoX RoPE; ``head_dim`` from ``attention.key_length``."""

from __future__ import annotations

from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config


def config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``qwen3`` file."""
    return Config.from_gguf(f, rope_kind="neox"), ArchSpec(qk_norm=True)
