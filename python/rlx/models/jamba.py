"""Jamba (``JambaForCausalLM``): Mamba-1 layers
(:func:`rlx.models.mixers_ssm.mamba` with RMSNorms on dt, B and C) and GQA
attention layers without positional encoding (``ArchSpec.rope=False``),
every ``attn_layer_period``-th layer from ``attn_layer_offset``; each layer
then a SwiGLU MLP (``feed_forward``), or on the layers of
``expert_layer_period`` / ``expert_layer_offset`` when ``num_experts > 1`` the
shared MoE FFN (:mod:`rlx.models.moe`: softmax router, top-k weights not
renormalised, no shared expert).

GGUF (llama.cpp ``jamba``): ``attention.head_count_kv`` per layer (0 = a
Mamba layer), the Mamba-1 keys and tensors of :mod:`rlx.models.mamba` (plus
``ssm_{dt,b,c}_norm``), MoE layers where ``ffn_gate_inp`` is present
(``expert_count`` / ``expert_used_count``; llama.cpp does not renormalise
Jamba's top-k weights either). No RoPE, as in HF.
"""

from __future__ import annotations

import math
from dataclasses import replace

from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import FULL, HFConfig, common_config
from rlx.models.mamba import MAMBA_LAYER, gguf_mamba_fields
from rlx.models.mamba2 import gguf_hybrid_config, head_count_kv, tensor_names
from rlx.models.moe import MoeSpec, gguf_moe_spec
from rlx.models.source import LLAMA_LAYER, NameMap


def _periodic(c: HFConfig, n: int, period: str, offset: str) -> list[bool]:
    p, o = c.get_int(period, 1), c.get_int(offset, 0)
    if p <= 0 or not 0 <= o < p:
        raise c.fail(offset, f"must be in 0..{period} - 1")
    return [i % p == o for i in range(n)]


def hf_config(c: HFConfig) -> tuple[Config, ArchSpec]:
    """Config and block spec of an HF ``jamba`` directory."""
    c.require_in("hidden_act", ("silu",), "silu")
    n = c.get_int("num_hidden_layers")
    attn = _periodic(c, n, "attn_layer_period", "attn_layer_offset")
    experts = _periodic(c, n, "expert_layer_period", "expert_layer_offset")
    c.data.pop("layer_types", None)
    cfg = common_config(c, "jamba", rope_kind="neox", layer_types=(FULL,), tied_default=True)
    cfg.mixers = ["attention" if a else "mamba" for a in attn]
    hidden = cfg.hidden
    cfg.ssm_inner = int(c.get_float("mamba_expand", 2) * hidden)
    cfg.ssm_state = c.get_int("mamba_d_state", 16)
    rank = c.get("mamba_dt_rank", "auto")
    cfg.ssm_dt_rank = math.ceil(hidden / 16) if rank == "auto" else c.get_int("mamba_dt_rank")
    cfg.ssm_bias = bool(c.get("mamba_proj_bias", False))
    cfg.conv_kernel = c.get_int("mamba_d_conv", 4)
    cfg.conv_bias = bool(c.get("mamba_conv_bias", True))
    if c.get_int("num_experts", 1) > 1 and any(experts):
        # softmax router, top-k weights not renormalised, no shared expert
        cfg.moe = MoeSpec(
            n_experts=c.get_int("num_experts"),
            top_k=c.get_int("num_experts_per_tok"),
            expert_ffn=cfg.ffn,
            norm_topk=False,
            layers=tuple(experts),
        )
    return cfg, ArchSpec(rope=False)


def gguf_config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``jamba`` file."""
    kv = head_count_kv(f, f.arch_int("block_count"))
    cfg = gguf_hybrid_config(f, "jamba", "neox", kv)
    cfg.mixers = ["attention" if k > 0 else "mamba" for k in kv]
    gguf_mamba_fields(f, cfg)
    names = tensor_names(f)
    layers = tuple(f"blk.{i}.ffn_gate_inp.weight" in names for i in range(cfg.n_layers))
    if any(layers):  # a one-expert Jamba has no router: dense MLPs (expert_count 1)
        moe = gguf_moe_spec(f, norm_default=False)
        cfg.moe = None if moe is None else replace(moe, layers=layers)
    return cfg, ArchSpec(rope=False)


NAMES = NameMap(
    hf_layer={
        **LLAMA_LAYER,
        "ffn_norm.weight": "pre_ff_layernorm.weight",
        "ffn_gate.weight": "feed_forward.gate_proj.weight",
        "ffn_up.weight": "feed_forward.up_proj.weight",
        "ffn_down.weight": "feed_forward.down_proj.weight",
        **{k: f"mamba.{v}" for k, v in MAMBA_LAYER.items()},
        "ssm_dt_norm.weight": "mamba.dt_layernorm.weight",
        "ssm_b_norm.weight": "mamba.b_layernorm.weight",
        "ssm_c_norm.weight": "mamba.c_layernorm.weight",
        "ffn_gate_inp.weight": "feed_forward.router.weight",
        "ffn_gate_exps.weight": "feed_forward.experts.{e}.gate_proj.weight",
        "ffn_up_exps.weight": "feed_forward.experts.{e}.up_proj.weight",
        "ffn_down_exps.weight": "feed_forward.experts.{e}.down_proj.weight",
    },
    hf_global={
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.final_layernorm.weight",
        "output.weight": "lm_head.weight",
    },
)

FAMILY = Family("jamba", gguf_config, hf_config, NAMES, model_types=("jamba",))
