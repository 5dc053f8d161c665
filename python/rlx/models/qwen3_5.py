"""Qwen3.5 text decoder (``Qwen3_5ForCausalLM``, ``model_type`` ``qwen3_5_text``):
the Qwen3-Next stack (:mod:`rlx.models.qwen3_next`: Gated DeltaNet and gated
attention layers, ``(1 + w)`` RMSNorms, partial RoPE) with the GDN
projections stored separately (``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``,
``in_proj_a``) and a dense MLP on every layer.

RoPE: transformers builds multimodal RoPE (``mrope_section``) from three
position grids; for text all three are the token position, so the rotation
is plain partial NeoX RoPE. The MoE variant (``qwen3_5_moe_text``: every
layer MoE, top-k always renormalised, gated shared expert) uses the shared
MoE FFN of :mod:`rlx.models.moe`; the multimodal ``qwen3_5`` (``text_config``)
is not loaded.

GGUF: llama.cpp ``qwen35`` / ``qwen35moe`` (:func:`rlx.models.qwen3_next.gguf_gdn_config`;
the converter reorders the value heads to tiled order when there are fewer
key heads, and writes interleaved multimodal RoPE sections, which for text
positions is the plain partial NeoX rotation).
"""

from __future__ import annotations

from rlx.errors import UnsupportedOpError
from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import HFConfig
from rlx.models.moe import QWEN_MOE_LAYER
from rlx.models.qwen3_next import GDN_GGUF, GDN_LAYER, gdn_config, gguf_gdn_config
from rlx.models.source import LLAMA_GLOBAL, LLAMA_LAYER, NameMap


def hf_config(c: HFConfig) -> tuple[Config, ArchSpec]:
    """Config and block spec of an HF ``qwen3_5_text`` directory."""
    if isinstance(c.data.get("text_config"), dict):
        raise UnsupportedOpError(
            f"[load] {c.path}: model_type {c.model_type!r} is the multimodal Qwen3.5; rlx "
            "loads the text decoder (model_type 'qwen3_5_text', Qwen3_5ForCausalLM)"
        )
    return gdn_config(c, "qwen3_5")


def gguf_config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``qwen35`` / ``qwen35moe`` file."""
    return gguf_gdn_config(f, "qwen3_5")


NAMES = NameMap(
    hf_layer={
        **LLAMA_LAYER,
        **GDN_LAYER,
        **QWEN_MOE_LAYER,
        "attn_qkv.weight": "linear_attn.in_proj_qkv.weight",
        "attn_gate.weight": "linear_attn.in_proj_z.weight",
        "ssm_beta.weight": "linear_attn.in_proj_b.weight",
        "ssm_alpha.weight": "linear_attn.in_proj_a.weight",
    },
    hf_global=LLAMA_GLOBAL,
    norm_plus_one=True,
    plain_norms=("ssm_norm.weight",),
    gguf=GDN_GGUF,
)

FAMILY = Family(
    "qwen35",
    gguf_config,
    hf_config,
    NAMES,
    model_types=("qwen3_5_text", "qwen3_5", "qwen3_5_moe_text"),
)
#: the MoE text decoder's GGUF architecture (same reader and names)
FAMILY_MOE = Family("qwen35moe", gguf_config, hf_config, NAMES)
