"""Mamba-2 (``Mamba2ForCausalLM``): a stack of ``RMSNorm → Mamba-2 mixer →
+residual`` layers (no MLP), final ``norm_f``, tied or untied head. The
mixer is :func:`rlx.models.mixers_ssm.mamba2`.

HF names live under ``backbone.``: ``embeddings``, ``layers.{i}.norm``,
``layers.{i}.mixer.{in_proj, conv1d, dt_bias, A_log, D, norm, out_proj}``,
``norm_f``.

GGUF (llama.cpp ``mamba2``, written by its ``convert_hf_to_gguf.py``): keys
``mamba2.ssm.{conv_kernel, inner_size, state_size, time_step_rank (= the
heads), group_count}``, ``block_count``, ``embedding_length``,
``attention.layer_norm_rms_epsilon``; tensors ``blk.{i}.{attn_norm, ssm_in,
ssm_conv1d (+ .bias), ssm_dt.bias, ssm_a, ssm_d, ssm_norm, ssm_out}``. The
converter stores ``ssm_a = −exp(A_log)`` (the mixer reads it as ``A``), the
conv taps squeezed to ``[channels, k]``, ``ssm_a`` / ``ssm_d`` as ``[heads, 1]``
and ``ssm_norm`` as ``[groups, inner/groups]``; llama.cpp gates before the
grouped norm and skips it when a file has no ``ssm_norm``. Every SSM tensor's
shape is checked against the metadata at load (:func:`expect_tensors`).
"""

from __future__ import annotations

import math
from typing import Union

import numpy as np

from rlx.errors import WeightFormatError
from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family
from rlx.models.hf_config import HFConfig
from rlx.models.source import NameMap

#: context of a recurrent model (no KV cache bounds it)
SSM_CTX = 1 << 20


def _ssm_base(arch: str, n_layers: int, hidden: int, eps: float, vocab: int, tied: bool) -> Config:
    return Config(
        arch=arch, n_layers=n_layers, hidden=hidden, heads=1, kv_heads=1, head_dim=2,
        ffn=0, eps=eps, rope_base=10000.0, rope_dims=2, ctx=SSM_CTX, vocab=vocab,
        tied_output=tied, windows=[0] * n_layers, rope_bases=[10000.0] * n_layers,
    )  # fmt: skip


def ssm_config(c: HFConfig, arch: str, n_layers: int, hidden: int, eps: float) -> Config:
    """A :class:`Config` for a model without attention layers (the
    attention fields get harmless placeholders)."""
    vocab = c.get_int("vocab_size")
    return _ssm_base(arch, n_layers, hidden, eps, vocab, bool(c.get("tie_word_embeddings", True)))


# ------------------------------------------------------------------ GGUF
#: an expected shape: a tuple must match exactly (row-major), a list only in
#: its element count (llama.cpp reshapes those vectors)
Shape = Union[tuple[int, ...], list[int]]


def gguf_fail(f: GGUFFile, what: str) -> WeightFormatError:
    """A load error naming the file's architecture, path and ``what``."""
    return WeightFormatError(f"[{f.architecture}] {f.path}: {what}")


def tensor_names(f: GGUFFile) -> set[str]:
    """Every tensor name of ``f``."""
    return {t.name for t in f.tensors}


def _vocab(f: GGUFFile) -> int:
    if "token_embd.weight" not in tensor_names(f):
        raise gguf_fail(f, "missing tensor 'token_embd.weight'")
    return f.tensor("token_embd.weight").shape[0]


def gguf_ssm_config(f: GGUFFile, arch: str, mixer: str) -> Config:
    """The :class:`Config` of a GGUF SSM-only model (Mamba, Mamba-2)."""
    n_layers = f.arch_int("block_count")
    cfg = _ssm_base(
        arch, n_layers, f.arch_int("embedding_length"),
        f.arch_float("attention.layer_norm_rms_epsilon", 1e-5), _vocab(f),
        "output.weight" not in tensor_names(f),
    )  # fmt: skip
    cfg.mixers = [mixer] * n_layers
    return cfg


def head_count_kv(f: GGUFFile, n_layers: int) -> list[int]:
    """``{arch}.attention.head_count_kv`` per layer (one number or one per
    layer; 0 marks a recurrent layer in llama.cpp's hybrids)."""
    key = f"{f.architecture}.attention.head_count_kv"
    kv = f.get(key)
    if kv is None:
        return [f.arch_int("attention.head_count")] * n_layers
    if isinstance(kv, list):
        if len(kv) != n_layers:
            raise gguf_fail(f, f"metadata key {key!r} has {len(kv)} entries for {n_layers} layers")
        return [int(x) for x in kv]
    return [f.get_int(key)] * n_layers


def gguf_hybrid_config(f: GGUFFile, arch: str, rope_kind: str, kv: list[int]) -> Config:
    """The attention fields of a GGUF hybrid (attention + recurrent
    layers): ``Config.from_gguf``'s keys, with ``head_count_kv`` per layer
    (``kv``; the attention layers must agree)."""
    n_layers = f.arch_int("block_count")
    attn = sorted({k for k in kv if k > 0})
    if len(attn) > 1:
        raise gguf_fail(f, f"attention layers differ in attention.head_count_kv {kv}")
    hidden = f.arch_int("embedding_length")
    heads = f.arch_int("attention.head_count")
    if heads <= 0 or hidden <= 0 or n_layers <= 0:
        raise gguf_fail(f, "embedding_length / attention.head_count / block_count must be positive")
    head_dim = f.arch_int("attention.key_length", hidden // heads)
    base = f.arch_float("rope.freq_base", 10000.0)
    return Config(
        arch=arch, n_layers=n_layers, hidden=hidden, heads=heads,
        kv_heads=attn[0] if attn else heads, head_dim=head_dim,
        ffn=f.arch_int("feed_forward_length", 0),
        eps=f.arch_float("attention.layer_norm_rms_epsilon", 1e-6), rope_base=base,
        rope_dims=f.arch_int("rope.dimension_count", head_dim),
        ctx=f.arch_int("context_length", 4096), vocab=_vocab(f),
        tied_output="output.weight" not in tensor_names(f), rope_kind=rope_kind,
        windows=[0] * n_layers, rope_bases=[base] * n_layers,
    )  # fmt: skip


def gguf_mamba2_fields(f: GGUFFile, cfg: Config) -> None:
    """The Mamba-2 fields of ``cfg`` from ``{arch}.ssm.*`` (heads =
    ``time_step_rank``), conv bias / output norm from the first Mamba-2
    layer's tensors, and every Mamba-2 layer's tensor shapes checked."""
    a = f.architecture
    cfg.ssm_inner = f.arch_int("ssm.inner_size")
    cfg.ssm_state = f.arch_int("ssm.state_size")
    cfg.ssm_heads = f.arch_int("ssm.time_step_rank")
    cfg.ssm_groups = f.arch_int("ssm.group_count", 1)
    cfg.conv_kernel = f.arch_int("ssm.conv_kernel")
    if cfg.ssm_heads <= 0 or cfg.ssm_inner <= 0 or cfg.ssm_inner % cfg.ssm_heads:
        raise gguf_fail(
            f, f"{a}.ssm.time_step_rank {cfg.ssm_heads} (the heads) must divide "
            f"{a}.ssm.inner_size {cfg.ssm_inner}"
        )  # fmt: skip
    if cfg.ssm_groups <= 0 or cfg.ssm_heads % cfg.ssm_groups:
        raise gguf_fail(
            f, f"{a}.ssm.group_count {cfg.ssm_groups} must divide the {cfg.ssm_heads} heads"
        )
    if cfg.ssm_state <= 0 or cfg.conv_kernel <= 0:
        raise gguf_fail(f, f"{a}.ssm.state_size / {a}.ssm.conv_kernel must be positive")
    cfg.ssm_head_dim = cfg.ssm_inner // cfg.ssm_heads
    layers = [i for i, m in enumerate(cfg.mixers) if m.startswith("mamba2")]
    names = tensor_names(f)
    first = layers[0] if layers else 0
    cfg.conv_bias = f"blk.{first}.ssm_conv1d.bias" in names
    cfg.ssm_norm = "gate_first" if f"blk.{first}.ssm_norm.weight" in names else "none"
    inner, g, n, h, hid = cfg.ssm_inner, cfg.ssm_groups, cfg.ssm_state, cfg.ssm_heads, cfg.hidden
    conv = inner + 2 * g * n
    for i in layers:
        p = f"blk.{i}."
        want: dict[str, Shape] = {
            "ssm_in.weight": (2 * inner + 2 * g * n + h, hid),
            "ssm_conv1d.weight": [conv, cfg.conv_kernel],
            "ssm_dt.bias": (h,),
            "ssm_a": [h],
            "ssm_d": [h],
            "ssm_out.weight": (hid, inner),
        }
        if cfg.conv_bias:
            want["ssm_conv1d.bias"] = (conv,)
        if cfg.ssm_norm != "none":
            want["ssm_norm.weight"] = [inner]
        expect_tensors(f, {p + k: v for k, v in want.items()})


def expect_tensors(f: GGUFFile, want: dict[str, Shape]) -> None:
    """Check the tensors ``want`` of ``f``: a missing one or one of the wrong
    shape is a WeightFormatError naming it."""
    names = tensor_names(f)
    for name, shape in want.items():
        if name not in names:
            raise gguf_fail(f, f"missing tensor {name!r}")
        got = tuple(f.tensor(name).shape)
        ok = (
            got == shape if isinstance(shape, tuple)
            else int(np.prod(got)) == int(np.prod(shape))
        )  # fmt: skip
        if not ok:
            raise gguf_fail(
                f, f"tensor {name!r} has shape {list(got)}; the metadata gives {list(shape)}"
            )


def gguf_config(f: GGUFFile) -> tuple[Config, ArchSpec]:
    """Config and block spec of a GGUF ``mamba2`` file."""
    cfg = gguf_ssm_config(f, "mamba2", "mamba2")
    gguf_mamba2_fields(f, cfg)
    return cfg, ArchSpec(mlp=False)


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

FAMILY = Family("mamba2", gguf_config, hf_config, NAMES, model_types=("mamba2",))
