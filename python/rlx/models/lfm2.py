"""LFM2 (Liquid AI): a hybrid stack of short-conv layers and GQA attention
layers, each followed by a SwiGLU MLP, with the final RMSNorm that the
checkpoint calls ``embedding_norm``.

* short conv (:func:`rlx.models.mixers.short_conv`): ``in_proj`` → ``B, C,
  x``; causal depthwise conv (``conv_L_cache`` taps, optional biases) over
  ``B·x``; ``C·conv``; ``out_proj``;
* attention: per-head RMSNorm on Q and K (``q_layernorm`` / ``k_layernorm``)
  before NeoX RoPE (base ``rope_theta``, 1e6), scores ``1/sqrt(head_dim)``;
* layers: ``layer_types`` (``conv`` / ``full_attention``) or the older
  ``full_attn_idxs``; tied output (``tie_embedding`` in older configs).

GGUF (llama.cpp ``lfm2``): tensors ``blk.{i}.shortconv.{conv,in_proj,out_proj}``,
the final norm stored as ``token_embd_norm.weight``, the conv kernel in
``lfm2.shortconv.l_cache`` and ``attention.head_count_kv`` one entry per layer
(0 = conv layer).
"""

from __future__ import annotations

import numpy as np

from rlx.errors import WeightFormatError
from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import FULL, HFConfig, common_config
from rlx.models.source import LLAMA_GLOBAL, NameMap

CONV = "conv"


def config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``lfm2`` file."""
    a = f.architecture
    kv = f.get(f"{a}.attention.head_count_kv")
    n_layers = f.arch_int("block_count")
    if isinstance(kv, (list, np.ndarray)):
        kv_list = [int(x) for x in kv]
        if len(kv_list) != n_layers:
            raise WeightFormatError(
                f"[lfm2] {f.path}: attention.head_count_kv has {len(kv_list)} entries "
                f"for {n_layers} layers"
            )
    else:
        kv_list = [int(kv if kv is not None else f.arch_int("attention.head_count"))] * n_layers
    attn = [k for k in kv_list if k > 0]
    if len(set(attn)) > 1:
        raise WeightFormatError(f"[lfm2] {f.path}: attention layers differ in KV heads {kv_list}")
    heads = f.arch_int("attention.head_count")
    hidden = f.arch_int("embedding_length")
    base = f.arch_float("rope.freq_base", 1e6)
    head_dim = hidden // heads
    cfg = Config(
        arch="lfm2",
        n_layers=n_layers,
        hidden=hidden,
        heads=heads,
        kv_heads=attn[0] if attn else heads,
        head_dim=head_dim,
        ffn=f.arch_int("feed_forward_length"),
        eps=f.arch_float("attention.layer_norm_rms_epsilon", 1e-5),
        rope_base=base,
        rope_dims=head_dim,
        ctx=f.arch_int("context_length", 128000),
        vocab=f.tensor("token_embd.weight").shape[0],
        tied_output="output.weight" not in {t.name for t in f.tensors},
        rope_kind="neox",
        windows=[0] * n_layers,
        rope_bases=[base] * n_layers,
        mixers=["attention" if k > 0 else "short_conv" for k in kv_list],
        conv_kernel=f.arch_int("shortconv.l_cache", 3),
        conv_bias=f"blk.{kv_list.index(0)}.shortconv.in_proj.bias" in {t.name for t in f.tensors}
        if 0 in kv_list
        else False,
    )
    return cfg, ArchSpec(qk_norm=True)


def hf_config(c: HFConfig) -> tuple[Config, ArchSpec]:
    """Config and block spec of an HF ``lfm2`` directory."""
    n = c.get_int("num_hidden_layers")
    if c.get("layer_types") is None:
        full = c.get("full_attn_idxs", list(range(n)))
        c.data["layer_types"] = [FULL if i in full else CONV for i in range(n)]
    if "intermediate_size" not in c.data and "block_ff_dim" in c.data:
        c.data["intermediate_size"] = c.data["block_ff_dim"]
    types = c.layer_types(n, (FULL, CONV))
    c.data["layer_types"] = [FULL] * n  # windows / RoPE: every attention layer is global
    cfg = common_config(
        c, "lfm2", rope_kind="neox", eps_key="norm_eps", default_theta=1e6,
        tied_default=bool(c.get("tie_embedding", True)),
    )  # fmt: skip
    c.data["layer_types"] = types
    cfg.mixers = ["attention" if t == FULL else "short_conv" for t in types]
    cfg.conv_kernel = c.get_int("conv_L_cache", 3)
    cfg.conv_bias = bool(c.get("conv_bias", False))
    return cfg, ArchSpec(qk_norm=True)


NAMES = NameMap(
    hf_layer={
        "attn_norm.weight": "operator_norm.weight",
        "ffn_norm.weight": "ffn_norm.weight",
        "attn_q.weight": "self_attn.q_proj.weight",
        "attn_k.weight": "self_attn.k_proj.weight",
        "attn_v.weight": "self_attn.v_proj.weight",
        "attn_output.weight": "self_attn.out_proj.weight",
        "attn_q_norm.weight": "self_attn.q_layernorm.weight",
        "attn_k_norm.weight": "self_attn.k_layernorm.weight",
        "ffn_gate.weight": "feed_forward.w1.weight",
        "ffn_up.weight": "feed_forward.w3.weight",
        "ffn_down.weight": "feed_forward.w2.weight",
        **{
            f"shortconv.{part}.{kind}": f"conv.{hf}.{kind}"
            for part, hf in (("in_proj", "in_proj"), ("out_proj", "out_proj"), ("conv", "conv"))
            for kind in ("weight", "bias")
        },
    },
    hf_global={**LLAMA_GLOBAL, "output_norm.weight": "model.embedding_norm.weight"},
    gguf={"output_norm.weight": "token_embd_norm.weight"},
)

FAMILY = Family("lfm2", config, hf_config, NAMES, model_types=("lfm2",))
