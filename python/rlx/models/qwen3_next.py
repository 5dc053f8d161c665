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

GGUF (llama.cpp ``qwen3next``; Qwen3.5: ``qwen35`` / ``qwen35moe``):
``attention.recurrent_layers`` (else every ``full_attention_interval``-th
layer is attention), GDN sizes in ``ssm.{conv_kernel, state_size (= key head
dim), group_count (= key heads), time_step_rank (= value heads),
inner_size}``; the converter bakes the ``+1`` into every RMSNorm but the GDN
output norm, stores ``ssm_a = −exp(A_log)``, the pre-MLP norm as
``post_attention_norm`` and the GDN projections as described in
:mod:`rlx.models.mixers_gdn`. MoE layers where ``ffn_gate_inp`` is present
(llama.cpp renormalises the top-k weights; the shared expert is gated).
"""

from __future__ import annotations

from dataclasses import replace

from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import FULL, HFConfig, common_config
from rlx.models.mamba2 import (
    Shape,
    expect_tensors,
    gguf_fail,
    gguf_hybrid_config,
    head_count_kv,
    tensor_names,
)
from rlx.models.moe import QWEN_MOE_LAYER, gguf_moe_spec, hf_moe_spec
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


def _recurrent_layers(f: GGUFFile, n: int) -> list[bool]:
    a = f.architecture
    rec = f.get(f"{a}.attention.recurrent_layers")
    if rec is None:
        step = f.arch_int("full_attention_interval", 4)
        if step <= 0:
            raise gguf_fail(f, f"{a}.full_attention_interval {step} must be positive")
        return [(i + 1) % step != 0 for i in range(n)]
    if not isinstance(rec, list) or len(rec) != n:
        raise gguf_fail(f, f"{a}.attention.recurrent_layers must list {n} booleans")
    return [bool(r) for r in rec]


def gguf_gdn_config(f: GGUFFile, arch: str) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF Qwen3-Next / Qwen3.5 file."""
    a = f.architecture
    n = f.arch_int("block_count")
    cfg = gguf_hybrid_config(f, arch, "neox", head_count_kv(f, n))
    rec = _recurrent_layers(f, n)
    cfg.mixers = ["gdn" if r else "attention" for r in rec]
    cfg.conv_kernel = f.arch_int("ssm.conv_kernel")
    hk = cfg.gdn_k_heads = f.arch_int("ssm.group_count")
    hv = cfg.gdn_v_heads = f.arch_int("ssm.time_step_rank")
    dk = cfg.gdn_k_dim = f.arch_int("ssm.state_size")
    inner = f.arch_int("ssm.inner_size")
    if hk <= 0 or hv <= 0 or hv % hk or inner % hv or dk <= 0 or cfg.conv_kernel <= 0:
        raise gguf_fail(
            f, f"{a}.ssm.time_step_rank {hv} (value heads) must be a multiple of "
            f"{a}.ssm.group_count {hk} (key heads) and divide {a}.ssm.inner_size {inner}"
        )  # fmt: skip
    dv = cfg.gdn_v_dim = inner // hv
    if dv != dk:
        raise gguf_fail(
            f, f"value head dim {dv} ({a}.ssm.inner_size / time_step_rank) != "
            f"{a}.ssm.state_size {dk}: rlx's gated_delta_net keeps a square state per head"
        )  # fmt: skip
    # llama.cpp's Qwen3.5 converter reorders the value heads to tiled order
    cfg.gdn_v_tiled = a != "qwen3next" and hv != hk
    names = tensor_names(f)
    moe = gguf_moe_spec(f, norm_default=True, shared_gate=True)
    if moe is not None:
        cfg.moe = replace(
            moe, layers=tuple(f"blk.{i}.ffn_gate_inp.weight" in names for i in range(n))
        )
    kd, vd, hid = hk * dk, inner, cfg.hidden
    for i in (i for i, r in enumerate(rec) if r):
        p = f"blk.{i}."
        want: dict[str, Shape] = {
            "attn_qkv.weight": (2 * kd + vd, hid),
            "attn_gate.weight": (vd, hid),
            "ssm_conv1d.weight": [2 * kd + vd, cfg.conv_kernel],
            "ssm_dt.bias": (hv,),
            "ssm_a": [hv],
            "ssm_norm.weight": [dv],
            "ssm_out.weight": (hid, vd),
        }
        if p + "ssm_ba.weight" in names:
            want["ssm_ba.weight"] = (2 * hv, hid)
        else:
            want.update({"ssm_beta.weight": (hv, hid), "ssm_alpha.weight": (hv, hid)})
        expect_tensors(f, {p + k: v for k, v in want.items()})
    return cfg, ArchSpec(qk_norm=True, attn_gate=True)


def gguf_config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``qwen3next`` file."""
    return gguf_gdn_config(f, "qwen3_next")


#: GDN tensors shared by Qwen3-Next and Qwen3.5 (``linear_attn.*``)
GDN_LAYER = {
    "ssm_conv1d.weight": "linear_attn.conv1d.weight",
    "ssm_dt.bias": "linear_attn.dt_bias",
    "ssm_a_log": "linear_attn.A_log",
    "ssm_norm.weight": "linear_attn.norm.weight",
    "ssm_out.weight": "linear_attn.out_proj.weight",
}

#: GGUF renames of the Qwen3-Next / Qwen3.5 builder names
GDN_GGUF = {"ffn_norm.weight": "post_attention_norm.weight"}

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
    gguf=GDN_GGUF,
)

FAMILY = Family("qwen3next", gguf_config, hf_config, NAMES, model_types=("qwen3_next",))
