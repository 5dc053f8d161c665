"""Qwen3 (dense): llama block without biases, RMSNorm on each query / key head
before NeoX RoPE; ``head_dim`` from ``attention.key_length`` (GGUF) or
``head_dim`` (HF)."""

from __future__ import annotations

from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import FULL, HFConfig, common_config
from rlx.models.source import LLAMA_NAMES


def config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``qwen3`` file."""
    return Config.from_gguf(f, rope_kind="neox"), ArchSpec(qk_norm=True)


def hf_config(c: HFConfig) -> tuple[Config, ArchSpec]:
    """Config and block spec of an HF ``qwen3`` directory."""
    c.require_in("hidden_act", ("silu",), "silu")
    c.require_false("attention_bias")
    if c.get("layer_types") is not None and not c.get("use_sliding_window", False):
        c.data["layer_types"] = [FULL] * len(c.data["layer_types"])
    if c.get("use_sliding_window", False):
        raise c.unsupported("use_sliding_window", "Qwen3 sliding windows are not implemented")
    return common_config(c, "qwen3", rope_kind="neox"), ArchSpec(qk_norm=True)


FAMILY = Family("qwen3", config, hf_config, LLAMA_NAMES, model_types=("qwen3",))
