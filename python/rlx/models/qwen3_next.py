"""Qwen3-Next (``Qwen3NextForCausalLM``, dense MLP configs): a hybrid stack of
Gated DeltaNet layers (``linear_attention``, :mod:`rlx.models.mixers_gdn`)
and gated attention layers (``full_attention``), each followed by a SwiGLU
MLP.

* attention: ``q_proj`` gives per head the query and an output gate
  (``ArchSpec.attn_gate``: output · sigmoid(gate)), per-head RMSNorm on q / k,
  partial NeoX RoPE (``partial_rotary_factor``, read at the top level or in
  ``rope_parameters``);
* every RMSNorm applies ``x·(1 + w)`` (``NameMap.norm_plus_one``) except the
  GDN's gated output norm (``x·w``);
* MoE layers (``num_experts > 0`` on a layer not in ``mlp_only_layers``, every
  ``decoder_sparse_step``-th): the shared MoE FFN (:mod:`rlx.models.moe`,
  softmax router, top-k renormalised when ``norm_topk_prob``, a shared expert
  scaled by ``sigmoid(shared_expert_gate(x))``), as qwen2_moe.

GGUF files are not read yet (HF directories only).
"""

from __future__ import annotations

from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import FULL, HFConfig, common_config
from rlx.models.mamba2 import gguf_unsupported
from rlx.models.moe import QWEN_MOE_LAYER, hf_moe_spec
from rlx.models.source import LLAMA_GLOBAL, LLAMA_LAYER, NameMap

LINEAR = "linear_attention"


def moe_layers(c: HFConfig, n_layers: int) -> list[int]:
    """Layers transformers builds a sparse MoE block for."""
    experts = c.get_int("num_experts", 0)
    step = c.get_int("decoder_sparse_step", 1)
    only = c.get("mlp_only_layers", [])
    if experts <= 0:
        return []
    return [i for i in range(n_layers) if i not in only and (i + 1) % max(step, 1) == 0]


def gdn_config(c: HFConfig, arch: str) -> tuple[Config, ArchSpec]:
    """The config both Qwen3-Next and Qwen3.5 text decoders share."""
    c.require_in("hidden_act", ("silu",), "silu")
    c.require_false("attention_bias")
    n = c.get_int("num_hidden_layers")
    moe = moe_layers(c, n)
    rp = c.get("rope_parameters")
    if c.get("partial_rotary_factor") is None and isinstance(rp, dict):
        if rp.get("partial_rotary_factor") is not None:
            c.data["partial_rotary_factor"] = rp["partial_rotary_factor"]
    types = c.layer_types(n, (FULL, LINEAR))
    c.data["layer_types"] = [FULL] * n
    cfg = common_config(c, arch, rope_kind="neox", tied_default=False)
    c.data["layer_types"] = types
    cfg.mixers = ["attention" if t == FULL else "gdn" for t in types]
    if moe:  # softmax router, top-k, shared expert gated by sigmoid (qwen2_moe's)
        norm = True if c.model_type == "qwen3_5_moe_text" else None  # 3.5 always renormalises
        cfg.moe = hf_moe_spec(
            c, "moe_intermediate_size", norm_topk=norm, shared=True, sparse_layers=True
        )
    cfg.conv_kernel = c.get_int("linear_conv_kernel_dim", 4)
    cfg.gdn_k_heads = c.get_int("linear_num_key_heads")
    cfg.gdn_v_heads = c.get_int("linear_num_value_heads")
    cfg.gdn_k_dim = c.get_int("linear_key_head_dim")
    cfg.gdn_v_dim = c.get_int("linear_value_head_dim")
    if cfg.gdn_k_dim != cfg.gdn_v_dim:
        raise c.unsupported(
            "linear_value_head_dim",
            f"!= linear_key_head_dim {cfg.gdn_k_dim}: rlx's gated_delta_net keeps a square "
            "state per head",
        )
    if cfg.gdn_k_heads <= 0 or cfg.gdn_v_heads % cfg.gdn_k_heads:
        raise c.unsupported("linear_num_value_heads", "must be a multiple of linear_num_key_heads")
    return cfg, ArchSpec(qk_norm=True, attn_gate=True)


def hf_config(c: HFConfig) -> tuple[Config, ArchSpec]:
    """Config and block spec of an HF ``qwen3_next`` directory."""
    return gdn_config(c, "qwen3_next")


#: GDN tensors shared by Qwen3-Next and Qwen3.5 (``linear_attn.*``)
GDN_LAYER = {
    "ssm_conv1d.weight": "linear_attn.conv1d.weight",
    "ssm_dt.bias": "linear_attn.dt_bias",
    "ssm_a_log": "linear_attn.A_log",
    "ssm_norm.weight": "linear_attn.norm.weight",
    "ssm_out.weight": "linear_attn.out_proj.weight",
}

NAMES = NameMap(
    hf_layer={
        **LLAMA_LAYER,
        **GDN_LAYER,
        **QWEN_MOE_LAYER,
        "ssm_in.weight": "linear_attn.in_proj_qkvz.weight",
        "ssm_ba.weight": "linear_attn.in_proj_ba.weight",
    },
    hf_global=LLAMA_GLOBAL,
    norm_plus_one=True,
    plain_norms=("ssm_norm.weight",),
)

FAMILY = Family(
    "qwen3_next", gguf_unsupported("qwen3_next"), hf_config, NAMES, model_types=("qwen3_next",)
)
