"""Gemma 3n's text decoder (HF ``gemma3n_text`` / ``Gemma3nForCausalLM``,
GGUF ``gemma3n``), as transformers' ``modeling_gemma3n.py`` computes it in
eval mode.

The residual stream is ``n = altup_num_inputs`` streams ``X [S, n, hidden]``
(AltUp). Stream 0 is the scaled token embedding ``x0`` (``·sqrt(hidden)``),
stream ``j ≥ 1`` is ``altup_proj_j(x0)`` rescaled to the RMS of ``x0``.
Per layer ``i``:

* **predict**: ``m = tanh(router(rmsnorm(X[a]) / hidden))`` ``[S, n]``
  (``a = altup_active_idx``), ``C = reshape(predict_coef(m), [S, n, n])``,
  ``P = C @ X + X`` (one batched matmul);
* ``xn = rmsnorm(P[a])``; **Laurel**: ``xn + rmsnorm(laurel_r(laurel_l(xn)))``;
* attention on ``xn``: per-head RMSNorm on q and k (scaled), on v without
  scale, NeoX RoPE, score scale 1, sliding window on ``sliding_attention``
  layers; the last ``num_kv_shared_layers`` layers compute no k / v and
  attend to the cache of the last earlier layer of the same type (**KV
  sharing**: the in-place scatter's result of that layer is read again);
* ``h = (P[a] + postnorm(attn) + laurel) / sqrt(2)``; MLP on
  ``rmsnorm(h)`` with GELU-tanh, the gate first cut by the **gaussian top-k**
  on the layers ``activation_sparsity_pattern`` marks: ``relu(gate − (mean +
  std·Φ⁻¹(p)))`` (population std over the FFN width); ``out = h +
  postnorm(mlp)``;
* **correct**: ``m' = tanh(router(rmsnorm(out) / hidden))``,
  ``X = P + (out − P[a]) · (correct_coef(m') + 1)`` per stream;
* **per-layer input**: ``g = gelu(inp_gate(X[a] · correct_scale)) · pl_i``,
  ``X[1:] += rmsnorm(proj(g))``, where ``pl_i`` is layer ``i``'s slice of
  ``(rmsnorm(per_layer_model_proj(x0) / sqrt(hidden)) + per_layer_token_embd[id]
  · sqrt(P)) / sqrt(2)`` (the table rows come from the runtime as input
  ``x_pl``, like ``x``: the table is ``vocab × layers × P``; ids at or past
  ``vocab_size_per_layer_input`` read row 0 as in transformers — llama.cpp's
  converter pads the table with zero rows up to ``vocab_size`` instead, so a
  GGUF reads zeros for those (vision / audio) ids, as llama.cpp does).

After the last layer streams ``j ≥ 1`` go through ``altup_unembd_proj_j``
(rescaled to the RMS of stream 0), the ``n`` streams are averaged, normed,
multiplied by the (tied) embedding and soft-capped: ``cap·tanh(l / cap)``.

Norm weights are applied as ``x̂·w`` (no ``1 + w``; llama.cpp's converter
writes them unchanged too). ``altup_coef_clip`` clamps the coefficient
matrices only while training (transformers' eval path does not clip), so it
is read but not applied. llama.cpp's own gemma3n graph hard-codes the KV
reuse (``n_layer_kv_from_start = 20``), the sparse layers (10, multiplier
1.6449) and uses an unbiased std; rlx reads the converter's metadata
(``attention.shared_kv_layers``, ``activation_sparsity_scale``) instead and
computes what transformers computes.

Only the in-place KV cache is built (KV sharing reads another layer's
cache); the graph's inputs are ``x``, ``x_pl``, ``cos_j`` / ``sin_j``,
``slots``, ``kv_len`` and ``row``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Callable, Optional

import numpy as np

from rlx.errors import RlxError, UnsupportedOpError, WeightFormatError
from rlx.graph import Graph
from rlx.io.gguf import GGUFFile
from rlx.models.base import ArchSpec, Config, Family, Weights, embed_scale_sqrt
from rlx.models.hf_config import FULL, SLIDING, HFConfig, common_config
from rlx.models.mixers import LayerCtx, _scatter_cache, head_norm
from rlx.models.source import LLAMA_GLOBAL, LLAMA_LAYER, NameMap
from rlx.node import Node

#: transformers' defaults (Gemma3nTextConfig)
DEFAULT_PATTERN = 5
DEFAULT_SPARSE_LAYERS = 10
DEFAULT_SPARSITY = 0.95
#: most AltUp streams the HF name table lists
MAX_ALTUP = 16


@dataclass
class Gemma3nSpec(ArchSpec):
    """:class:`ArchSpec` plus Gemma 3n's hyper-parameters (see the module doc)."""

    #: AltUp streams and the active one
    n_altup: int = 4
    active: int = 0
    #: per-layer input width and rows of its embedding table
    pl_dim: int = 0
    pl_vocab: int = 0
    #: gaussian top-k std multiplier Φ⁻¹(p) per layer (None: dense layer)
    sparsity: tuple[Optional[float], ...] = ()
    #: layer whose KV cache layer ``i`` attends to (``i`` itself unless shared)
    kv_source: tuple[int, ...] = ()
    #: final logit soft cap (0: none)
    softcap: float = 0.0
    #: multiply the active corrected stream by ``altup_correct_scale``
    correct_scale: bool = True
    #: the per-layer FFN widths (checked against the tensors)
    ffns: tuple[int, ...] = field(default_factory=tuple)

    def build_graph(
        self, cfg: Config, w: Weights, s: int, c: int, all_rows: bool, inplace: bool,
        max_tokens: int,
    ) -> Optional[Graph]:  # fmt: skip
        """The whole decoder graph (:func:`build`)."""
        return build(cfg, self, w, s, c, all_rows, inplace, max_tokens)

    def token_inputs(self, w: Weights, ids: np.ndarray) -> dict[str, np.ndarray]:
        """``x_pl`` ``[len(ids), layers·P]``: rows of the per-layer embedding
        table times ``sqrt(P)`` (ids past the table read row 0, as
        transformers' ``get_per_layer_inputs`` does)."""
        ids = np.where((ids >= 0) & (ids < self.pl_vocab), ids, 0)
        rows = w.embedding_rows("per_layer_token_embd.weight", ids)
        return {"x_pl": rows * np.float32(math.sqrt(self.pl_dim))}


# ---------------------------------------------------------------- config
def kv_sources(types: list[str], shared: int, where: str) -> tuple[int, ...]:
    """Layer ``i``'s KV producer: ``i`` for the first ``n − shared`` layers,
    else the last of those with the same layer type (transformers'
    ``kv_sharing_modes``)."""
    n = len(types)
    if not 0 <= shared < n:
        raise WeightFormatError(f"[gemma3n] {where} = {shared} must be in [0, {n})")
    first = n - shared
    out = list(range(n))
    for i in range(first, n):
        src = [j for j in range(first) if types[j] == types[i]]
        if not src:
            raise WeightFormatError(
                f"[gemma3n] {where} = {shared}: layer {i} ({types[i]}) has no earlier "
                "layer of its type to share the KV cache of"
            )
        out[i] = src[-1]
    return tuple(out)


def std_multiplier(p: float, where: str) -> Optional[float]:
    """Φ⁻¹(p) of an activation sparsity ``p`` as f32 (torch's ``Normal.icdf``
    on the f32 value), None for ``p = 0`` (a dense layer)."""
    if not (isinstance(p, (int, float)) and not isinstance(p, bool) and 0.0 <= p < 1.0):
        raise WeightFormatError(f"[gemma3n] {where} = {p!r} must be a number in [0, 1)")
    if p == 0.0:
        return None
    # torch: sqrt(2)·erfinv(2p − 1) in f32 steps; erfinv(x) = Φ⁻¹((1 + x)/2)/sqrt(2)
    f32 = np.float32
    x = float(f32(2) * f32(p) - f32(1))
    erfinv = f32(NormalDist().inv_cdf((1.0 + x) / 2.0) / math.sqrt(2.0))
    return float(f32(erfinv * f32(math.sqrt(2.0))))


def _finish(cfg: Config, spec: Gemma3nSpec) -> tuple[Config, Gemma3nSpec]:
    cfg.score_scale = 1.0
    return cfg, spec


def _spec(**kw: Any) -> Gemma3nSpec:
    return Gemma3nSpec(
        qk_norm=True, post_norms=True, act="gelu_approx", **kw
    )  # fmt: skip


def config(f: GGUFFile) -> tuple[Config, Gemma3nSpec]:
    """Config and spec of a GGUF ``gemma3n`` file (llama.cpp's converter keys)."""
    a = f.architecture

    def fail(key: str, what: str) -> WeightFormatError:
        return WeightFormatError(f"[gemma3n] {f.path}: metadata key {a}.{key} {what}")

    n = f.arch_int("block_count")
    hidden = f.arch_int("embedding_length")
    heads = f.arch_int("attention.head_count")
    head_dim = f.arch_int("attention.key_length", hidden // max(heads, 1))
    ffn_key = f"{a}.feed_forward_length"
    ffns = [int(v) for v in (f.get_array(ffn_key) if f.value_types(ffn_key)[0] == "ARRAY"
                             else [f.get_int(ffn_key)] * n)]  # fmt: skip
    if len(ffns) != n:
        raise fail("feed_forward_length", f"has {len(ffns)} entries for {n} layers")
    pat = f.get(f"{a}.attention.sliding_window_pattern")
    if isinstance(pat, list):
        local = [bool(x) for x in pat]
    else:
        p = int(pat) if pat is not None else DEFAULT_PATTERN
        local = [p > 0 and (i + 1) % p != 0 for i in range(n)]
    if len(local) != n:
        raise fail("attention.sliding_window_pattern", f"has {len(local)} entries for {n} layers")
    scales_key = f"{a}.activation_sparsity_scale"
    raw = f.get_array(scales_key).tolist() if scales_key in f else [-math.inf] * n
    if len(raw) != n:
        raise fail("activation_sparsity_scale", f"has {len(raw)} entries for {n} layers")
    sparsity = tuple(None if v == -math.inf else float(np.float32(v)) for v in raw)
    if any(v is not None and not math.isfinite(v) for v in sparsity):
        raise fail("activation_sparsity_scale", f"= {raw} (entries must be finite or -inf)")
    names = {t.name for t in f.tensors}
    if "per_layer_token_embd.weight" not in names:
        raise WeightFormatError(f"[gemma3n] {f.path}: missing tensor 'per_layer_token_embd.weight'")
    base = f.arch_float("rope.freq_base", 1e6)
    swa_base = f.arch_float("rope.freq_base_swa", 1e4)
    window = f.arch_int("attention.sliding_window", 512)
    cfg = Config(
        arch=a, n_layers=n, hidden=hidden, heads=heads,
        kv_heads=f.arch_int("attention.head_count_kv", heads), head_dim=head_dim,
        ffn=max(ffns), eps=f.arch_float("attention.layer_norm_rms_epsilon", 1e-6),
        rope_base=base, rope_dims=f.arch_int("rope.dimension_count", head_dim),
        ctx=f.arch_int("context_length", 2048),
        vocab=f.tensor("token_embd.weight").shape[0],
        tied_output="output.weight" not in names, rope_kind="neox",
        windows=[window if s else 0 for s in local],
        rope_bases=[swa_base if s else base for s in local],
    )  # fmt: skip
    types = [SLIDING if s else FULL for s in local]
    n_altup = f.arch_int("altup.num_inputs", 4)
    spec = _spec(
        embed_scale=embed_scale_sqrt(hidden),
        n_altup=n_altup,
        active=f.arch_int("altup.active_idx", 0),
        pl_dim=f.arch_int("embedding_length_per_layer_input"),
        pl_vocab=f.tensor("per_layer_token_embd.weight").shape[0],
        sparsity=sparsity,
        kv_source=kv_sources(types, f.arch_int("attention.shared_kv_layers", 0),
                             f"{f.path}: metadata key {a}.attention.shared_kv_layers"),
        softcap=f.arch_float("final_logit_softcapping", 0.0),
        ffns=tuple(ffns),
    )  # fmt: skip
    _check(
        spec,
        fail,
        {
            "n": "altup.num_inputs",
            "a": "altup.active_idx",
            "p": "embedding_length_per_layer_input",
            "cap": "final_logit_softcapping",
        },
    )
    return _finish(cfg, spec)


def _check(spec: Gemma3nSpec, fail: Callable[[str, str], RlxError], keys: dict[str, str]) -> None:
    """Ranges of the AltUp / per-layer / softcap fields (``keys``: their names
    in the file, for ``fail(name, what)``)."""
    if spec.n_altup < 2:
        raise fail(keys["n"], f"= {spec.n_altup}: rlx implements 2 or more AltUp streams")
    if not 0 <= spec.active < spec.n_altup:
        raise fail(keys["a"], f"= {spec.active} must be in [0, {spec.n_altup})")
    if spec.pl_dim < 1:
        raise fail(keys["p"], f"= {spec.pl_dim} must be ≥ 1")
    if not (math.isfinite(spec.softcap) and spec.softcap >= 0):
        raise fail(keys["cap"], f"= {spec.softcap} must be > 0 (or absent)")


def hf_config(c: HFConfig) -> tuple[Config, Gemma3nSpec]:
    """Config and spec of an HF ``gemma3n_text`` directory."""
    c.require_in("hidden_activation", ("gelu_pytorch_tanh",), "gelu_pytorch_tanh")
    c.require_false("attention_bias", "use_bidirectional_attention")
    n = c.get_int("num_hidden_layers")
    d = c.data
    if d.get("layer_types") is None:
        d["layer_types"] = [FULL if (i + 1) % DEFAULT_PATTERN == 0 else SLIDING for i in range(n)]
    rp = d.get("rope_parameters")
    if not (isinstance(rp, dict) and isinstance(rp.get(FULL), dict)
            and isinstance(rp.get(SLIDING), dict)):  # fmt: skip
        full = {"rope_type": "default", **dict(d.get("rope_scaling") or {})}
        full.setdefault("rope_theta", c.get_float("rope_theta", 1e6))
        d["rope_parameters"] = {
            FULL: full,
            SLIDING: {
                "rope_type": "default",
                "rope_theta": c.get_float("rope_local_base_freq", 1e4),
            },
        }
    ffn = d.get("intermediate_size")
    ffns: list[Any] = ffn if isinstance(ffn, list) else [ffn] * n
    if len(ffns) != n or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in ffns):
        raise c.fail("intermediate_size", "must be a positive integer or one per layer")
    pattern = d.get("activation_sparsity_pattern")
    if pattern is None:
        k = DEFAULT_SPARSE_LAYERS if n > DEFAULT_SPARSE_LAYERS else 0
        pattern = [DEFAULT_SPARSITY] * k + [0.0] * (n - k)
    if isinstance(pattern, (int, float)) and not isinstance(pattern, bool):
        pattern = [pattern] * n
    if not isinstance(pattern, list) or len(pattern) != n:
        raise c.fail("activation_sparsity_pattern", f"must list one value per layer ({n})")
    sparsity = tuple(
        std_multiplier(p, f"{c.path}: field 'activation_sparsity_pattern'[{i}]")
        for i, p in enumerate(pattern)
    )
    if not isinstance(d.get("altup_correct_scale", True), bool):
        raise c.fail("altup_correct_scale", "must be true or false")
    c.get_float("altup_coef_clip", 0.0)  # training-only clamp: checked, not applied
    cfg = common_config(_with(c, intermediate_size=max(ffns)), "gemma3n", rope_kind="neox",
                        default_theta=1e6, tied_default=True)  # fmt: skip
    types = c.layer_types(n, (FULL, SLIDING))
    softcap = d.get("final_logit_softcapping")
    spec = _spec(
        embed_scale=embed_scale_sqrt(cfg.hidden),
        n_altup=c.get_int("altup_num_inputs", 4),
        active=c.get_int("altup_active_idx", 0),
        pl_dim=c.get_int("hidden_size_per_layer_input", 256),
        pl_vocab=c.get_int("vocab_size_per_layer_input", 262144),
        sparsity=sparsity,
        kv_source=kv_sources(types, c.get_int("num_kv_shared_layers", 0),
                             f"{c.path}: field 'num_kv_shared_layers'"),
        softcap=0.0 if softcap is None else c.get_float("final_logit_softcapping"),
        correct_scale=bool(d.get("altup_correct_scale", True)),
        ffns=tuple(int(v) for v in ffns),
    )  # fmt: skip
    _check(
        spec,
        c.fail,
        {
            "n": "altup_num_inputs",
            "a": "altup_active_idx",
            "p": "hidden_size_per_layer_input",
            "cap": "final_logit_softcapping",
        },
    )
    if spec.pl_vocab < 1 or c.get_int("laurel_rank", 64) < 1:
        raise c.fail("vocab_size_per_layer_input", "and laurel_rank must be ≥ 1")
    return _finish(cfg, spec)


def _with(c: HFConfig, **fields: Any) -> HFConfig:
    """A copy of ``c`` whose data has ``fields`` replaced."""
    out = HFConfig.__new__(HFConfig)
    out.root, out.path, out.data = c.root, c.path, {**c.data, **fields}
    return out


# ------------------------------------------------------------------ graph
def _const(g: Graph, v: float) -> Node:
    return g.constant(np.float32(v))


def _rms(g: Graph, x: Node, eps: float = 0.0, floor: Optional[float] = None) -> Node:
    """``sqrt(mean(x², -1))`` (keep dims), optionally ``max(mean, floor)`` first."""
    m = g.mean(g.mul(x, x), -1, keep_dims=True)
    return g.sqrt(m if floor is None else g.maximum(m, _const(g, floor)))


def _stacked(ctx: LayerCtx, x: Node, name: str, j: int) -> Node:
    """``x @ W_jᵀ`` for matrix ``j`` of ``name``: GGUF stacks them in one
    ``[n−1, h, h]`` tensor (rows of matrix ``j`` are a view), HF stores
    ``name.{j}.weight`` (mapped by the name table)."""
    g, w = ctx.g, ctx.w
    stacked = f"{name}.weight"
    if not w.has(stacked):
        return w.linear(g, x, f"{name}.{j}.weight")
    m = w.src.meta(stacked)
    if len(m.shape) != 3 or m.kind not in (
        "F32",
        "F16",
        "BF16",
        "Q8_0",
        "Q4_0",
        "Q4_K",
        "Q6_K",
        "Q5_0",
        "Q5_1",
        "Q4_1",
        "Q5_K",
        "Q2_K",
        "Q3_K",
    ):
        raise WeightFormatError(
            f"[weights] {w.path}: tensor {stacked!r} is {m.kind}{list(m.shape)}; expected "
            "a 3-D stack of AltUp matrices"
        )
    rows, k = m.shape[1], m.shape[2]
    pname = f"{name}.{j}.weight"
    if pname not in w.values:
        part = w.src.rows(stacked)[j]
        w.values[pname] = part if part.ctypes.data % 4 == 0 else np.array(part)
    wp = g.param(pname, [rows, m.row_bytes], "u8")
    return g.dequant_matmul(x, wp, scheme=m.kind.lower(), n=rows, k=k)


class _Ctx(LayerCtx):
    """:class:`LayerCtx` that reuses the router's params: predict and
    correct both read them, and a graph's params have unique names."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._vecs: dict[str, Node] = {}
        self._lins: dict[str, tuple[str, dict[str, Any], list[Node]]] = {}

    def vector(self, name: str) -> Node:
        """``w.vector`` once per graph."""
        if name not in self._vecs:
            self._vecs[name] = self.w.vector(self.g, name)
        return self._vecs[name]

    def linear(self, x: Node, name: str) -> Node:
        """``w.linear``, the weight's param nodes made once per graph."""
        hit = self._lins.get(name)
        if hit is None:
            y = self.w.linear(self.g, x, name)
            self._lins[name] = (y.op, y.attrs, y.inputs[1:])
            return y
        op, attrs, params = hit
        return self.g.apply({"op": op, **attrs}, x, *params)


def _modalities(ctx: _Ctx, i: int, x: Node) -> Node:
    """``tanh(router(rmsnorm(x) / hidden))`` → ``[.., n]``."""
    g, cfg = ctx.g, ctx.cfg
    p = f"blk.{i}."
    xn = g.rms_norm(x, ctx.vector(p + "altup_router_norm.weight"), eps=cfg.eps)
    xn = g.mul(xn, _const(g, float(np.float32(cfg.hidden) ** np.float32(-1.0))))
    return g.tanh(ctx.linear(xn, p + "altup_router.weight"))


def _stream(g: Graph, x: Node, j: int) -> Node:
    """Stream ``j`` of ``X [S, n, h]`` as ``[1, S, h]``."""
    s, _, h = x.shape
    return g.reshape(g.narrow(x, 1, j, 1), [1, s, h])


def _attention(ctx: LayerCtx, i: int, x: Node, kv: dict[int, tuple[Node, Node]]) -> Node:
    """Layer ``i``'s attention on ``x [1, S, h]`` (see the module doc)."""
    g, w, cfg, s, c = ctx.g, ctx.w, ctx.cfg, ctx.s, ctx.c
    spec: Gemma3nSpec = ctx.spec  # type: ignore[assignment]
    p = f"blk.{i}."
    cos, sin = ctx.rope(i)

    def rope(t: Node) -> Node:
        return g.rope(t, cos, sin, head_dim=cfg.head_dim, n_rot=cfg.rope_dims, kind=cfg.rope_kind)

    q = rope(head_norm(g, w, w.linear(g, x, p + "attn_q.weight"), p + "attn_q_norm.weight",
                       cfg.heads, cfg))  # fmt: skip
    src = spec.kv_source[i]
    if src == i:
        slots = ctx.input("slots", [s, 1], "i32")
        k = rope(head_norm(g, w, w.linear(g, x, p + "attn_k.weight"), p + "attn_k_norm.weight",
                           cfg.kv_heads, cfg))  # fmt: skip
        v = g.reshape(w.linear(g, x, p + "attn_v.weight"), [1, s, cfg.kv_heads, cfg.head_dim])
        ones = g.constant(np.ones(cfg.head_dim, np.float32))
        v = g.reshape(g.rms_norm(v, ones, eps=cfg.eps), [1, s, cfg.kv_dim])
        kv[i] = (_scatter_cache(g, k, f"k{i}", slots, c, cfg, "f32"),
                 _scatter_cache(g, v, f"v{i}", slots, c, cfg, "f32"))  # fmt: skip
    elif src not in kv:
        raise UnsupportedOpError(f"[gemma3n] layer {i} reuses the KV of layer {src}, not built yet")
    k_all, v_all = kv[src]
    win = cfg.windows[i]
    a = g.attention(
        q, k_all, v_all, heads=cfg.heads, kv_heads=cfg.kv_heads, head_dim=cfg.head_dim,
        mask="causal", window=max(win - 1, 0) if win else 0, score_scale=1.0,
        kv_len=ctx.input("kv_len", [1], "i32"),
    )  # fmt: skip
    return w.linear(g, a, p + "attn_output.weight")


def _mlp(ctx: LayerCtx, i: int, x: Node) -> Node:
    """GELU-tanh gated MLP, the gate cut by the gaussian top-k on sparse layers."""
    g, w = ctx.g, ctx.w
    spec: Gemma3nSpec = ctx.spec  # type: ignore[assignment]
    p = f"blk.{i}."
    gate = w.linear(g, x, p + "ffn_gate.weight")
    if gate.shape[-1] != spec.ffns[i]:
        raise WeightFormatError(
            f"[weights] {w.path}: {p}ffn_gate.weight has {gate.shape[-1]} rows; the config "
            f"says intermediate size {spec.ffns[i]} for layer {i}"
        )
    mult = spec.sparsity[i]
    if mult is not None:
        mean = g.mean(gate, -1, keep_dims=True)
        std = _rms(g, g.sub(gate, mean))
        cutoff = g.add(mean, g.mul(std, _const(g, mult)))
        gate = g.relu(g.sub(gate, cutoff))
    up = w.linear(g, x, p + "ffn_up.weight")
    return w.linear(g, g.mul(g.gelu_approx(gate), up), p + "ffn_down.weight")


def _layer(ctx: _Ctx, i: int, xs: Node, pl: Node, kv: dict[int, tuple[Node, Node]]) -> Node:
    """One decoder layer on the AltUp streams ``xs [S, n, h]``."""
    g, w, cfg, s = ctx.g, ctx.w, ctx.cfg, ctx.s
    spec: Gemma3nSpec = ctx.spec  # type: ignore[assignment]
    n, a, h = spec.n_altup, spec.active, cfg.hidden
    p = f"blk.{i}."

    def norm(t: Node, name: str) -> Node:
        return g.rms_norm(t, w.vector(g, p + name), eps=cfg.eps)

    # predict
    m = g.reshape(_modalities(ctx, i, _stream(g, xs, a)), [s, n])
    coefs = g.reshape(w.linear(g, m, p + "altup_predict_coef.weight"), [s, n, n])
    pred = g.add(g.matmul(coefs, xs), xs)
    active = _stream(g, pred, a)
    xn = norm(active, "attn_norm.weight")
    lau = w.linear(g, w.linear(g, xn, p + "laurel_l.weight"), p + "laurel_r.weight")
    laurel = g.add(xn, norm(lau, "laurel_post_norm.weight"))
    attn = norm(_attention(ctx, i, xn, kv), "post_attention_norm.weight")
    hs = g.div(g.add(g.add(active, attn), laurel), _const(g, math.sqrt(2.0)))
    ffw = norm(_mlp(ctx, i, norm(hs, "ffn_norm.weight")), "post_ffw_norm.weight")
    out = g.add(hs, ffw)
    # correct
    m2 = g.reshape(_modalities(ctx, i, out), [s, n])
    cc = g.add(w.linear(g, m2, p + "altup_correct_coef.weight"), _const(g, 1.0))
    innov = g.reshape(g.sub(out, active), [s, 1, h])
    corrected = g.add(g.mul(innov, g.reshape(cc, [s, n, 1])), pred)
    # per-layer input
    first = _stream(g, corrected, a)
    if spec.correct_scale:
        first = g.mul(first, w.vector(g, p + "altup_correct_scale.weight"))
    gated = g.mul(g.gelu_approx(w.linear(g, first, p + "inp_gate.weight")), pl)
    first = norm(w.linear(g, gated, p + "proj.weight"), "post_norm.weight")
    mask = g.constant((np.arange(n) >= 1).astype(np.float32).reshape(1, n, 1))
    return g.add(corrected, g.mul(mask, g.reshape(first, [s, 1, h])))


def _per_layer_inputs(ctx: LayerCtx, x0: Node) -> Node:
    """``[1, S, layers, P]``: projection of ``x0`` (normed) plus the table rows, / sqrt(2)."""
    g, w, cfg, s = ctx.g, ctx.w, ctx.cfg, ctx.s
    spec: Gemma3nSpec = ctx.spec  # type: ignore[assignment]
    n_l, pd = cfg.n_layers, spec.pl_dim
    proj = w.linear(g, x0, "per_layer_model_proj.weight")
    if proj.shape[-1] != n_l * pd:
        raise WeightFormatError(
            f"[weights] {w.path}: per_layer_model_proj.weight has {proj.shape[-1]} rows; "
            f"expected layers × per-layer width = {n_l * pd}"
        )
    proj = g.mul(proj, _const(g, float(np.float32(cfg.hidden) ** np.float32(-0.5))))
    proj = g.rms_norm(g.reshape(proj, [1, s, n_l, pd]),
                      w.vector(g, "per_layer_proj_norm.weight"), eps=cfg.eps)  # fmt: skip
    table = g.reshape(ctx.input("x_pl", [1, s, n_l * pd]), [1, s, n_l, pd])
    return g.mul(g.add(proj, table), _const(g, 1.0 / math.sqrt(2.0)))


def _rescaled(g: Graph, y: Node, target: Node) -> Node:
    """``y`` scaled to RMS ``target`` (RMS of ``y`` floored at 1e-5 first)."""
    return g.div(g.mul(y, target), _rms(g, y, floor=1e-5))


def build(
    cfg: Config, spec: ArchSpec, w: Weights, s: int, c: int, all_rows: bool = False,
    inplace: bool = False, max_tokens: int = 256,
) -> Graph:  # fmt: skip
    """Gemma 3n's decoder graph for ``s`` new tokens after ``c`` cache slots
    (the :func:`rlx.models.blocks.build_decoder` contract, in-place cache only)."""
    assert isinstance(spec, Gemma3nSpec)
    if not inplace:
        raise UnsupportedOpError(
            "[gemma3n] KV sharing reads another layer's cache: only the in-place cache is "
            "built (load with inplace=True)"
        )
    if s > max_tokens:
        raise UnsupportedOpError(f"[gemma3n] {s} new tokens in one graph (max {max_tokens})")
    g = Graph(f"gemma3n_s{s}_c{c}_inplace")
    ctx = _Ctx(g, w, cfg, spec, s, c, inplace, max_tokens)
    n, h = spec.n_altup, cfg.hidden
    x0 = g.input("x", [1, s, h])
    pl = _per_layer_inputs(ctx, x0)
    target = _rms(g, x0)
    streams = [g.reshape(x0, [s, 1, h])]
    for j in range(n - 1):
        y = _rescaled(g, _stacked(ctx, x0, "altup_proj", j), target)
        streams.append(g.reshape(y, [s, 1, h]))
    xs = g.concat(streams, axis=1)
    kv: dict[int, tuple[Node, Node]] = {}
    for i in range(cfg.n_layers):
        pl_i = g.reshape(g.narrow(pl, 2, i, 1), [1, s, spec.pl_dim])
        xs = _layer(ctx, i, xs, pl_i, kv)
    x0 = _stream(g, xs, 0)
    target = _rms(g, x0)
    total = x0
    for j in range(1, n):
        y = _rescaled(g, _stacked(ctx, _stream(g, xs, j), "altup_unembd_proj", j - 1), target)
        total = g.add(total, y)
    rows = g.reshape(g.div(total, _const(g, float(n))), [s, h])
    if not all_rows:
        rows = g.gather(rows, g.input("row", [1], "i32"))
    x = g.rms_norm(rows, w.vector(g, "output_norm.weight"), eps=cfg.eps)
    out = w.linear(g, x, "token_embd.weight" if cfg.tied_output else "output.weight")
    if spec.softcap > 0:
        cap = _const(g, spec.softcap)
        out = g.mul(g.tanh(g.div(out, cap)), cap)
    logits = g.apply({"op": "reshape", "dims": [rows.shape[0], cfg.vocab]}, out, name="logits")
    g.outputs(logits)
    return g


# ------------------------------------------------------------------ names
NAMES = NameMap(
    hf_layer={
        **LLAMA_LAYER,
        "post_attention_norm.weight": "post_attention_layernorm.weight",
        "ffn_norm.weight": "pre_feedforward_layernorm.weight",
        "post_ffw_norm.weight": "post_feedforward_layernorm.weight",
        "inp_gate.weight": "per_layer_input_gate.weight",
        "proj.weight": "per_layer_projection.weight",
        "post_norm.weight": "post_per_layer_input_norm.weight",
        "altup_correct_coef.weight": "altup.correction_coefs.weight",
        "altup_correct_scale.weight": "altup.correct_output_scale",
        "altup_predict_coef.weight": "altup.prediction_coefs.weight",
        "altup_router.weight": "altup.modality_router.weight",
        "altup_router_norm.weight": "altup.router_norm.weight",
        "laurel_l.weight": "laurel.linear_left.weight",
        "laurel_r.weight": "laurel.linear_right.weight",
        "laurel_post_norm.weight": "laurel.post_laurel_norm.weight",
    },
    hf_global={
        **LLAMA_GLOBAL,
        "per_layer_token_embd.weight": "model.embed_tokens_per_layer.weight",
        "per_layer_model_proj.weight": "model.per_layer_model_projection.weight",
        "per_layer_proj_norm.weight": "model.per_layer_projection_norm.weight",
        **{
            f"altup_proj.{j}.weight": f"model.altup_projections.{j}.weight"
            for j in range(MAX_ALTUP)
        },
        **{
            f"altup_unembd_proj.{j}.weight": f"model.altup_unembed_projections.{j}.weight"
            for j in range(MAX_ALTUP)
        },
    },  # fmt: skip
)

FAMILY = Family("gemma3n", config, hf_config, NAMES, model_types=("gemma3n_text",))


def hf_config_multimodal(c: HFConfig) -> tuple[Config, Gemma3nSpec]:
    """An HF ``gemma3n`` directory (``Gemma3nForConditionalGeneration``):
    its ``text_config`` (the vision / audio towers are not loaded)."""
    tc = c.data.get("text_config")
    if not isinstance(tc, dict):
        raise c.fail("text_config", "must be an object (the text decoder's config)")
    c.data = dict(tc)
    return hf_config(c)


#: the multimodal checkpoint stores the decoder under ``model.language_model.``
NAMES_MULTIMODAL = NameMap(
    hf_layer=NAMES.hf_layer,
    hf_global={
        k: v.replace("model.", "model.language_model.", 1) for k, v in NAMES.hf_global.items()
    },  # fmt: skip
    hf_prefix="model.language_model.",
)
FAMILY_MULTIMODAL = Family(
    "gemma3n", config, hf_config_multimodal, NAMES_MULTIMODAL, model_types=("gemma3n",)
)
