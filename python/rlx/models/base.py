"""What every decoder builder shares: the config read from GGUF metadata, the
weights helper (GGUF tensor → graph param + the matmul that reads it) and the
per-architecture spec (:class:`ArchSpec`) the generic decoder consumes.

GGUF stores a ``[n, k]`` weight (``ne = [k, n]``) row-major as ``n`` rows of
packed blocks; :meth:`Weights.linear` makes it a u8 ``[n, row_bytes]`` param
read by ``dequant_matmul`` (``x @ dequant(w)ᵀ``), so the packed bytes reach the
executor as they are in the file (``Executable.bind_param``: zero-copy).
Safetensors ``[n, k]`` F32 / F16 / BF16 weights have exactly that layout (rows
of ``k`` floats), so they take the same path with scheme ``f32`` / ``f16`` /
``bf16``: every float weight is multiplied natively from the mapped file, no
transposed or converted copy (measured on the host, 2048×2048: the f32 scheme
runs as fast as sgemm on a transposed copy). The host's F16 / BF16 GEMVs are
~7× slower per weight than its F32 one (4608×1024, m = 1: 18–19 ms vs 2.5 ms),
so ``half_weights="f32"`` converts F16 / BF16 matrices once at load (2× the
memory of the file, faster decode); the default keeps them zero-copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Union

import numpy as np

from rlx.errors import RlxError, WeightFormatError
from rlx.graph import Graph
from rlx.io.gguf import GGUFFile
from rlx.models.source import GGUFSource, NameMap, TensorSource, to_f32
from rlx.node import Node

if TYPE_CHECKING:
    from rlx.models.moe import MoeSpec

#: GGUF storage types the host executor multiplies packed (``dequant_matmul``).
PACKED_TYPES = frozenset(
    {
        "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
        "Q6_K", "Q8_K", "F16", "BF16",
    }
)  # fmt: skip
#: ``half_weights`` modes of :class:`Weights` / :func:`rlx.load`.
HALF_MODES = ("native", "f32")
#: Bytes per element of the float types (the alignment a bound view needs).
ELEMENT_BYTES = {"F32": 4, "F16": 2, "BF16": 2}
#: Types a norm / bias vector may have.
PLAIN_TYPES = frozenset({"F32", "F16"})


@dataclass(frozen=True, order=True)
class RopeScaling:
    """RoPE frequency scaling (HF ``rope_scaling`` / ``rope_parameters``):
    ``default`` (none), ``linear`` (positions / factor) or ``llama3``
    (wavelength-dependent, Llama 3.1)."""

    kind: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_ctx: int = 8192

    def inv_freq(self, base: float, dims: int) -> np.ndarray:
        """The ``dims/2`` rotation frequencies (float64)."""
        inv = base ** (-np.arange(0, dims, 2, dtype=np.float64) / dims)
        if self.kind == "linear":
            return inv / self.factor
        if self.kind == "llama3":
            low_wl = self.original_ctx / self.low_freq_factor
            high_wl = self.original_ctx / self.high_freq_factor
            wl = 2 * math.pi / inv
            scaled = np.where(wl > low_wl, inv / self.factor, inv)
            smooth = (self.original_ctx / wl - self.low_freq_factor) / (
                self.high_freq_factor - self.low_freq_factor
            )
            mid = (1 - smooth) * scaled / self.factor + smooth * scaled
            medium = (wl >= high_wl) & (wl <= low_wl)
            return np.where(medium, mid, scaled)
        return inv


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
    #: RoPE frequency scaling per layer (empty = none on every layer).
    rope_scalings: list[RopeScaling] = field(default_factory=list)
    #: mixer kind per layer (:data:`rlx.models.mixers.MIXERS`; empty = all
    #: ``"attention"``).
    mixers: list[str] = field(default_factory=list)
    #: short-conv kernel length ``L`` (LFM2 ``conv_L_cache``) and whether the
    #: conv layers carry biases.
    conv_kernel: int = 0
    conv_bias: bool = False
    #: SSM mixers (Mamba / Mamba-2, :mod:`rlx.models.mixers_ssm`): inner
    #: width, state size, heads (Mamba-2; Mamba-1: 0), head dim, B/C groups,
    #: dt rank (Mamba-1), in/out projection biases
    ssm_inner: int = 0
    ssm_state: int = 0
    ssm_heads: int = 0
    ssm_head_dim: int = 0
    ssm_groups: int = 1
    ssm_dt_rank: int = 0
    ssm_bias: bool = False
    #: Mamba-2 output norm: ``gate_first`` (Mamba-2: norm(y·silu(z))·w),
    #: ``norm_first`` (norm(y)·w·silu(z)) or ``none`` (y·silu(z))
    ssm_norm: str = "gate_first"
    #: Falcon-H1 muP: input multiplier of in_proj, multipliers of its z, x, B,
    #: C, dt outputs (empty: none), and ``(attention in, attention out, ssm
    #: out)`` of its parallel mixer
    ssm_in_mult: float = 1.0
    ssm_mults: list[float] = field(default_factory=list)
    parallel_mults: tuple[float, float, float] = (1.0, 1.0, 1.0)
    #: Gated DeltaNet mixers: key / value heads and head dims
    gdn_k_heads: int = 0
    gdn_v_heads: int = 0
    gdn_k_dim: int = 0
    gdn_v_dim: int = 0
    #: value heads in llama.cpp's tiled order (Qwen3.5 GGUF: value head ``t``
    #: reads key head ``t % k_heads``) instead of grouped (``t // rep``)
    gdn_v_tiled: bool = False
    #: mixture-of-experts FFN (:class:`rlx.models.moe.MoeSpec`; None = dense
    #: SwiGLU on every layer)
    moe: Optional[MoeSpec] = None

    def mixer(self, i: int) -> str:
        """The mixer kind of layer ``i``."""
        return self.mixers[i] if self.mixers else "attention"

    def rope_key(self, i: int) -> tuple[float, RopeScaling]:
        """Layer ``i``'s RoPE group: (base, scaling)."""
        sc = self.rope_scalings[i] if self.rope_scalings else RopeScaling()
        return (self.rope_bases[i], sc)

    def rope_groups(self) -> list[tuple[float, RopeScaling]]:
        """Distinct RoPE groups of the attention layers, in input order
        (group ``j`` is fed as ``cos_j`` / ``sin_j``)."""
        keys = {self.rope_key(i) for i in range(self.n_layers) if "attention" in self.mixer(i)}
        return sorted(keys)

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
    """Tensors of a :class:`~rlx.models.source.TensorSource` (GGUF file or HF
    directory) as graph params. Every param created in a graph is recorded
    with the numpy array (a view of the file's memory map where possible) that
    binds it; :meth:`bind` puts them into an executable."""

    def __init__(
        self,
        src: Union[TensorSource, GGUFFile],
        half_weights: str = "native",
        quantize: Optional[str] = None,
    ) -> None:
        if half_weights not in HALF_MODES:
            raise RlxError(f"[load] half_weights={half_weights!r}; expected one of {HALF_MODES}")
        self.src = GGUFSource(src) if isinstance(src, GGUFFile) else src
        #: F16 / BF16 matrices: multiplied as stored ("native", zero-copy) or
        #: converted once to F32 ("f32")
        self.half_weights = half_weights
        #: scheme every F32 / F16 / BF16 linear weight is quantised to at
        #: load (:func:`rlx.quantize`); None keeps them as stored
        self.quantize = quantize
        if quantize is not None:
            from rlx.quantization import _parse

            _parse(quantize)  # an unknown scheme fails at load, naming it
        #: relative error (Frobenius) of each quantised weight vs its floats,
        #: by stored tensor name
        self.quant_errors: dict[str, float] = {}
        self._schemes: dict[str, tuple[Any, int]] = {}
        self.values: dict[str, np.ndarray] = {}

    @property
    def path(self) -> Any:
        """The file or directory the tensors come from."""
        return self.src.path

    def has(self, name: str) -> bool:
        """Whether the source holds tensor ``name`` (builder name)."""
        return self.src.has(name)

    def vector(self, g: Graph, name: str) -> Node:
        """A 1-D F32/F16/BF16 tensor (norm gamma, bias) as an f32 param."""
        if name not in self.values:
            self.values[name] = _aligned(self.src.vector(name), 4)
        return g.param(name, [self.values[name].shape[0]])

    def conv_taps(self, g: Graph, name: str, channels: int, taps: int) -> Node:
        """A depthwise conv weight (``[channels, 1, taps]`` in HF, ``[channels,
        taps]`` in GGUF) as an f32 ``[channels, 1, 1, taps]`` param."""
        m = self.src.meta(name)
        if m.kind not in ("F32", "F16", "BF16") or int(np.prod(m.shape)) != channels * taps:
            raise WeightFormatError(
                f"[weights] {self.path}: tensor {name!r} is {m.kind}{list(m.shape)}; "
                f"expected {channels}·{taps} F32/F16/BF16 depthwise conv taps"
            )
        if name not in self.values:
            arr = to_f32(self.src.array(name), m.kind).reshape(channels, 1, 1, taps)
            self.values[name] = _aligned(np.ascontiguousarray(arr), 4)
        return g.param(name, [channels, 1, 1, taps])

    def linear(self, g: Graph, x: Node, name: str) -> Node:
        """``x @ Wᵀ`` for the weight ``name`` (``[n, k]``) → ``[.., n]``."""
        t = self.src.meta(name)
        if len(t.shape) != 2:
            raise WeightFormatError(
                f"[weights] {self.path}: tensor {name!r} has shape {list(t.shape)}, expected 2-D"
            )
        n, k = t.shape
        if self.quantize is not None and t.kind in ELEMENT_BYTES:
            return self._quantized(g, x, name, None)
        if t.kind in ("F16", "BF16") and self.half_weights == "f32":
            if name not in self.values:
                self.values[name] = np.ascontiguousarray(to_f32(self.src.array(name), t.kind)).view(
                    np.uint8
                )
            w = g.param(name, [n, 4 * k], "u8")
            return g.dequant_matmul(x, w, scheme="f32", n=n, k=k)
        if t.kind in PACKED_TYPES or t.kind == "F32":
            if name not in self.values:
                self.values[name] = _aligned(self.src.rows(name), ELEMENT_BYTES.get(t.kind, 1))
            w = g.param(name, [n, t.row_bytes], "u8")
            return g.dequant_matmul(x, w, scheme=t.kind.lower(), n=n, k=k)
        raise WeightFormatError(
            f"[weights] {self.path}: tensor {name!r} has type {t.kind}, which rlx "
            f"cannot multiply (supported: F32, {', '.join(sorted(PACKED_TYPES))})"
        )

    def linear_rows(self, g: Graph, x: Node, name: str, perm: np.ndarray) -> Node:
        """:meth:`linear` with the weight's rows reordered (``W[perm]``, one
        copy at load): undoes checkpoint layouts that interleave several
        projections per head (Qwen3-Next's ``in_proj_qkvz``, its gated
        ``q_proj``), so the outputs split with contiguous narrows."""
        t = self.src.meta(name)
        if len(t.shape) != 2 or sorted(perm.tolist()) != list(range(t.shape[0])):
            raise WeightFormatError(
                f"[weights] {self.path}: tensor {name!r} has shape {list(t.shape)}; "
                f"expected 2-D with {len(perm)} rows"
            )
        n, k = t.shape
        if self.quantize is not None and t.kind in ELEMENT_BYTES:
            return self._quantized(g, x, name, perm)
        if t.kind in ("F16", "BF16") and self.half_weights == "f32":
            if name not in self.values:
                f = np.ascontiguousarray(to_f32(self.src.array(name), t.kind)[perm])
                self.values[name] = f.view(np.uint8)
            return g.dequant_matmul(x, g.param(name, [n, 4 * k], "u8"), scheme="f32", n=n, k=k)
        if t.kind not in PACKED_TYPES and t.kind != "F32":
            return self.linear(g, x, name)  # raises the unsupported-type error
        if name not in self.values:
            self.values[name] = np.ascontiguousarray(self.src.rows(name)[perm])
        w = g.param(name, [n, t.row_bytes], "u8")
        return g.dequant_matmul(x, w, scheme=t.kind.lower(), n=n, k=k)

    def _quantized(self, g: Graph, x: Node, name: str, perm: Optional[np.ndarray]) -> Node:
        """``x @ Wᵀ`` with the float weight ``name`` (rows reordered by
        ``perm``) quantised under :attr:`quantize` once at load: params
        ``name`` (packed codes) and ``name.q0``, ``name.q1`` … (scales, zero
        points); its error vs the floats goes to :attr:`quant_errors`."""
        from rlx.quantization import quantize

        t = self.src.meta(name)
        n, k = t.shape
        aux_names = [f"{name}.q{i}" for i in range(3)]
        if name not in self.values:
            w = to_f32(self.src.array(name), t.kind).reshape(n, k)
            if perm is not None:
                w = w[perm]
            assert self.quantize is not None
            try:
                q = quantize(w, self.quantize)
            except RlxError as e:
                raise WeightFormatError(f"[weights] {self.path}: tensor {name!r}: {e}") from None
            self.values[name] = np.ascontiguousarray(q.w_q)
            for an, a in zip(aux_names, q.aux):
                self.values[an] = np.ascontiguousarray(a)
            self.quant_errors[self.src.stored_name(name)] = q.rel_error(w)
            self._schemes[name] = (q.scheme, len(q.aux))
        scheme, n_aux = self._schemes[name]
        w_q = self.values[name]
        wp = g.param(name, list(w_q.shape), "u8")
        aux = []
        for an in aux_names[:n_aux]:
            a = self.values[an]
            aux.append(g.param(an, list(a.shape), "u8" if a.dtype == np.uint8 else "f32"))
        return g.dequant_matmul(x, wp, *aux, scheme=scheme, n=n, k=k)

    def embedding_rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Rows ``ids`` of the embedding table ``name``, dequantized to f32."""
        t = self.src.meta(name)
        if t.kind in ("F32", "F16", "BF16"):
            return np.array(to_f32(self.src.array(name)[ids], t.kind), np.float32)
        native = _native_dequant()
        if native is not None and t.type_id >= 0:
            out = np.empty((len(ids), t.shape[-1]), np.float32)
            native(t.type_id, self.src.rows(name), [int(i) for i in ids], t.shape[-1], out)
            return out
        rows = self.src.rows(name)[ids]
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        try:
            qtype = GGMLQuantizationType[t.kind]
        except KeyError:
            raise WeightFormatError(
                f"[weights] {self.path}: embedding {name!r} has type {t.kind}, "
                "which rlx cannot dequantize"
            ) from None
        return np.asarray(dequantize(rows, qtype), np.float32).reshape(len(ids), t.shape[-1])


def _aligned(rows: np.ndarray, align: int) -> np.ndarray:
    """``rows`` itself (a view of the mapped file) unless its address is not
    a multiple of ``align`` (a safetensors tensor after an odd-sized F16
    one): then an aligned copy (``bind_param`` and Metal need aligned
    elements)."""
    if align > 1 and rows.ctypes.data % align:
        return np.array(rows)
    return rows


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
    #: q / k RMSNorm over the whole projection width (OLMoE), not per head
    qk_norm_full: bool = False
    post_norms: bool = False
    act: str = "silu"  # or "gelu_approx"
    embed_scale: float = 1.0
    #: whether each layer has the gated MLP after its mixer (Mamba: none)
    mlp: bool = True
    #: multipliers of the MLP's gate projection and down projection (Falcon-H1)
    mlp_mults: tuple[float, float] = (1.0, 1.0)
    #: multiplier of the logits (Falcon-H1 lm_head_multiplier, 1/Granite logits_scaling)
    logit_scale: float = 1.0
    #: multiplier of the mixer and MLP outputs before each residual add (Granite)
    residual_scale: float = 1.0
    #: the MLP's gate and up projections are one ``[2·ffn, hidden]`` matrix
    #: ``ffn_gate_up.weight`` (gate rows first; Granite's ``input_linear``)
    mlp_gate_up: bool = False
    #: whether attention rotates q / k (Jamba's attention has no positions)
    rope: bool = True
    #: gated attention (Qwen3-Next / 3.5): ``q_proj`` yields per head the
    #: query then a gate; the attention output is multiplied by sigmoid(gate)
    attn_gate: bool = False

    def build_graph(
        self, cfg: Config, w: Weights, s: int, c: int, all_rows: bool, inplace: bool,
        max_tokens: int,
    ) -> Optional[Graph]:  # fmt: skip
        """A family's own whole decoder graph (Gemma 3n's AltUp streams), or
        None for :func:`rlx.models.blocks.build_decoder`'s layer stack."""
        return None

    def token_inputs(self, w: Weights, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Per-token run-time inputs besides ``x`` (name ``x_*`` → rows
        ``[len(ids), d]``), padded by the runtime like ``x``; none by default."""
        return {}


def embed_scale_sqrt(hidden: int) -> float:
    """Gemma's embedding multiplier ``sqrt(hidden)`` (as an f32 value)."""
    return float(np.float32(math.sqrt(hidden)))


@dataclass(frozen=True)
class Family:
    """One architecture: how to read its config from a GGUF file and from an
    HF ``config.json`` (:class:`rlx.models.hf_config.HFConfig`), and its
    tensor names (:class:`rlx.models.source.NameMap`). Registered in
    :data:`rlx.models.registry.ARCHITECTURES` under ``name`` (the GGUF
    ``general.architecture``) and its HF ``model_types``."""

    name: str
    gguf: Callable[[GGUFFile], tuple[Config, ArchSpec]]
    hf: Callable[[Any], tuple[Config, ArchSpec]]
    names: NameMap
    model_types: tuple[str, ...] = ()
