"""Mamba (``MambaForCausalLM``, Mamba-1): ``RMSNorm → Mamba mixer →
+residual`` layers (no MLP), final ``norm_f``; the mixer is
:func:`rlx.models.mixers_ssm.mamba` (selective scan with a per-channel
``A [inner, state]``). HF names under ``backbone.``; GGUF not read yet."""

from __future__ import annotations

import math

from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import HFConfig
from rlx.models.mamba2 import backbone_names, gguf_unsupported, ssm_config


def hf_config(c: HFConfig) -> tuple[Config, ArchSpec]:
    """Config and block spec of an HF ``mamba`` directory."""
    c.require_in("hidden_act", ("silu",), "silu")
    hidden = c.get_int("hidden_size")
    n_layers = c.get_int("num_hidden_layers")
    cfg = ssm_config(c, "mamba", n_layers, hidden, c.get_float("layer_norm_epsilon", 1e-5))
    cfg.mixers = ["mamba"] * n_layers
    cfg.ssm_inner = c.get_int("intermediate_size", int(c.get_float("expand", 2) * hidden))
    cfg.ssm_state = c.get_int("state_size")
    rank = c.get("time_step_rank", "auto")
    cfg.ssm_dt_rank = math.ceil(hidden / 16) if rank == "auto" else c.get_int("time_step_rank")
    cfg.ssm_bias = bool(c.get("use_bias", False))
    cfg.conv_kernel = c.get_int("conv_kernel", 4)
    cfg.conv_bias = bool(c.get("use_conv_bias", True))
    return cfg, ArchSpec(mlp=False)


#: HF ``mixer.*`` names of the Mamba-1 mixer tensors (builder ``ssm_*``)
MAMBA_LAYER = {
    "ssm_in.weight": "in_proj.weight",
    "ssm_in.bias": "in_proj.bias",
    "ssm_conv1d.weight": "conv1d.weight",
    "ssm_conv1d.bias": "conv1d.bias",
    "ssm_x.weight": "x_proj.weight",
    "ssm_dt.weight": "dt_proj.weight",
    "ssm_dt.bias": "dt_proj.bias",
    "ssm_a_log": "A_log",
    "ssm_d": "D",
    "ssm_out.weight": "out_proj.weight",
    "ssm_out.bias": "out_proj.bias",
}

NAMES = backbone_names(MAMBA_LAYER)

FAMILY = Family("mamba", gguf_unsupported("mamba"), hf_config, NAMES, model_types=("mamba",))
