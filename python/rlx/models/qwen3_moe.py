"""Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): the qwen3 block (per-head q/k
RMSNorm, no biases) with a mixture-of-experts FFN: softmax router, top-k
weights renormalised when ``norm_topk_prob`` (llama.cpp: always), no shared
expert. GGUF architecture ``qwen3moe``."""

from __future__ import annotations

from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import HFConfig, common_config
from rlx.models.moe import QWEN_MOE_LAYER, gguf_moe_spec, hf_moe_spec
from rlx.models.qwen2_moe import full_attention_only
from rlx.models.source import LLAMA_GLOBAL, LLAMA_LAYER, NameMap

NAMES = NameMap(hf_layer={**LLAMA_LAYER, **QWEN_MOE_LAYER}, hf_global=LLAMA_GLOBAL)


def config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``qwen3moe`` file."""
    cfg = Config.from_gguf(f, rope_kind="neox")
    cfg.moe = gguf_moe_spec(f, norm_default=True)
    return cfg, ArchSpec(qk_norm=True)


def hf_config(c: HFConfig) -> tuple[Config, ArchSpec]:
    """Config and block spec of an HF ``qwen3_moe`` directory."""
    c.require_in("hidden_act", ("silu",), "silu")
    c.require_false("attention_bias")
    full_attention_only(c)
    cfg = common_config(c, "qwen3moe", rope_kind="neox")
    cfg.moe = hf_moe_spec(c, "moe_intermediate_size", sparse_layers=True)
    return cfg, ArchSpec(qk_norm=True)


FAMILY = Family("qwen3moe", config, hf_config, NAMES, model_types=("qwen3_moe",))
