"""Granite 4.0 hybrid (``GraniteMoeHybridForCausalLM``): Mamba-2 layers
(``layer_types`` ``mamba`` / ``linear_attention``,
:func:`rlx.models.mixers_ssm.mamba2`, gate before the grouped norm) and GQA
attention layers (``attention`` / ``full_attention``), each followed by the
shared SwiGLU MLP (``shared_mlp.input_linear`` holds the gate then the up
rows) — plus, when ``num_local_experts > 0``, the MoE FFN of
:mod:`rlx.models.moe` (top-k of the router logits, softmax over those k;
``block_sparse_moe.input_linear [E, 2·ffn, hidden]`` split into the gate and
up experts by the ``#i/n`` name parts of :class:`~rlx.models.source.NameMap`).
Granite multipliers: embeddings ``·embedding_multiplier``, scores
``·attention_multiplier`` (instead of 1/sqrt(head_dim)), mixer and MLP
outputs ``·residual_multiplier`` before each residual add, logits
``/logits_scaling``. ``position_embedding_type`` other than ``rope`` is
refused naming the field. GGUF files are not read yet.
"""

from __future__ import annotations

from rlx.models.base import ArchSpec, Config, Family
from rlx.models.falcon_h1 import mamba2_fields
from rlx.models.hf_config import FULL, HFConfig, common_config
from rlx.models.mamba2 import MAMBA2_LAYER, gguf_unsupported
from rlx.models.moe import MoeSpec
from rlx.models.source import LLAMA_GLOBAL, LLAMA_LAYER, NameMap

#: layer types as the config class takes them and as it saves them
MAMBA_TYPES, ATTENTION_TYPES = ("mamba", "linear_attention"), ("attention", FULL)


def hf_config(c: HFConfig) -> tuple[Config, ArchSpec]:
    """Config and block spec of an HF ``granitemoehybrid`` directory."""
    c.require_in("hidden_act", ("silu",), "silu")
    c.require_false("attention_bias")
    if c.data.get("position_embedding_type", "rope") != "rope":  # None: no RoPE
        raise c.unsupported("position_embedding_type", "rlx implements 'rope'")
    n = c.get_int("num_hidden_layers")
    types = c.layer_types(n, MAMBA_TYPES + ATTENTION_TYPES)
    c.data["layer_types"] = [FULL] * n
    expert_ffn = c.get_int("intermediate_size")  # the experts' width
    c.data["intermediate_size"] = c.get_int("shared_intermediate_size")
    cfg = common_config(c, "granitemoehybrid", rope_kind="neox", tied_default=True)
    c.data["layer_types"] = types
    cfg.mixers = ["attention" if t in ATTENTION_TYPES else "mamba2" for t in types]
    if "mamba2" in cfg.mixers:
        mamba2_fields(c, cfg)
    cfg.score_scale = c.get_float("attention_multiplier", 1.0)
    if c.get_int("num_local_experts", 0) > 0:
        # top-k of the router logits, softmax over those k (= softmax, top-k,
        # renormalise); the shared MLP is added on every MoE layer
        cfg.moe = MoeSpec(
            n_experts=c.get_int("num_local_experts"),
            top_k=c.get_int("num_experts_per_tok"),
            expert_ffn=expert_ffn,
            norm_topk=True,
            shared_ffn=cfg.ffn,
        )
    spec = ArchSpec(
        embed_scale=c.get_float("embedding_multiplier", 1.0),
        residual_scale=c.get_float("residual_multiplier", 1.0),
        logit_scale=1.0 / c.get_float("logits_scaling", 1.0),
        mlp_gate_up=True,
    )
    return cfg, spec


NAMES = NameMap(
    hf_layer={
        **LLAMA_LAYER,
        "ffn_gate_up.weight": "shared_mlp.input_linear.weight",
        "ffn_down.weight": "shared_mlp.output_linear.weight",
        "ffn_gate_shexp.weight": "shared_mlp.input_linear.weight#0/2",
        "ffn_up_shexp.weight": "shared_mlp.input_linear.weight#1/2",
        "ffn_down_shexp.weight": "shared_mlp.output_linear.weight",
        "ffn_gate_inp.weight": "block_sparse_moe.router.layer.weight",
        "ffn_gate_exps.weight": "block_sparse_moe.input_linear.weight#0/2",
        "ffn_up_exps.weight": "block_sparse_moe.input_linear.weight#1/2",
        "ffn_down_exps.weight": "block_sparse_moe.output_linear.weight",
        **{k: f"mamba.{v}" for k, v in MAMBA2_LAYER.items()},
    },
    hf_global=LLAMA_GLOBAL,
)

FAMILY = Family(
    "granitemoehybrid",
    gguf_unsupported("granitemoehybrid"),
    hf_config,
    NAMES,
    model_types=("granitemoehybrid",),
)
