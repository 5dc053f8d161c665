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
refused naming the field.

GGUF (llama.cpp ``granitehybrid``): ``attention.head_count_kv`` per layer (0 =
a Mamba-2 layer), the Mamba-2 keys and tensors of :mod:`rlx.models.mamba2`,
the multipliers as ``embedding_scale``, ``residual_scale``,
``attention.scale`` and ``logit_scale`` (logits divided by it); the
converter permutes the attention Q/K rows for llama.cpp's normal RoPE
(``rope_kind="interleaved"``), and ``rope.scaling.finetuned`` switches RoPE
on or off (default on; the converter writes off for Granite 4's NoPE
hybrids). Experts stacked as ``ffn_*_exps``, the shared MLP as
``ffn_*_shexp`` (dense files: ``ffn_gate`` / ``ffn_up`` / ``ffn_down``).
"""

from __future__ import annotations

from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family
from rlx.models.falcon_h1 import mamba2_fields
from rlx.models.hf_config import FULL, HFConfig, common_config
from rlx.models.mamba2 import (
    MAMBA2_LAYER,
    gguf_fail,
    gguf_hybrid_config,
    gguf_mamba2_fields,
    head_count_kv,
)
from rlx.models.moe import MoeSpec, gguf_moe_spec
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


def gguf_config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``granitehybrid`` file."""
    kv = head_count_kv(f, f.arch_int("block_count"))
    cfg = gguf_hybrid_config(f, "granitemoehybrid", "interleaved", kv)
    cfg.mixers = ["attention" if k > 0 else "mamba2" for k in kv]
    gguf_mamba2_fields(f, cfg)
    scale = f.arch_float("attention.scale", 0.0)
    cfg.score_scale = scale if scale != 0.0 else None
    cfg.moe = gguf_moe_spec(f, norm_default=True)
    logit = f.arch_float("logit_scale", 1.0)
    if logit == 0.0:
        raise gguf_fail(f, f"{f.architecture}.logit_scale is 0")
    spec = ArchSpec(
        embed_scale=f.arch_float("embedding_scale", 1.0),
        residual_scale=f.arch_float("residual_scale", 1.0),
        logit_scale=1.0 / logit,
        rope=f.get_bool(f"{f.architecture}.rope.scaling.finetuned", True),
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
    "granitehybrid",
    gguf_config,
    hf_config,
    NAMES,
    model_types=("granitemoehybrid",),
)
