"""Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B): the qwen2 block (q/k/v biases)
with a mixture-of-experts FFN — softmax router, top-k weights renormalised
only when ``norm_topk_prob`` — plus a shared SwiGLU expert scaled by
``sigmoid(shared_expert_gate(x))``. ``mlp_only_layers`` /
``decoder_sparse_step`` layers keep the dense MLP (``intermediate_size``).
GGUF architecture ``qwen2moe``."""

from __future__ import annotations

from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import FULL, HFConfig, common_config
from rlx.models.moe import QWEN_MOE_LAYER, gguf_moe_spec, hf_moe_spec
from rlx.models.source import LLAMA_GLOBAL, LLAMA_LAYER, NameMap

NAMES = NameMap(hf_layer={**LLAMA_LAYER, **QWEN_MOE_LAYER}, hf_global=LLAMA_GLOBAL)


def full_attention_only(c: HFConfig) -> None:
    """Qwen MoE configs list ``layer_types`` but slide only with
    ``use_sliding_window`` (refused: not implemented for these families)."""
    if c.get("use_sliding_window", False):
        raise c.unsupported("use_sliding_window", "Qwen MoE sliding windows are not implemented")
    if c.get("layer_types") is not None:
        c.data["layer_types"] = [FULL] * len(c.data["layer_types"])


def config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``qwen2moe`` file."""
    cfg = Config.from_gguf(f, rope_kind="neox")
    cfg.moe = gguf_moe_spec(f, norm_default=False, shared_gate=True)
    return cfg, ArchSpec(qkv_bias=True)


def hf_config(c: HFConfig) -> tuple[Config, ArchSpec]:
    """Config and block spec of an HF ``qwen2_moe`` directory."""
    c.require_in("hidden_act", ("silu",), "silu")
    full_attention_only(c)
    cfg = common_config(c, "qwen2moe", rope_kind="neox")
    cfg.moe = hf_moe_spec(c, "moe_intermediate_size", shared=True, sparse_layers=True)
    return cfg, ArchSpec(qkv_bias=bool(c.get("qkv_bias", True)))


FAMILY = Family("qwen2moe", config, hf_config, NAMES, model_types=("qwen2_moe",))
