"""Falcon-H1 (``FalconH1ForCausalLM``): every layer runs a Mamba-2 mixer and
GQA attention side by side on the same normed input
(:func:`rlx.models.mixers_ssm.mamba2_attention`), then a SwiGLU MLP; muP
multipliers everywhere (transformers ``modeling_falcon_h1.py``):

* ``embedding_multiplier`` on the token embeddings, ``lm_head_multiplier`` on
  the logits;
* attention input ``·attention_in_multiplier``, keys ``·key_multiplier``
  (folded into the score scale), output ``·attention_out_multiplier``;
* Mamba-2 input ``·ssm_in_multiplier``, in_proj outputs z, x, B, C, dt each
  by their ``ssm_multipliers`` entry, output ``·ssm_out_multiplier``;
* MLP gate projection ``·mlp_multipliers[0]``, down projection ``·[1]``;
* the Mamba-2 output norm is optional (``mamba_rms_norm``) and gates after
  the norm when ``mamba_norm_before_gate``.

GGUF (llama.cpp ``falcon-h1``): the converter folds every multiplier into
the weights (``embedding_multiplier`` into ``token_embd``, ``lm_head_multiplier``
into ``output``, ``attention_in_multiplier`` into q / k / v,
``key_multiplier`` into k, ``attention_out_multiplier`` into ``attn_output``,
``ssm_in_multiplier`` and the z / x / B / C / dt ``ssm_multipliers`` into the
rows of ``ssm_in``, ``ssm_out_multiplier`` into ``ssm_out``, the MLP ones into
``ffn_gate`` / ``ffn_down``), so a GGUF Falcon-H1 runs with every multiplier
1. Mamba-2 keys and tensors as in :mod:`rlx.models.mamba2`; the pre-MLP norm
is stored as ``blk.{i}.ffn_norm`` (no ``.weight``); the optional ``ssm_norm``
is applied after the gate (llama.cpp's Mamba-2 layer).
"""

from __future__ import annotations

import math

from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import HFConfig, common_config
from rlx.models.mamba2 import (
    MAMBA2_LAYER,
    check_dt_limit,
    gguf_hybrid_config,
    gguf_mamba2_fields,
    head_count_kv,
)
from rlx.models.source import LLAMA_LAYER, NameMap


def _floats(c: HFConfig, key: str, n: int) -> list[float]:
    v = c.get(key)
    if v is None:
        return [1.0] * n
    if not isinstance(v, list) or len(v) != n or not all(isinstance(x, (int, float)) for x in v):
        raise c.fail(key, f"must list {n} numbers")
    return [float(x) for x in v]


def mamba2_fields(c: HFConfig, cfg: Config) -> None:
    """The ``mamba_*`` fields Falcon-H1 and GraniteMoeHybrid share."""
    hidden = cfg.hidden
    d_ssm = c.get("mamba_d_ssm")
    cfg.ssm_inner = (
        c.get_int("mamba_d_ssm") if d_ssm is not None
        else int(c.get_float("mamba_expand", 2) * hidden)
    )  # fmt: skip
    cfg.ssm_heads = c.get_int("mamba_n_heads")
    cfg.ssm_head_dim = c.get_int("mamba_d_head")
    cfg.ssm_state = c.get_int("mamba_d_state")
    cfg.ssm_groups = c.get_int("mamba_n_groups", 1)
    cfg.conv_kernel = c.get_int("mamba_d_conv", 4)
    cfg.conv_bias = bool(c.get("mamba_conv_bias", True))
    cfg.ssm_bias = bool(c.get("mamba_proj_bias", False))
    if cfg.ssm_heads * cfg.ssm_head_dim != cfg.ssm_inner:
        raise c.unsupported("mamba_n_heads", f"x mamba_d_head != the mamba width {cfg.ssm_inner}")
    if cfg.ssm_groups <= 0 or cfg.ssm_heads % cfg.ssm_groups:
        raise c.unsupported("mamba_n_groups", f"must divide mamba_n_heads ({cfg.ssm_heads})")
    check_dt_limit(c)


def hf_config(c: HFConfig) -> tuple[Config, ArchSpec]:
    """Config and block spec of an HF ``falcon_h1`` directory."""
    c.require_in("hidden_act", ("silu",), "silu")
    c.require_false("attention_bias", "mlp_bias")
    cfg = common_config(c, "falcon_h1", rope_kind="neox", layer_types=("full_attention",))
    mamba2_fields(c, cfg)
    n = cfg.n_layers
    cfg.mixers = ["mamba2_attention"] * n
    if not c.get("mamba_rms_norm", False):
        cfg.ssm_norm = "none"
    else:
        cfg.ssm_norm = "norm_first" if c.get("mamba_norm_before_gate", True) else "gate_first"
    cfg.ssm_in_mult = c.get_float("ssm_in_multiplier", 1.0)
    cfg.ssm_mults = _floats(c, "ssm_multipliers", 5)
    cfg.parallel_mults = (
        c.get_float("attention_in_multiplier", 1.0),
        c.get_float("attention_out_multiplier", 1.0),
        c.get_float("ssm_out_multiplier", 1.0),
    )
    cfg.score_scale = c.get_float("key_multiplier", 1.0) / math.sqrt(cfg.head_dim)
    gate_m, down_m = _floats(c, "mlp_multipliers", 2)
    spec = ArchSpec(
        embed_scale=c.get_float("embedding_multiplier", 1.0),
        mlp_mults=(gate_m, down_m),
        logit_scale=c.get_float("lm_head_multiplier", 1.0),
    )
    return cfg, spec


def gguf_config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``falcon-h1`` file."""
    n = f.arch_int("block_count")
    cfg = gguf_hybrid_config(f, "falcon_h1", "neox", head_count_kv(f, n))
    cfg.mixers = ["mamba2_attention"] * n
    gguf_mamba2_fields(f, cfg)
    return cfg, ArchSpec()


NAMES = NameMap(
    hf_layer={
        **LLAMA_LAYER,
        "ffn_norm.weight": "pre_ff_layernorm.weight",
        "ffn_gate.weight": "feed_forward.gate_proj.weight",
        "ffn_up.weight": "feed_forward.up_proj.weight",
        "ffn_down.weight": "feed_forward.down_proj.weight",
        **{k: f"mamba.{v}" for k, v in MAMBA2_LAYER.items()},
    },
    hf_global={
        "token_embd.weight": "model.embed_tokens.weight",
        "output_norm.weight": "model.final_layernorm.weight",
        "output.weight": "lm_head.weight",
    },
    gguf={"ffn_norm.weight": "ffn_norm"},
)

FAMILY = Family("falcon-h1", gguf_config, hf_config, NAMES, model_types=("falcon_h1",))
