"""Mamba (``MambaForCausalLM``, Mamba-1): ``RMSNorm → Mamba mixer →
+residual`` layers (no MLP), final ``norm_f``; the mixer is
:func:`rlx.models.mixers_ssm.mamba` (selective scan with a per-channel
``A [inner, state]``). HF names under ``backbone.``.

GGUF (llama.cpp ``mamba``): keys ``mamba.ssm.{conv_kernel, inner_size,
state_size, time_step_rank (the dt rank), dt_b_c_rms}``; tensors
``blk.{i}.{attn_norm, ssm_in, ssm_conv1d (+ .bias), ssm_x, ssm_dt (+ .bias),
ssm_a, ssm_d, ssm_out}`` with ``ssm_a = −exp(A_log)`` ``[inner, state]`` and the
conv taps ``[inner, k]``. ``dt_b_c_rms`` (Falcon-Mamba's weightless RMSNorms
on dt, B, C) is refused.
"""

from __future__ import annotations

import math

from rlx.errors import UnsupportedOpError
from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import HFConfig
from rlx.models.mamba2 import (
    Shape,
    backbone_names,
    expect_tensors,
    gguf_fail,
    gguf_ssm_config,
    ssm_config,
    tensor_names,
)


def gguf_mamba_fields(f: GGUFFile, cfg: Config) -> None:
    """The Mamba-1 fields of ``cfg`` from ``{arch}.ssm.*``, and every
    Mamba-1 layer's tensor shapes checked (Jamba's dt / B / C norms when
    present)."""
    a = f.architecture
    cfg.ssm_inner = f.arch_int("ssm.inner_size")
    cfg.ssm_state = f.arch_int("ssm.state_size")
    cfg.ssm_dt_rank = f.arch_int("ssm.time_step_rank")
    cfg.conv_kernel = f.arch_int("ssm.conv_kernel")
    if min(cfg.ssm_inner, cfg.ssm_state, cfg.ssm_dt_rank, cfg.conv_kernel) <= 0:
        raise gguf_fail(f, f"{a}.ssm.inner_size / state_size / time_step_rank / conv_kernel "
                        "must be positive")  # fmt: skip
    if f.get_bool(f"{a}.ssm.dt_b_c_rms", False):
        raise UnsupportedOpError(
            f"[{a}] {f.path}: {a}.ssm.dt_b_c_rms (weightless RMSNorms on dt, B, C: "
            "Falcon-Mamba) is not implemented"
        )
    layers = [i for i, m in enumerate(cfg.mixers) if m == "mamba"]
    names = tensor_names(f)
    first = layers[0] if layers else 0
    cfg.conv_bias = f"blk.{first}.ssm_conv1d.bias" in names
    inner, n, r, hid = cfg.ssm_inner, cfg.ssm_state, cfg.ssm_dt_rank, cfg.hidden
    for i in layers:
        p = f"blk.{i}."
        want: dict[str, Shape] = {
            "ssm_in.weight": (2 * inner, hid),
            "ssm_conv1d.weight": [inner, cfg.conv_kernel],
            "ssm_x.weight": (r + 2 * n, inner),
            "ssm_dt.weight": (inner, r),
            "ssm_dt.bias": (inner,),
            "ssm_a": (inner, n),
            "ssm_d": (inner,),
            "ssm_out.weight": (hid, inner),
        }
        if cfg.conv_bias:
            want["ssm_conv1d.bias"] = (inner,)
        if p + "ssm_dt_norm.weight" in names:  # Jamba
            want.update({"ssm_dt_norm.weight": (r,), "ssm_b_norm.weight": (n,),
                         "ssm_c_norm.weight": (n,)})  # fmt: skip
        expect_tensors(f, {p + k: v for k, v in want.items()})


def gguf_config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``mamba`` file."""
    cfg = gguf_ssm_config(f, "mamba", "mamba")
    gguf_mamba_fields(f, cfg)
    return cfg, ArchSpec(mlp=False)


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

FAMILY = Family("mamba", gguf_config, hf_config, NAMES, model_types=("mamba",))
