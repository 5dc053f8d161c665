"""Reading a Hugging Face ``config.json`` into :class:`~rlx.models.base.Config`.

Both layouts transformers writes are understood: v4 (``rope_theta``,
``rope_scaling``, Gemma 3's ``rope_local_base_freq``) and v5
(``rope_parameters``, per layer type for Gemma 3). A field rlx cannot honour
raises :class:`~rlx.errors.UnsupportedOpError` (or
:class:`~rlx.errors.WeightFormatError` when a required one is missing or
malformed) naming the field, never a silently different model.

Hyper-parameters are validated in one place for both formats:
:func:`check_gguf_metadata` bounds the raw ``{arch}.*`` metadata of a GGUF
file before a family's reader sees it (integers in ``[0, 2^31)``, layer and
head counts ≥ 1, floats finite, RoPE bases > 0), :class:`HFConfig`'s
accessors do the same for ``config.json`` fields, and
:func:`validate_config` checks the :class:`~rlx.models.base.Config` a reader
built (layer count ≥ 1, head counts dividing widths, RoPE bases > 0 and
finite, one entry per layer in every per-layer list) and that the vocabulary
agrees between the embedding, the output head and the tokenizer.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlx.errors import UnsupportedOpError, WeightFormatError
from rlx.models.base import Config, RopeScaling

if TYPE_CHECKING:
    from rlx.io.gguf import GGUFFile
    from rlx.models.source import TensorSource

_MISSING: Any = object()
#: Largest integer hyper-parameter accepted (widths, counts, lengths): no
#: real model comes near it, and a corrupt value (2^63) would otherwise
#: become a MemoryError or an endless allocation in a builder.
MAX_HPARAM = (1 << 31) - 1
#: Most layers a model may declare.
MAX_LAYERS = 1 << 16
#: Most experts a mixture-of-experts layer may declare.
MAX_EXPERTS = 1 << 16
#: Tighter ranges of the fields builders turn into per-layer / per-expert
#: lists (``config.json`` keys, then GGUF ``{arch}.`` suffixes).
HF_BOUNDS = {
    "num_hidden_layers": (1, MAX_LAYERS),
    "num_experts": (0, MAX_EXPERTS),
    "num_local_experts": (0, MAX_EXPERTS),
    "num_experts_per_tok": (0, MAX_EXPERTS),
}
#: ``config.json`` number fields a builder divides by: must be > 0.
HF_POSITIVE_FLOATS = ("logits_scaling", "query_pre_attn_scalar")
GGUF_BOUNDS = {
    "block_count": (1, MAX_LAYERS),
    "expert_count": (0, MAX_EXPERTS),
    "expert_used_count": (0, MAX_EXPERTS),
}

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
            data = json.loads(self.path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            raise WeightFormatError(f"[load] {root}: no config.json in the directory") from None
        except RecursionError:
            raise WeightFormatError(f"[load] {self.path}: JSON nested too deeply") from None
        except (OSError, ValueError) as e:
            raise WeightFormatError(f"[load] {self.path}: not valid JSON ({e})") from None
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
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float))
            or (isinstance(v, float) and (not math.isfinite(v) or int(v) != v))
        ):
            raise self.fail(key, f"= {v!r} is not an integer")
        lo, hi = HF_BOUNDS.get(key, (-MAX_HPARAM, MAX_HPARAM))
        if not lo <= v <= hi:
            raise self.fail(key, f"= {v!r} is out of range [{lo}, {hi}]")
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
        try:
            f = float(v)
        except OverflowError:
            f = math.inf
        if not math.isfinite(f):
            raise self.fail(key, f"= {v!r} is not a finite number")
        if key in HF_POSITIVE_FLOATS and f <= 0:
            raise self.fail(key, f"= {v!r} must be > 0")
        return f

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
            if not (math.isfinite(base) and base > 0):
                raise WeightFormatError(
                    f"[load] {self.path}: {key} rope_theta = {base!r} must be a finite number > 0"
                )
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
        except (KeyError, TypeError, ValueError, OverflowError) as e:
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


# ------------------------------------------------------------------ validation
#: ``{arch}.*`` GGUF keys that must be ≥ 1 when present (scalars; per-layer
#: arrays may hold 0 for layers without attention). ``attention.head_count``
#: joins them when the file has attention tensors (a pure SSM such as Mamba-2
#: stores 0).
_GGUF_POSITIVE = ("block_count", "embedding_length")
_ATTN_TENSORS = (".attn_q.", ".attn_qkv.")


def _gguf_fail(f: GGUFFile, key: str, what: str) -> WeightFormatError:
    return WeightFormatError(f"[load] {f.path}: metadata key {key!r} {what}")


def check_gguf_metadata(f: GGUFFile) -> None:
    """Bound every ``{arch}.*`` hyper-parameter of a GGUF file before a
    family's reader uses it: integers (and integer arrays) in ``[0,
    MAX_HPARAM]``, ``block_count`` in ``[1, MAX_LAYERS]``, the width and head
    count ≥ 1 (when the file has attention tensors), the head count dividing
    the width when ``key_length`` is absent, floats finite and RoPE bases > 0. Raises
    :class:`~rlx.errors.WeightFormatError` naming the file and the key."""
    arch = f.architecture
    prefix = f"{arch}."
    ints = ("UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64", "INT64")
    for key in f.keys():
        if not key.startswith(prefix):
            continue
        types = f.value_types(key)
        if types[-1] in ints:
            vals = [f.get_int(key)] if types[0] != "ARRAY" else f.get_array(key).tolist()
            bad = [v for v in vals if not 0 <= int(v) <= MAX_HPARAM]
            if bad:
                raise _gguf_fail(f, key, f"= {bad[0]} is out of range [0, {MAX_HPARAM}]")
        elif types[-1] in ("FLOAT32", "FLOAT64"):
            vals = [f.get_float(key)] if types[0] != "ARRAY" else f.get_array(key).tolist()
            # gemma3n's Φ⁻¹(sparsity) per layer is -inf on its dense layers
            neg_inf_ok = key.endswith(".activation_sparsity_scale")
            bad = [v for v in vals if not (math.isfinite(v) or (neg_inf_ok and v == -math.inf))]
            if bad:
                raise _gguf_fail(f, key, f"= {bad[0]} is not finite")
            if "freq_base" in key and any(v <= 0 for v in vals):
                raise _gguf_fail(f, key, f"= {vals[0]} must be > 0")
    has_attn = any(any(a in t.name for a in _ATTN_TENSORS) for t in f.tensors)
    for suffix in _GGUF_POSITIVE + (("attention.head_count",) if has_attn else ()):
        key = prefix + suffix
        if key in f and f.value_types(key)[0] != "ARRAY" and f.get_int(key) < 1:
            raise _gguf_fail(f, key, f"= {f.get_int(key)} must be ≥ 1")
    for suffix, (lo, hi) in GGUF_BOUNDS.items():
        key = prefix + suffix
        if key in f and f.value_types(key)[0] != "ARRAY" and not lo <= f.get_int(key) <= hi:
            raise _gguf_fail(f, key, f"= {f.get_int(key)} is out of range [{lo}, {hi}]")
    width, heads = prefix + "embedding_length", prefix + "attention.head_count"
    if (
        width in f
        and heads in f
        and prefix + "attention.key_length" not in f
        and f.value_types(heads)[0] != "ARRAY"
        and f.value_types(width)[0] != "ARRAY"
        and f.get_int(heads) > 0
        and f.get_int(width) % f.get_int(heads)
    ):
        raise _gguf_fail(
            f, heads, f"= {f.get_int(heads)} does not divide embedding_length {f.get_int(width)}"
        )


def validate_config(cfg: Config, path: Any) -> None:
    """Check a :class:`~rlx.models.base.Config` a family's reader built:
    layer count ≥ 1, widths ≥ 1, KV heads dividing the heads, RoPE dims even
    and ≤ the head dim, RoPE bases > 0 and finite, ε finite and ≥ 0, one entry
    per layer in the per-layer lists. Raises
    :class:`~rlx.errors.WeightFormatError` naming ``path`` and the field."""

    def bad(field: str, what: str) -> WeightFormatError:
        return WeightFormatError(f"[load] {path}: {cfg.arch} config {field} {what}")

    if not 1 <= cfg.n_layers <= MAX_LAYERS:
        raise bad("n_layers", f"= {cfg.n_layers} is not in [1, {MAX_LAYERS}]")
    for name in ("hidden", "heads", "kv_heads", "head_dim", "vocab"):
        v = getattr(cfg, name)
        if not 1 <= v <= MAX_HPARAM:
            raise bad(name, f"= {v} is not in [1, {MAX_HPARAM}]")
    if not 0 <= cfg.ffn <= MAX_HPARAM:
        raise bad("ffn", f"= {cfg.ffn} is out of range")
    if cfg.heads % cfg.kv_heads:
        raise bad("kv_heads", f"= {cfg.kv_heads} does not divide heads = {cfg.heads}")
    attention = any("attention" in cfg.mixer(i) for i in range(cfg.n_layers))
    if attention and (cfg.rope_dims <= 0 or cfg.rope_dims % 2 or cfg.rope_dims > cfg.head_dim):
        raise bad("rope_dims", f"= {cfg.rope_dims} must be even, > 0 and ≤ head_dim {cfg.head_dim}")
    if not (math.isfinite(cfg.eps) and cfg.eps >= 0):
        raise bad("eps", f"= {cfg.eps} must be finite and ≥ 0")
    sc = cfg.score_scale
    if sc is not None and not (isinstance(sc, (int, float)) and math.isfinite(sc)):
        raise bad("score_scale", f"= {sc!r} must be a finite real number")
    for field in ("windows", "rope_bases", "rope_scalings", "mixers"):
        lst = getattr(cfg, field)
        if lst and len(lst) != cfg.n_layers:
            raise bad(field, f"has {len(lst)} entries for {cfg.n_layers} layers")
    for b in [cfg.rope_base, *cfg.rope_bases]:
        if not (math.isfinite(b) and b > 0):
            raise bad("rope_base", f"= {b} must be finite and > 0")
    for sc in cfg.rope_scalings:
        if not (math.isfinite(sc.factor) and sc.factor > 0):
            raise bad("rope_scaling.factor", f"= {sc.factor} must be finite and > 0")
        lo, hi = sc.low_freq_factor, sc.high_freq_factor
        if sc.kind == "llama3" and not (
            0 < sc.original_ctx <= MAX_HPARAM
            and math.isfinite(lo)
            and math.isfinite(hi)
            and 0 < lo < hi
        ):
            raise bad(
                "rope_scaling",
                f"llama3 needs 0 < low_freq_factor < high_freq_factor (finite) and "
                f"original_max_position_embeddings > 0; got {lo}, {hi}, {sc.original_ctx}",
            )


def validate_vocab(cfg: Config, src: TensorSource, tokenizer: Any) -> None:
    """The vocabulary must agree: the token embedding and the output head
    (when untied) have the same number of rows, that is ``cfg.vocab`` (the
    logits' width), and the tokenizer has no id beyond it."""
    emb = src.meta("token_embd.weight").shape
    if len(emb) != 2:
        raise WeightFormatError(
            f"[load] {src.path}: token_embd.weight has shape {list(emb)}, expected 2-D"
        )
    rows = {"token embedding": emb[0]}
    if not cfg.tied_output and src.has("output.weight"):
        rows["output head"] = src.meta("output.weight").shape[0]
    for what, n in rows.items():
        if n != cfg.vocab:
            raise WeightFormatError(
                f"[load] {src.path}: the {what} has {n} rows but the vocabulary is {cfg.vocab}"
            )
    n_tok = getattr(tokenizer, "vocab_size", None)
    if isinstance(n_tok, int) and n_tok > cfg.vocab:
        raise WeightFormatError(
            f"[load] {src.path}: the tokenizer has {n_tok} tokens but the embedding only "
            f"{cfg.vocab} rows"
        )
