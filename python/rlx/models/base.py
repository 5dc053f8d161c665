"""What every decoder builder shares: the config read from GGUF metadata, the
weights helper (GGUF tensor → graph param + the matmul that reads it) and the
per-architecture spec (:class:`ArchSpec`) the generic decoder consumes.

GGUF stores a ``[n, k]`` weight (``ne = [k, n]``) row-major as ``n`` rows of
packed blocks; :meth:`Weights.linear` makes it a u8 ``[n, row_bytes]`` param
read by ``dequant_matmul`` (``x @ dequant(w)ᵀ``), so the packed bytes reach the
executor as they are in the file (zero-copy once ``Executable.bind_param``
exists). F32 tensors become plain ``[k, n]`` f32 params and a ``matmul``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from rlx.errors import WeightFormatError
from rlx.graph import Graph
from rlx.io.gguf import GGUFFile
from rlx.node import Node

#: GGUF storage types the host executor multiplies packed (``dequant_matmul``).
PACKED_TYPES = frozenset(
    {
        "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
        "Q6_K", "Q8_K", "F16", "BF16",
    }
)  # fmt: skip
#: Types a norm / bias vector may have.
PLAIN_TYPES = frozenset({"F32", "F16"})


@dataclass
class Config:
    """Decoder hyper-parameters read from GGUF metadata (``{arch}.*`` keys)."""

    arch: str
    n_layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    eps: float
    rope_base: float
    rope_dims: int
    ctx: int
    vocab: int
    tied_output: bool
    rope_kind: str = "neox"
    #: sliding window per layer (0 = global attention).
    windows: list[int] = field(default_factory=list)
    #: RoPE base per layer (local layers of Gemma 3 use a different one).
    rope_bases: list[float] = field(default_factory=list)
    score_scale: Optional[float] = None

    @property
    def kv_dim(self) -> int:
        """Width of one K (or V) row: ``kv_heads · head_dim``."""
        return self.kv_heads * self.head_dim

    @property
    def q_dim(self) -> int:
        """Width of the query: ``heads · head_dim``."""
        return self.heads * self.head_dim

    @classmethod
    def from_gguf(cls, f: GGUFFile, rope_kind: str) -> Config:
        """Read the common keys; builders adjust the per-layer lists after."""
        a = f.architecture
        hidden = f.arch_int("embedding_length")
        heads = f.arch_int("attention.head_count")
        head_dim = f.arch_int("attention.key_length", hidden // heads)
        names = {t.name for t in f.tensors}
        if "token_embd.weight" not in names:
            raise WeightFormatError(f"[weights] {f.path}: missing tensor 'token_embd.weight'")
        vocab = f.tensor("token_embd.weight").shape[0]
        n_layers = f.arch_int("block_count")
        base = f.arch_float("rope.freq_base", 10000.0)
        tied = "output.weight" not in names
        return cls(
            arch=a,
            n_layers=n_layers,
            hidden=hidden,
            heads=heads,
            kv_heads=f.arch_int("attention.head_count_kv", heads),
            head_dim=head_dim,
            ffn=f.arch_int("feed_forward_length"),
            eps=f.arch_float("attention.layer_norm_rms_epsilon", 1e-6),
            rope_base=base,
            rope_dims=f.arch_int("rope.dimension_count", head_dim),
            ctx=f.arch_int("context_length", 2048),
            vocab=vocab,
            tied_output=tied,
            rope_kind=rope_kind,
            windows=[0] * n_layers,
            rope_bases=[base] * n_layers,
        )


def rope_table(base: float, dims: int, n_pos: int) -> tuple[np.ndarray, np.ndarray]:
    """cos / sin ``[n_pos, dims/2]`` (f32) for angles ``pos · base^(−2i/dims)``."""
    inv = base ** (-np.arange(0, dims, 2, dtype=np.float64) / dims)
    ang = np.arange(n_pos, dtype=np.float64)[:, None] * inv[None, :]
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


class Weights:
    """GGUF tensors as graph params. Every param created in a graph is recorded
    with the numpy array (a view of the file's memory map where possible) that
    binds it; :meth:`bind` puts them into an executable."""

    def __init__(self, f: GGUFFile) -> None:
        self.f = f
        self.values: dict[str, np.ndarray] = {}
        self._names = {t.name for t in f.tensors}

    def has(self, name: str) -> bool:
        """Whether the file holds tensor ``name``."""
        return name in self._names

    def _info(self, name: str) -> Any:
        if name not in self._names:
            raise WeightFormatError(f"[weights] {self.f.path}: missing tensor {name!r}")
        return self.f.tensor(name)

    def vector(self, g: Graph, name: str) -> Node:
        """A 1-D F32/F16 tensor (norm gamma, bias) as an f32 param."""
        t = self._info(name)
        if t.ggml_type not in PLAIN_TYPES or len(t.shape) != 1:
            raise WeightFormatError(
                f"[weights] {self.f.path}: tensor {name!r} is {t.ggml_type}{list(t.shape)}; "
                "expected a 1-D F32/F16 vector"
            )
        if name not in self.values:
            arr = self.f.tensor_array(name)
            self.values[name] = arr if arr.dtype == np.float32 else arr.astype(np.float32)
        return g.param(name, [t.shape[0]])

    def linear(self, g: Graph, x: Node, name: str) -> Node:
        """``x @ Wᵀ`` for the GGUF weight ``name`` (``[n, k]``) → ``[.., n]``."""
        t = self._info(name)
        if len(t.shape) != 2:
            raise WeightFormatError(
                f"[weights] {self.f.path}: tensor {name!r} has shape {list(t.shape)}, expected 2-D"
            )
        n, k = t.shape
        if t.ggml_type in PACKED_TYPES:
            if name not in self.values:
                self.values[name] = self.f.tensor_rows(name)
            w = g.param(name, [n, t.row_bytes], "u8")
            return g.dequant_matmul(x, w, scheme=t.ggml_type.lower(), n=n, k=k)
        if t.ggml_type == "F32":
            if name not in self.values:
                self.values[name] = np.ascontiguousarray(self.f.tensor_array(name).T)
            return g.matmul(x, g.param(name, [k, n]))
        raise WeightFormatError(
            f"[weights] {self.f.path}: tensor {name!r} has type {t.ggml_type}, which rlx "
            f"cannot multiply (supported: F32, {', '.join(sorted(PACKED_TYPES))})"
        )

    def embedding_rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Rows ``ids`` of the embedding table ``name``, dequantized to f32."""
        t = self._info(name)
        if t.ggml_type == "F32":
            return np.asarray(self.f.tensor_array(name)[ids], np.float32)
        if t.ggml_type == "F16":
            return self.f.tensor_array(name)[ids].astype(np.float32)
        native = _native_dequant()
        if native is not None:
            out = np.empty((len(ids), t.shape[-1]), np.float32)
            native(t.type_id, self.f.tensor_rows(name), [int(i) for i in ids], t.shape[-1], out)
            return out
        rows = self.f.tensor_rows(name)[ids]
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        try:
            qtype = GGMLQuantizationType[t.ggml_type]
        except KeyError:
            raise WeightFormatError(
                f"[weights] {self.f.path}: embedding {name!r} has type {t.ggml_type}, "
                "which rlx cannot dequantize"
            ) from None
        return np.asarray(dequantize(rows, qtype), np.float32).reshape(len(ids), t.shape[-1])


def _native_dequant() -> Optional[Callable[..., Any]]:
    """``rlx._rlx.gguf_dequantize_rows(type_id, data [n, row_bytes], rows, k,
    out [len(rows), k])`` once the native dequantizer exists."""
    from rlx import _rlx

    return getattr(_rlx, "gguf_dequantize_rows", None)


@dataclass
class ArchSpec:
    """How an architecture deviates from the plain llama block.

    ``attn_norm → q/k/v (+bias) → [q/k RMSNorm per head] → RoPE → attention →
    output proj → [post-attn norm] → +residual → ffn_norm → act(gate)·up → down
    → [post-ffn norm] → +residual``.
    """

    qkv_bias: bool = False
    qk_norm: bool = False
    post_norms: bool = False
    act: str = "silu"  # or "gelu_approx"
    embed_scale: float = 1.0


def embed_scale_sqrt(hidden: int) -> float:
    """Gemma's embedding multiplier ``sqrt(hidden)`` (as an f32 value)."""
    return float(np.float32(math.sqrt(hidden)))
