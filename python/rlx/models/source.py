"""Where a model's tensors come from: one interface (:class:`TensorSource`)
over a GGUF file (:class:`GGUFSource`) and a Hugging Face directory
(:class:`HFSource`: ``config.json`` + one or several ``*.safetensors``).

Builders always ask for tensors by their GGUF names (``token_embd.weight``,
``blk.3.attn_q.weight``); a source maps each onto the name it stores
(``model.layers.3.self_attn.q_proj.weight`` in an HF checkpoint) through the
family's name table (:class:`NameMap`). Tensors are views of the memory-mapped
files: 2-D weights reach :class:`rlx.models.base.Weights` as ``[n, k]``
row-major arrays or as their raw rows of bytes, never copied here.

Value conversions llama.cpp's converter bakes into a GGUF but an HF checkpoint
does not have are applied to the small 1-D vectors only
(:attr:`NameMap.norm_plus_one`: Gemma's RMSNorm weights, stored as ``w`` and
applied as ``x·(1 + w)`` by HF). llama's Q/K row permutation is not undone on
the weights: HF llama uses NeoX RoPE instead (the family's config says so).
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

from rlx.errors import WeightFormatError
from rlx.io.gguf import GGUFFile
from rlx.io.safetensors import SafetensorsFile

#: safetensors dtypes a weight may have (named as the GGUF types they equal).
HF_FLOAT_TYPES = {"F32": "F32", "F16": "F16", "BF16": "BF16"}


@dataclass(frozen=True)
class TensorMeta:
    """One tensor as the builders see it: ``kind`` is the GGUF type name
    (``F32``, ``F16``, ``BF16``, ``Q4_K`` …), ``shape`` row-major, ``type_id``
    the GGUF type id (-1 for safetensors)."""

    name: str
    stored: str
    kind: str
    shape: tuple[int, ...]
    row_bytes: int
    type_id: int = -1


@dataclass(frozen=True)
class NameMap:
    """How a family's builder names map onto stored names.

    ``hf_layer`` maps the part after ``blk.{i}.`` to the part after
    ``{hf_prefix}layers.{i}.`` (``"stored#i/n"``: part ``i`` of ``n`` of the
    rows of each matrix of a stored tensor); ``hf_global`` maps whole names (embeddings,
    final norm, output). ``gguf`` renames builder names on the GGUF side
    (most families: nothing). ``norm_plus_one``: 1-D vectors whose builder
    name contains ``norm`` get ``+1`` when read from an HF checkpoint."""

    hf_layer: dict[str, str]
    hf_global: dict[str, str] = field(default_factory=dict)
    hf_prefix: str = "model."
    gguf: dict[str, str] = field(default_factory=dict)
    norm_plus_one: bool = False
    #: builder-name suffixes ``norm_plus_one`` leaves alone (Qwen3-Next's
    #: gated GDN norm ``ssm_norm.weight`` is applied as ``x·w``)
    plain_norms: tuple[str, ...] = ()


#: Tensor names of the llama-style decoder (llama, qwen2, qwen3, gemma3 base).
LLAMA_GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
LLAMA_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias",
    "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q_norm.weight": "self_attn.q_norm.weight",
    "attn_k_norm.weight": "self_attn.k_norm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
LLAMA_NAMES = NameMap(hf_layer=LLAMA_LAYER, hf_global=LLAMA_GLOBAL)

_BLK = re.compile(r"blk\.(\d+)\.(.+)")


class TensorSource(ABC):
    """Tensors by builder name. Subclasses implement :meth:`_lookup`,
    :meth:`_array` and :meth:`_rows` on stored names."""

    path: Path
    #: ``general.architecture`` / ``model_type`` as stored.
    arch: str
    names: NameMap

    @abstractmethod
    def stored_name(self, name: str) -> str:
        """The stored name of builder name ``name``."""

    @abstractmethod
    def _lookup(self, stored: str, name: str) -> Optional[TensorMeta]:
        """Implemented per storage format (see the class doc)."""

    @abstractmethod
    def _array(self, meta: TensorMeta) -> np.ndarray:
        """Implemented per storage format (see the class doc)."""

    @abstractmethod
    def _rows(self, meta: TensorMeta) -> np.ndarray:
        """Implemented per storage format (see the class doc)."""

    @abstractmethod
    def check_unchanged(self) -> None:
        """Raise :class:`rlx.WeightFormatError` when a mapped file changed
        since it was opened (:mod:`rlx.io.mapped`)."""

    def has(self, name: str) -> bool:
        """Whether the source holds builder tensor ``name``."""
        return self._lookup(self.stored_name(name), name) is not None

    def meta(self, name: str) -> TensorMeta:
        """The tensor's :class:`TensorMeta` (WeightFormatError naming both
        names when it is missing)."""
        stored = self.stored_name(name)
        m = self._lookup(stored, name)
        if m is None:
            also = "" if stored == name else f" (stored as {stored!r})"
            raise WeightFormatError(f"[weights] {self.path}: missing tensor {name!r}{also}")
        return m

    def array(self, name: str) -> np.ndarray:
        """Zero-copy numpy view (F32 / F16 as floats, BF16 as uint16 bits)."""
        return self._array(self.meta(name))

    def rows(self, name: str) -> np.ndarray:
        """The stored bytes as ``u8 [rows, row_bytes]`` (zero-copy)."""
        return self._rows(self.meta(name))

    def vector(self, name: str) -> np.ndarray:
        """A 1-D F32 / F16 / BF16 tensor as f32 (a view for F32 unless the
        source converts its values)."""
        m = self.meta(name)
        if m.kind not in ("F32", "F16", "BF16") or len(m.shape) != 1:
            raise WeightFormatError(
                f"[weights] {self.path}: tensor {name!r} is {m.kind}{list(m.shape)}; "
                "expected a 1-D F32/F16/BF16 vector"
            )
        return to_f32(self._array(m), m.kind)


def _split_part(stored: str) -> tuple[str, Optional[tuple[int, int]]]:
    """``"name#i/n"`` → (``name``, (i, n)): an HF name map may point a builder
    name at part ``i`` of ``n`` of the rows of each matrix of a stored tensor
    (Granite's ``input_linear`` stacks the gate rows then the up rows)."""
    base, sep, frac = stored.partition("#")
    if not sep:
        return stored, None
    i, _, n = frac.partition("/")
    return base, (int(i), int(n))


def to_f32(a: np.ndarray, kind: str) -> np.ndarray:
    """F32 (as is), F16 or BF16 bits (``uint16``) → f32."""
    if kind == "BF16":
        return (np.asarray(a, np.uint16).astype(np.uint32) << 16).view(np.float32)
    return a if a.dtype == np.float32 else a.astype(np.float32)


class GGUFSource(TensorSource):
    """A GGUF file's tensors (names as stored, except the family's
    :attr:`NameMap.gguf` renames)."""

    def __init__(self, f: GGUFFile, names: Optional[NameMap] = None) -> None:
        self.f = f
        self.path = f.path
        self.arch = f.architecture
        self.names = names or LLAMA_NAMES
        self._names = {t.name for t in f.tensors}

    def stored_name(self, name: str) -> str:
        """``NameMap.gguf`` renames whole names (``output_norm.weight``) or the
        part after ``blk.{i}.`` (``ffn_norm.weight``); a renamed tensor the
        file lacks falls back to the builder name when the file has that."""
        gg = self.names.gguf
        stored = gg.get(name)
        m = _BLK.fullmatch(name) if stored is None else None
        if m is not None and m.group(2) in gg:
            stored = f"blk.{m.group(1)}.{gg[m.group(2)]}"
        if stored is None or (stored not in self._names and name in self._names):
            return name
        return stored

    def vector(self, name: str) -> np.ndarray:
        """As :meth:`TensorSource.vector`, but a float tensor of any rank is
        read flat: llama.cpp's converter stores Mamba-2's ``ssm_a`` / ``ssm_d``
        as ``[heads, 1]`` and its grouped ``ssm_norm`` as ``[groups,
        inner/groups]`` (the families check the element counts)."""
        m = self.meta(name)
        if m.kind not in ("F32", "F16", "BF16") or not m.shape:
            return super().vector(name)
        return to_f32(self._array(m), m.kind).reshape(-1)

    def check_unchanged(self) -> None:
        self.f.check_unchanged()

    def _lookup(self, stored: str, name: str) -> Optional[TensorMeta]:
        if stored not in self._names:
            return None
        t = self.f.tensor(stored)
        return TensorMeta(name, stored, t.ggml_type, tuple(t.shape), t.row_bytes, t.type_id)

    def _array(self, meta: TensorMeta) -> np.ndarray:
        return self.f.tensor_array(meta.stored)

    def _rows(self, meta: TensorMeta) -> np.ndarray:
        return self.f.tensor_rows(meta.stored)


class HFSource(TensorSource):
    """The safetensors of a Hugging Face directory (one file, or shards
    listed by ``model.safetensors.index.json``), each memory-mapped once."""

    def __init__(self, root: Path, config: dict[str, Any], names: NameMap) -> None:
        self.path = root
        self.arch = str(config.get("model_type", ""))
        self.config = config
        self.names = names
        self._files: dict[str, SafetensorsFile] = {}
        #: stored name → file name
        self._where: dict[str, str] = {}
        index = root / "model.safetensors.index.json"
        if index.exists():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise WeightFormatError(f"[load] {index}: not a safetensors index ({e})") from e
            for stored, fname in weight_map.items():
                self._where[str(stored)] = str(fname)
        else:
            shards = sorted(p.name for p in root.glob("*.safetensors"))
            if not shards:
                raise WeightFormatError(
                    f"[load] {root}: no *.safetensors file (and no model.safetensors.index.json)"
                )
            for fname in shards:
                for stored in self._file(fname).keys():
                    self._where[stored] = fname

    def _file(self, fname: str) -> SafetensorsFile:
        f = self._files.get(fname)
        if f is None:
            p = self.path / fname
            if not p.exists():
                raise WeightFormatError(f"[load] {self.path}: shard {fname} is missing")
            f = self._files[fname] = SafetensorsFile(p)
        return f

    def check_unchanged(self) -> None:
        for f in self._files.values():
            f.check_unchanged()

    def stored_name(self, name: str) -> str:
        nm = self.names
        m = _BLK.fullmatch(name)
        if m:
            rest = nm.hf_layer.get(m.group(2))
            return name if rest is None else f"{nm.hf_prefix}layers.{m.group(1)}.{rest}"
        return nm.hf_global.get(name, name)

    def stored_names(self) -> list[str]:
        """Every stored tensor name."""
        return list(self._where)

    def _lookup(self, stored: str, name: str) -> Optional[TensorMeta]:
        base, part = _split_part(stored)
        if part is not None:  # "name#i/n": part i of n along the rows of each matrix
            m = self._lookup(base, name)
            if m is None:
                return None
            i, n = part
            if len(m.shape) < 2 or m.shape[-2] % n or not 0 <= i < n:
                raise WeightFormatError(
                    f"[weights] {self.path}: tensor {base!r} {list(m.shape)} has no part {i}/{n}"
                )
            shape = (*m.shape[:-2], m.shape[-2] // n, m.shape[-1])
            return TensorMeta(name, stored, m.kind, shape, m.row_bytes)
        fname = self._where.get(stored)
        if fname is None:
            return None
        t = self._file(fname).info(stored)
        kind = HF_FLOAT_TYPES.get(t.dtype)
        if kind is None:
            raise WeightFormatError(
                f"[weights] {self.path}/{fname}: tensor {stored!r} has dtype {t.dtype}; "
                "rlx reads F32, F16 and BF16 checkpoints"
            )
        shape = tuple(t.shape)
        row = (t.end - t.begin) // max(1, int(np.prod(shape[:-1], dtype=np.int64)))
        return TensorMeta(name, stored, kind, shape, row)

    def _array(self, meta: TensorMeta) -> np.ndarray:
        base, part = _split_part(meta.stored)
        a = self._file(self._where[base]).tensor(base)
        if part is None:
            return a
        k = meta.shape[-2]
        return a[..., part[0] * k : (part[0] + 1) * k, :]

    def _rows(self, meta: TensorMeta) -> np.ndarray:
        base, part = _split_part(meta.stored)
        r = self._file(self._where[base]).raw(base)
        if part is None:
            return r
        k, rb = meta.shape[-2], meta.row_bytes
        blocks = r.reshape(-1, part[1] * k, rb)[:, part[0] * k : (part[0] + 1) * k, :]
        return np.ascontiguousarray(blocks).reshape(-1, rb)

    def vector(self, name: str) -> np.ndarray:
        v = super().vector(name)
        if (
            self.names.norm_plus_one
            and "norm" in name
            and not name.endswith(self.names.plain_norms or ("\0",))
        ):
            v = v + np.float32(1.0)
        return v
