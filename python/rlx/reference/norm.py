"""Normalisation thunks. Statistics in float64 with population variance;
every operand (gamma, beta, bias, modulation) is stored in the thunk's
``dt``; one rounding on store.

* LayerNorm: Ba, Kiros & Hinton, arXiv:1607.06450 —
  ``(x − mean)/√(var + eps)·g + b``.
* RMSNorm: Zhang & Sennrich, arXiv:1910.07467 — ``x/√(mean(x²) + eps)·g + b``
  (the lowering passes a zero ``b`` when the graph has none).
* GroupNorm: Wu & He, arXiv:1803.08494 (NCHW, stats per (n, group)).
* adaLN(-Zero): Peebles & Xie, "Scalable Diffusion Models with
  Transformers", arXiv:2212.09748 — ``norm(x)·(1 + scale) + shift``,
  norm without affine parameters.
"""

from __future__ import annotations

import numpy as np

from . import Memory, reference
from ._act import silu, store
from ._common import fdt, mod_rows


def _ln(x: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + np.float64(np.float32(eps)))


def _rms(x: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + np.float64(np.float32(eps)))


def _rows(t: dict, mem: Memory, key: str, dt: np.dtype) -> np.ndarray:
    return mem.view(t[key], (t["rows"], t["h"]), dt).astype(np.float64)


def _vec(t: dict, mem: Memory, key: str, dt: np.dtype) -> np.ndarray:
    return mem.view(t[key], t["h"], dt).astype(np.float64)


@reference("layer_norm")
def layer_norm(t: dict, mem: Memory) -> None:
    """LayerNorm over the last axis of ``src [rows, h]``."""
    dt = fdt(t)
    y = _ln(_rows(t, mem, "src", dt), t["eps"]) * _vec(t, mem, "g", dt) + _vec(t, mem, "b", dt)
    store(mem.view(t["dst"], (t["rows"], t["h"]), dt), y)


@reference("rms_norm")
def rms_norm(t: dict, mem: Memory) -> None:
    """RMSNorm over the last axis of ``src [rows, h]``, plus ``b``."""
    dt = fdt(t)
    y = _rms(_rows(t, mem, "src", dt), t["eps"]) * _vec(t, mem, "g", dt) + _vec(t, mem, "b", dt)
    store(mem.view(t["dst"], (t["rows"], t["h"]), dt), y)


@reference("group_norm")
def group_norm(t: dict, mem: Memory) -> None:
    """GroupNorm on NCHW ``src``; ``g``/``b`` per channel ``[c]``."""
    dt = fdt(t)
    n, c, h, w, gr = t["n"], t["c"], t["h"], t["w"], t["num_groups"]
    if c % gr:
        raise ValueError(f"[group_norm] {c} channels not divisible by {gr} groups")
    x = mem.view(t["src"], (n, gr, (c // gr) * h * w), dt).astype(np.float64)
    y = _ln(x, t["eps"]).reshape(n, c, h, w)
    g = mem.view(t["g"], c, dt).astype(np.float64)[:, None, None]
    b = mem.view(t["b"], c, dt).astype(np.float64)[:, None, None]
    store(mem.view(t["dst"], (n, c, h, w), dt), y * g + b)


@reference("layer_norm2d")
def layer_norm2d(t: dict, mem: Memory) -> None:
    """LayerNorm2d on NCHW: normalise across C at each (n, y, x)."""
    dt = fdt(t)
    n, c, h, w = t["n"], t["c"], t["h"], t["w"]
    x = mem.view(t["src"], (n, c, h, w), dt).astype(np.float64)
    y = np.moveaxis(_ln(np.moveaxis(x, 1, -1), t["eps"]), -1, 1)
    g = mem.view(t["g"], c, dt).astype(np.float64)[:, None, None]
    b = mem.view(t["b"], c, dt).astype(np.float64)[:, None, None]
    store(mem.view(t["dst"], (n, c, h, w), dt), y * g + b)


def _residual_sum(t: dict, mem: Memory, dt: np.dtype) -> np.ndarray:
    s = _rows(t, mem, "x", dt) + _rows(t, mem, "res", dt)
    if t.get("has_bias"):
        s = s + _vec(t, mem, "bias", dt)
    return s


@reference("fused_residual_ln")
def fused_residual_ln(t: dict, mem: Memory) -> None:
    """``out = LN(x + res (+ bias[h] if has_bias))·g + b``."""
    dt = fdt(t)
    y = _ln(_residual_sum(t, mem, dt), t["eps"]) * _vec(t, mem, "g", dt) + _vec(t, mem, "b", dt)
    store(mem.view(t["out"], (t["rows"], t["h"]), dt), y)


@reference("fused_residual_rms_norm")
def fused_residual_rms_norm(t: dict, mem: Memory) -> None:
    """``out = RMSNorm(x + res (+ bias[h] if has_bias))·g + b``."""
    dt = fdt(t)
    y = _rms(_residual_sum(t, mem, dt), t["eps"]) * _vec(t, mem, "g", dt) + _vec(t, mem, "b", dt)
    store(mem.view(t["out"], (t["rows"], t["h"]), dt), y)


def _lead(t: dict, mem: Memory, key: str, dt: np.dtype) -> tuple[np.ndarray, list[int]]:
    """x-like ``[rows, h]`` operand reshaped to ``x_lead + [h]``, and mod dims."""
    x_lead, m_lead = mod_rows(t["lead_pack"])
    rows, h = t["rows"], t["h"]
    if int(np.prod(x_lead, dtype=np.int64)) != rows:
        raise ValueError(f"[{t['name']}] lead dims {x_lead} do not multiply to rows={rows}")
    x = mem.view(t[key], (rows, h), dt).astype(np.float64).reshape([*x_lead, h])
    return x, [*m_lead, h]


def _mod(t: dict, mem: Memory, key: str, mdims: list[int], dt: np.dtype) -> np.ndarray:
    return (
        mem.view(t[key], int(np.prod(mdims, dtype=np.int64)), dt).astype(np.float64).reshape(mdims)
    )


@reference("ada_layer_norm")
def ada_layer_norm(t: dict, mem: Memory) -> None:
    """``out = norm(x)·(1 + scale) + shift``; norm is LayerNorm when
    ``layer_norm`` else RMSNorm (no affine). ``scale``/``shift`` have dims
    ``mod_lead + [h]`` from ``lead_pack = [lead_rank, x_lead[8], mod_lead[8]]``
    (mod dims aligned with x's leading dims; size 1 broadcasts)."""
    dt = fdt(t)
    x, mdims = _lead(t, mem, "x", dt)
    y = _ln(x, t["eps"]) if t.get("layer_norm") else _rms(x, t["eps"])
    y = y * (1.0 + _mod(t, mem, "scale", mdims, dt)) + _mod(t, mem, "shift", mdims, dt)
    store(mem.view(t["out"], (t["rows"], t["h"]), dt), y)


@reference("gated_residual")
def gated_residual(t: dict, mem: Memory) -> None:
    """``out = x + gate·y`` with ``gate`` broadcast like adaLN's scale."""
    dt = fdt(t)
    x, mdims = _lead(t, mem, "x", dt)
    y, _ = _lead(t, mem, "y", dt)
    store(mem.view(t["out"], (t["rows"], t["h"]), dt), x + _mod(t, mem, "gate", mdims, dt) * y)


@reference("fused_rms_norm_mul_silu")
def fused_rms_norm_mul_silu(t: dict, mem: Memory) -> None:
    """Gated RMSNorm (gated DeltaNet output norm): ``rms_norm(x, g, b)·silu(z)``."""
    dt = fdt(t)
    y = _rms(_rows(t, mem, "x", dt), t["eps"]) * _vec(t, mem, "g", dt) + _vec(t, mem, "b", dt)
    store(mem.view(t["out"], (t["rows"], t["h"]), dt), y * silu(_rows(t, mem, "z", dt)))
