"""Reading a Hugging Face ``config.json`` into :class:`~rlx.models.base.Config`.

Both layouts transformers writes are understood: v4 (``rope_theta``,
``rope_scaling``, Gemma 3's ``rope_local_base_freq``) and v5
(``rope_parameters``, per layer type for Gemma 3). A field rlx cannot honour
raises :class:`~rlx.errors.UnsupportedOpError` (or
:class:`~rlx.errors.WeightFormatError` when a required one is missing or
malformed) naming the field, never a silently different model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlx.errors import UnsupportedOpError, WeightFormatError
from rlx.models.base import Config, RopeScaling

_MISSING: Any = object()

#: rope types rlx implements (``RopeScaling.kind``).
ROPE_TYPES = ("default", "linear", "llama3")
#: ``layer_types`` entries that are attention with a full / sliding window.
FULL, SLIDING = "full_attention", "sliding_attention"


class HFConfig:
    """``config.json`` of an HF directory with checked accessors; every
    error names the file and the field."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "config.json"
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            raise WeightFormatError(f"[load] {root}: no config.json in the directory") from None
        except (OSError, ValueError) as e:
            raise WeightFormatError(f"[load] {self.path}: not valid JSON ({e})") from e
        if not isinstance(data, dict):
            raise WeightFormatError(f"[load] {self.path}: not a JSON object")
        self.data: dict[str, Any] = data

    @property
    def model_type(self) -> str:
        """``model_type`` (the registry key)."""
        return str(self.data.get("model_type", ""))

    def fail(self, key: str, what: str) -> WeightFormatError:
        """A WeightFormatError about field ``key``."""
        return WeightFormatError(f"[load] {self.path}: field {key!r} {what}")

    def unsupported(self, key: str, what: str) -> UnsupportedOpError:
        """An UnsupportedOpError about field ``key``."""
        return UnsupportedOpError(
            f"[{self.model_type}] {self.path}: field {key!r} = {self.data.get(key)!r}: {what}"
        )

    def get(self, key: str, default: Any = None) -> Any:
        """Field ``key``, ``default`` when absent or null."""
        v = self.data.get(key)
        return default if v is None else v

    def get_int(self, key: str, default: Any = _MISSING) -> int:
        """An integer field (required unless ``default`` is given)."""
        v = self.data.get(key)
        if v is None:
            if default is _MISSING:
                raise self.fail(key, "is missing")
            return int(default)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v:
            raise self.fail(key, f"= {v!r} is not an integer")
        return int(v)

    def get_float(self, key: str, default: Any = _MISSING) -> float:
        """A number field (required unless ``default`` is given)."""
        v = self.data.get(key)
        if v is None:
            if default is _MISSING:
                raise self.fail(key, "is missing")
            return float(default)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(key, f"= {v!r} is not a number")
        return float(v)

    def require_false(self, *keys: str) -> None:
        """Fields that must be absent, null, false or 0 (features rlx's
        builders do not implement)."""
        for k in keys:
            if self.data.get(k):
                raise self.unsupported(k, "not implemented by rlx's builder")

    def require_in(self, key: str, allowed: tuple[str, ...], default: str) -> str:
        """A string field restricted to ``allowed``."""
        v = str(self.get(key, default))
        if v not in allowed:
            raise self.unsupported(key, f"rlx implements {', '.join(allowed)}")
        return v

    def layer_types(self, n_layers: int, allowed: tuple[str, ...]) -> list[str]:
        """``layer_types`` (one per layer), or all ``full_attention``."""
        lt = self.data.get("layer_types")
        if lt is None:
            return [FULL] * n_layers
        if not isinstance(lt, list) or len(lt) != n_layers:
            raise self.fail("layer_types", f"must list one type per layer ({n_layers})")
        for i, t in enumerate(lt):
            if t not in allowed:
                raise UnsupportedOpError(
                    f"[{self.model_type}] {self.path}: layer_types[{i}] = {t!r}: rlx implements "
                    f"{', '.join(allowed)} for {self.model_type}"
                )
        return [str(t) for t in lt]

    def rope(self, layer_type: str, default_theta: float) -> tuple[float, RopeScaling]:
        """RoPE base and scaling of a ``layer_type`` layer."""
        rp = self.data.get("rope_parameters")
        if isinstance(rp, dict) and isinstance(rp.get(layer_type), dict):
            p, key = dict(rp[layer_type]), f"rope_parameters.{layer_type}"
        elif isinstance(rp, dict) and rp and not any(isinstance(v, dict) for v in rp.values()):
            p, key = dict(rp), "rope_parameters"
        else:
            if layer_type == SLIDING and self.data.get("rope_local_base_freq") is not None:
                return self.get_float("rope_local_base_freq"), RopeScaling()
            p, key = dict(self.get("rope_scaling", {})), "rope_scaling"
            p.setdefault("rope_theta", self.get("rope_theta", default_theta))
        try:
            base = float(p.get("rope_theta", default_theta))
            kind = str(p.get("rope_type", p.get("type", "default")))
            if kind not in ROPE_TYPES:
                raise UnsupportedOpError(
                    f"[{self.model_type}] {self.path}: {key} rope_type {kind!r} is not "
                    f"implemented (rlx: {', '.join(ROPE_TYPES)})"
                )
            att = p.get("attention_factor")
            if att not in (None, 1, 1.0):
                raise UnsupportedOpError(
                    f"[{self.model_type}] {self.path}: {key} attention_factor {att!r} "
                    "is not implemented"
                )
            if kind == "default":
                return base, RopeScaling()
            factor = float(p["factor"])
            if kind == "linear":
                return base, RopeScaling("linear", factor)
            return base, RopeScaling(
                "llama3",
                factor,
                float(p["low_freq_factor"]),
                float(p["high_freq_factor"]),
                int(p["original_max_position_embeddings"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise WeightFormatError(f"[load] {self.path}: {key} is malformed ({e!r})") from e


def common_config(
    c: HFConfig,
    arch: str,
    rope_kind: str = "neox",
    eps_key: str = "rms_norm_eps",
    default_theta: float = 10000.0,
    tied_default: bool = False,
    layer_types: tuple[str, ...] = (FULL, SLIDING),
) -> Config:
    """The fields every llama-style config shares; per-layer windows and
    RoPE from ``layer_types`` (``sliding_attention`` layers get
    ``sliding_window``)."""
    hidden = c.get_int("hidden_size")
    heads = c.get_int("num_attention_heads")
    n_layers = c.get_int("num_hidden_layers")
    head_dim = c.get_int("head_dim", hidden // heads if heads else 0)
    if heads <= 0 or head_dim <= 0 or hidden <= 0 or n_layers <= 0:
        raise c.fail("hidden_size", "/ num_attention_heads / num_hidden_layers must be positive")
    kv_heads = c.get_int("num_key_value_heads", heads)
    if kv_heads <= 0 or heads % kv_heads:
        raise c.fail("num_key_value_heads", f"= {kv_heads} does not divide {heads} heads")
    prf = c.get_float("partial_rotary_factor", 1.0)
    rope_dims = int(head_dim * prf)
    if rope_dims <= 0 or rope_dims % 2 or rope_dims > head_dim:
        raise c.unsupported("partial_rotary_factor", f"gives {rope_dims} rotary dims")
    types = c.layer_types(n_layers, layer_types)
    windows, bases, scalings = [], [], []
    for t in types:
        if t == SLIDING:
            w = c.get_int("sliding_window")
            if w <= 0:
                raise c.fail("sliding_window", "must be positive")
            windows.append(w)
        else:
            windows.append(0)
        base, sc = c.rope(t if t in (FULL, SLIDING) else FULL, default_theta)
        bases.append(base)
        scalings.append(sc)
    return Config(
        arch=arch,
        n_layers=n_layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        ffn=c.get_int("intermediate_size"),
        eps=c.get_float(eps_key, 1e-6),
        rope_base=bases[0],
        rope_dims=rope_dims,
        ctx=c.get_int("max_position_embeddings", 2048),
        vocab=c.get_int("vocab_size"),
        tied_output=bool(c.get("tie_word_embeddings", tied_default)),
        rope_kind=rope_kind,
        windows=windows,
        rope_bases=bases,
        rope_scalings=scalings,
    )
