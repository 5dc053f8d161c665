"""OLMoE: the llama block with q / k RMSNorm over the whole projection
width (not per head), an optional ``clip_qkv`` (refused) and a
mixture-of-experts FFN: softmax router, top-k weights renormalised only
when ``norm_topk_prob``. GGUF architecture ``olmoe``."""

from __future__ import annotations

from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import HFConfig, common_config
from rlx.models.moe import QWEN_MOE_LAYER, gguf_moe_spec, hf_moe_spec
from rlx.models.source import LLAMA_GLOBAL, LLAMA_LAYER, NameMap

NAMES = NameMap(hf_layer={**LLAMA_LAYER, **QWEN_MOE_LAYER}, hf_global=LLAMA_GLOBAL)


def config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``olmoe`` file."""
    cfg = Config.from_gguf(f, rope_kind="neox")
    cfg.moe = gguf_moe_spec(f, norm_default=False)
    return cfg, ArchSpec(qk_norm_full=True)


def hf_config(c: HFConfig) -> tuple[Config, ArchSpec]:
    """Config and block spec of an HF ``olmoe`` directory."""
    c.require_in("hidden_act", ("silu",), "silu")
    c.require_false("attention_bias")
    if c.get("clip_qkv") is not None:
        raise c.unsupported("clip_qkv", "clamping q / k / v is not implemented")
    cfg = common_config(c, "olmoe", rope_kind="neox", layer_types=("full_attention",))
    cfg.moe = hf_moe_spec(c, "intermediate_size")
    return cfg, ArchSpec(qk_norm_full=True)


FAMILY = Family("olmoe", config, hf_config, NAMES, model_types=("olmoe",))
