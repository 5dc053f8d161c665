"""Qwen2 / Qwen2.5: llama block with Q/K/V biases, NeoX (rotate-half) RoPE
with base 1e6 (from metadata), untied output matrix (tied in the small ones).
HF sliding windows (``use_sliding_window``) apply to the layers from
``max_window_layers`` on (``layer_types`` in transformers v5 configs)."""

from __future__ import annotations

from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import FULL, SLIDING, HFConfig, common_config
from rlx.models.source import LLAMA_NAMES


def config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``qwen2`` file."""
    return Config.from_gguf(f, rope_kind="neox"), ArchSpec(qkv_bias=True)


def hf_config(c: HFConfig) -> tuple[Config, ArchSpec]:
    """Config and block spec of an HF ``qwen2`` directory."""
    c.require_in("hidden_act", ("silu",), "silu")
    if c.get("layer_types") is None and c.get("use_sliding_window", False):
        n = c.get_int("num_hidden_layers")
        first = c.get_int("max_window_layers", n)
        c.data["layer_types"] = [SLIDING if i >= first else FULL for i in range(n)]
    if not c.get("use_sliding_window", False) and c.get("layer_types") is not None:
        # transformers ignores sliding_window unless use_sliding_window is set
        c.data["layer_types"] = [FULL] * len(c.data["layer_types"])
    return common_config(c, "qwen2", rope_kind="neox"), ArchSpec(qkv_bias=True)


FAMILY = Family("qwen2", config, hf_config, LLAMA_NAMES, model_types=("qwen2",))
