"""Mamba-2 (``Mamba2ForCausalLM``): a stack of ``RMSNorm → Mamba-2 mixer →
+residual`` layers (no MLP), final ``norm_f``, tied or untied head. The
mixer is :func:`rlx.models.mixers_ssm.mamba2`.

HF names live under ``backbone.``: ``embeddings``, ``layers.{i}.norm``,
``layers.{i}.mixer.{in_proj, conv1d, dt_bias, A_log, D, norm, out_proj}``,
``norm_f``. GGUF files (llama.cpp stores ``A`` instead of ``A_log``) are not
read yet.
"""

from __future__ import annotations

import math
from typing import Any

from rlx.errors import UnsupportedOpError
from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import HFConfig
from rlx.models.source import NameMap

#: context of a recurrent model (no KV cache bounds it)
SSM_CTX = 1 << 20


def gguf_unsupported(arch: str) -> Any:
    """The GGUF reader of an HF-only family: refuses with a clear error."""

    def read(f: GGUFFile) -> tuple[Config, ArchSpec]:
        raise UnsupportedOpError(
            f"[{arch}] {f.path}: GGUF {arch} files are not supported yet; load the "
            "Hugging Face directory"
        )

    return read


def ssm_config(c: HFConfig, arch: str, n_layers: int, hidden: int, eps: float) -> Config:
    """A :class:`Config` for a model without attention layers (the
    attention fields get harmless placeholders)."""
    return Config(
        arch=arch, n_layers=n_layers, hidden=hidden, heads=1, kv_heads=1, head_dim=2,
        ffn=0, eps=eps, rope_base=10000.0, rope_dims=2, ctx=SSM_CTX,
        vocab=c.get_int("vocab_size"), tied_output=bool(c.get("tie_word_embeddings", True)),
        windows=[0] * n_layers, rope_bases=[10000.0] * n_layers,
    )  # fmt: skip


def check_dt_limit(c: HFConfig, key: str = "time_step_limit") -> None:
    """Mamba-2's chunked path clamps ``dt`` to ``time_step_limit``; rlx
    implements the default ``(0, inf)`` (a no-op after softplus)."""
    lim = c.get(key)
    if lim is None:
        return
    hi = lim[1] if isinstance(lim, (list, tuple)) and len(lim) == 2 else None
    if isinstance(hi, dict):
        hi = hi.get("__float__")
    try:
        ok = float(lim[0]) <= 0.0 and math.isinf(float(hi))  # type: ignore[arg-type]
    except (TypeError, ValueError, IndexError, KeyError):
        ok = False
    if not ok:
        raise c.unsupported(key, "rlx implements time_step_limit (0, inf) only")


def hf_config(c: HFConfig) -> tuple[Config, ArchSpec]:
    """Config and block spec of an HF ``mamba2`` directory."""
    c.require_in("hidden_act", ("silu",), "silu")
    check_dt_limit(c)
    hidden = c.get_int("hidden_size")
    n_layers = c.get_int("num_hidden_layers")
    cfg = ssm_config(c, "mamba2", n_layers, hidden, c.get_float("layer_norm_epsilon", 1e-5))
    cfg.mixers = ["mamba2"] * n_layers
    cfg.ssm_inner = int(c.get_float("expand", 2) * hidden)
    cfg.ssm_state = c.get_int("state_size")
    cfg.ssm_heads = c.get_int("num_heads")
    cfg.ssm_head_dim = c.get_int("head_dim")
    cfg.ssm_groups = c.get_int("n_groups", 1)
    cfg.ssm_bias = bool(c.get("use_bias", False))
    cfg.conv_kernel = c.get_int("conv_kernel", 4)
    cfg.conv_bias = bool(c.get("use_conv_bias", True))
    if cfg.ssm_heads * cfg.ssm_head_dim != cfg.ssm_inner:
        raise c.unsupported("num_heads", f"x head_dim != expand x hidden_size ({cfg.ssm_inner})")
    if cfg.ssm_groups <= 0 or cfg.ssm_heads % cfg.ssm_groups:
        raise c.unsupported("n_groups", f"must divide num_heads ({cfg.ssm_heads})")
    return cfg, ArchSpec(mlp=False)


#: HF ``mixer.*`` names of the Mamba-2 mixer tensors (builder ``ssm_*``)
MAMBA2_LAYER = {
    "ssm_in.weight": "in_proj.weight",
    "ssm_in.bias": "in_proj.bias",
    "ssm_conv1d.weight": "conv1d.weight",
    "ssm_conv1d.bias": "conv1d.bias",
    "ssm_dt.bias": "dt_bias",
    "ssm_a_log": "A_log",
    "ssm_d": "D",
    "ssm_norm.weight": "norm.weight",
    "ssm_out.weight": "out_proj.weight",
    "ssm_out.bias": "out_proj.bias",
}


def backbone_names(mixer: dict[str, str]) -> NameMap:
    """The HF names of a ``backbone.``-rooted SSM stack (Mamba, Mamba-2):
    ``layers.{i}.norm``, ``layers.{i}.mixer.*`` per ``mixer`` (builder →
    HF name inside the mixer), embeddings, ``norm_f`` and ``lm_head``."""
    return NameMap(
        hf_layer={
            "attn_norm.weight": "norm.weight",
            **{k: f"mixer.{v}" for k, v in mixer.items()},
        },
        hf_global={
            "token_embd.weight": "backbone.embeddings.weight",
            "output_norm.weight": "backbone.norm_f.weight",
            "output.weight": "lm_head.weight",
        },
        hf_prefix="backbone.",
    )


NAMES = backbone_names(MAMBA2_LAYER)

FAMILY = Family("mamba2", gguf_unsupported("mamba2"), hf_config, NAMES, model_types=("mamba2",))
