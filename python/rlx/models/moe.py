"""The mixture-of-experts FFN every MoE family shares (:func:`moe_ffn`).

For ``S`` token rows ``x [S, hidden]`` of one layer::

    logits = x @ routerᵀ                          [S, E]   (blk.{i}.ffn_gate_inp.weight)
    p      = softmax(logits) | sigmoid(logits)    [S, E]
    idx    = top_k(p, k)                          [S, k]   i32, descending
    w      = p[idx]  (/ Σ w  when norm_topk)      [S, k]
    rows   = x repeated k times                   [S·k, hidden]
    h      = silu(rows @ gate[idx]) · (rows @ up[idx])      grouped matmuls
    y      = Σ_k w · (h @ down[idx])              [S, hidden]
    (+ sigmoid(x @ shared_gateᵀ) ·) shared SwiGLU(x)        (qwen2_moe)

The three expert matmuls are ``grouped_mat_mul`` (F32 experts, copied once to
``[E, k, n]``) or ``dequant_grouped_mat_mul`` (GGUF-packed, F16 and BF16
experts as their stored rows ``[E, n, row_bytes]``)
indexed by the chosen expert of each row: the host kernels sort the ``S·k``
rows by expert and run one GEMM per expert that was chosen at all, so a
decode step (``S = 1``) reads ``k`` experts' weights and a prefill reads each
chosen expert once.

Tensor names are llama.cpp's: experts stacked ``blk.{i}.ffn_{gate,up,down}_exps.weight``
(``[E, n, k]`` as stored), router ``blk.{i}.ffn_gate_inp.weight`` ``[E, hidden]``,
shared expert ``blk.{i}.ffn_{gate,up,down}_shexp.weight`` and its gate
``blk.{i}.ffn_gate_inp_shexp.weight`` ``[1, hidden]``. An HF checkpoint that
stores one tensor per expert maps the stacked name onto a per-expert name with
``{e}`` in it (``block_sparse_moe.experts.{e}.w1.weight``); the experts are
then stacked (one copy, at load).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from rlx.errors import UnsupportedOpError, WeightFormatError
from rlx.graph import Graph
from rlx.io.gguf import GGUFFile
from rlx.models.base import PACKED_TYPES, Weights
from rlx.models.hf_config import HFConfig
from rlx.models.source import HFSource, TensorMeta
from rlx.node import Node

GATINGS = ("softmax", "sigmoid")


@dataclass(frozen=True)
class MoeSpec:
    """How one family routes: ``n_experts`` experts of FFN width
    ``expert_ffn``, ``top_k`` per token, router ``gating`` (softmax or
    sigmoid over the router logits), ``norm_topk``: the chosen weights are
    divided by their sum (Mixtral always; Qwen / OLMoE when
    ``norm_topk_prob``). ``shared_ffn > 0``: a shared SwiGLU expert of that
    width is added, scaled by ``sigmoid(x @ shared_gateᵀ)`` when
    ``shared_gate``. ``layers``: which layers are MoE (empty = all)."""

    n_experts: int
    top_k: int
    expert_ffn: int
    norm_topk: bool
    gating: str = "softmax"
    shared_ffn: int = 0
    shared_gate: bool = False
    layers: tuple[bool, ...] = ()

    def __post_init__(self) -> None:
        if self.gating not in GATINGS:
            raise UnsupportedOpError(f"[moe] router gating {self.gating!r} (rlx: {GATINGS})")
        if not 0 < self.top_k <= self.n_experts:
            raise UnsupportedOpError(
                f"[moe] top_k {self.top_k} must be in 1..{self.n_experts} (the experts)"
            )
        if self.expert_ffn <= 0 or self.shared_ffn < 0:
            raise UnsupportedOpError(
                f"[moe] expert ffn {self.expert_ffn} / shared ffn {self.shared_ffn}"
            )

    def is_moe(self, i: int) -> bool:
        """Whether layer ``i`` has the MoE FFN (else the dense one)."""
        return not self.layers or (i < len(self.layers) and self.layers[i])


def _stacked(w: Weights, name: str, n_experts: int) -> tuple[str, np.ndarray]:
    """Kind and experts of the stacked tensor ``name``: F32 as f32 ``[E, n, k]``,
    every other type as its raw rows ``u8 [E, n, row_bytes]`` (a view of the
    file when stored stacked; one copy, in the stored dtype, when an HF
    checkpoint keeps one tensor per expert)."""
    src = w.src
    if src.has(name):
        m = src.meta(name)
        if len(m.shape) != 3 or m.shape[0] != n_experts:
            raise WeightFormatError(
                f"[weights] {w.path}: tensor {name!r} has shape {list(m.shape)}, "
                f"expected [{n_experts}, n, k]"
            )
        if m.kind == "F32":
            return m.kind, src.array(name).reshape(m.shape)
        if m.kind not in PACKED_TYPES:
            raise WeightFormatError(
                f"[weights] {w.path}: experts {name!r} have type {m.kind}, which rlx "
                f"cannot multiply (supported: F32, {', '.join(sorted(PACKED_TYPES))})"
            )
        return m.kind, src.rows(name).reshape(m.shape[0], m.shape[1], -1)
    stored = src.stored_name(name)
    if "{e}" not in stored or not isinstance(src, HFSource):
        raise WeightFormatError(f"[weights] {w.path}: missing tensor {name!r} ({stored!r})")
    metas: list[TensorMeta] = []
    for e in range(n_experts):
        ename = stored.replace("{e}", str(e))
        em = src._lookup(ename, name)
        if em is None:
            raise WeightFormatError(f"[weights] {w.path}: missing tensor {ename!r} ({name})")
        if len(em.shape) != 2 or (metas and (em.kind, em.shape) != (metas[0].kind, metas[0].shape)):
            raise WeightFormatError(
                f"[weights] {w.path}: expert tensor {ename!r} is {em.kind}{list(em.shape)}; "
                "every expert must be one 2-D tensor of the same type and shape"
            )
        metas.append(em)
    if metas[0].kind == "F32":
        return "F32", np.stack([src._array(em).reshape(em.shape) for em in metas])
    return metas[0].kind, np.stack([src._rows(em) for em in metas])


def _grouped(
    g: Graph, w: Weights, name: str, kind: str, arr: np.ndarray
) -> Callable[[Node, Node], Node]:
    """``(rows [m, k], idx [m]) → [m, n]`` through the experts ``arr``."""
    e, n = arr.shape[0], arr.shape[1]
    if kind in PACKED_TYPES:
        if name not in w.values:
            w.values[name] = np.ascontiguousarray(arr)
        wq = g.param(name, list(arr.shape), "u8")
        return lambda x, idx: g.dequant_grouped_matmul(
            x, wq, idx, scheme=kind.lower(), num_experts=e, n=n
        )
    if name not in w.values:
        w.values[name] = np.ascontiguousarray(arr.transpose(0, 2, 1), np.float32)  # one copy
    wt = g.param(name, [e, arr.shape[2], n])
    return lambda x, idx: g.grouped_matmul(x, wt, idx)


def _experts(
    g: Graph, w: Weights, p: str, spec: MoeSpec
) -> tuple[Callable[[Node, Node], Node], ...]:
    """(gate, up, down) grouped matmuls of layer prefix ``p``."""
    e = spec.n_experts
    gate = _grouped(g, w, p + "ffn_gate_exps.weight", *_stacked(w, p + "ffn_gate_exps.weight", e))
    up = _grouped(g, w, p + "ffn_up_exps.weight", *_stacked(w, p + "ffn_up_exps.weight", e))
    down = _grouped(g, w, p + "ffn_down_exps.weight", *_stacked(w, p + "ffn_down_exps.weight", e))
    return gate, up, down


def swiglu(g: Graph, w: Weights, x: Node, gate: str, up: str, down: str) -> Node:
    """``down(silu(gate(x)) · up(x))`` through three 2-D weights."""
    return w.linear(g, g.mul(g.silu(w.linear(g, x, gate)), w.linear(g, x, up)), down)


def moe_ffn(g: Graph, w: Weights, x: Node, prefix: str, spec: MoeSpec) -> Node:
    """The MoE FFN of one layer (weights ``{prefix}ffn_*``, e.g. ``prefix =
    "blk.3."``) on ``x [.., hidden]`` (``[1, S, hidden]`` or ``[S, hidden]``)
    → same shape. See the module doc for the computation."""
    dims = list(x.shape)
    hidden = int(dims[-1])
    s = 1
    for d in dims[:-1]:
        s *= int(d)
    k, e = spec.top_k, spec.n_experts
    xs = g.reshape(x, [s, hidden])
    logits = w.linear(g, xs, prefix + "ffn_gate_inp.weight")
    if logits.shape[-1] != e:
        raise WeightFormatError(
            f"[weights] {w.path}: router {prefix}ffn_gate_inp.weight has "
            f"{logits.shape[-1]} rows, expected {e} experts"
        )
    probs = g.softmax(logits, -1) if spec.gating == "softmax" else g.sigmoid(logits)
    idx = g.topk(probs, k, -1)  # [S, k] i32
    top = g.gather_elements(probs, idx, axis=1)  # [S, k]
    if spec.norm_topk:
        top = g.div(top, g.sum(top, 1, keep_dims=True))
    rows = (
        xs
        if k == 1
        else g.reshape(g.expand(g.reshape(xs, [s, 1, hidden]), [s, k, hidden]), [s * k, hidden])
    )
    flat = g.reshape(idx, [s * k])
    gate, up, down = _experts(g, w, prefix, spec)
    h = g.mul(g.silu(gate(rows, flat)), up(rows, flat))
    y = g.mul(g.reshape(down(h, flat), [s, k, hidden]), g.reshape(top, [s, k, 1]))
    out = g.sum(y, 1)  # [S, hidden]
    if spec.shared_ffn:
        sh = swiglu(g, w, xs, prefix + "ffn_gate_shexp.weight", prefix + "ffn_up_shexp.weight",
                    prefix + "ffn_down_shexp.weight")  # fmt: skip
        if spec.shared_gate:
            sh = g.mul(g.sigmoid(w.linear(g, xs, prefix + "ffn_gate_inp_shexp.weight")), sh)
        out = g.add(out, sh)
    return g.reshape(out, dims)


#: HF names (after ``model.layers.{i}.``) of the Qwen-style MoE block
#: (qwen2_moe, qwen3_moe, olmoe: ``mlp.experts.{e}.{gate,up,down}_proj``).
QWEN_MOE_LAYER = {
    "ffn_gate_inp.weight": "mlp.gate.weight",
    "ffn_gate_exps.weight": "mlp.experts.{e}.gate_proj.weight",
    "ffn_up_exps.weight": "mlp.experts.{e}.up_proj.weight",
    "ffn_down_exps.weight": "mlp.experts.{e}.down_proj.weight",
    "ffn_gate_shexp.weight": "mlp.shared_expert.gate_proj.weight",
    "ffn_up_shexp.weight": "mlp.shared_expert.up_proj.weight",
    "ffn_down_shexp.weight": "mlp.shared_expert.down_proj.weight",
    "ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
}


def hf_moe_spec(
    c: HFConfig,
    ffn_key: str,
    norm_topk: Optional[bool] = None,
    shared: bool = False,
    sparse_layers: bool = False,
) -> MoeSpec:
    """The :class:`MoeSpec` of an HF config: experts from ``num_experts`` /
    ``num_local_experts``, width ``ffn_key``, ``norm_topk`` fixed (Mixtral)
    or from ``norm_topk_prob``; ``shared``: ``shared_expert_intermediate_size``
    with its sigmoid gate; ``sparse_layers``: ``mlp_only_layers`` /
    ``decoder_sparse_step`` choose the MoE layers (Qwen)."""
    key = "num_experts" if c.get("num_experts") is not None else "num_local_experts"
    n_layers = c.get_int("num_hidden_layers")
    layers: tuple[bool, ...] = ()
    if sparse_layers:
        only = c.get("mlp_only_layers") or []
        step = c.get_int("decoder_sparse_step", 1)
        if not isinstance(only, list) or step <= 0:
            raise c.fail("mlp_only_layers", "/ decoder_sparse_step are malformed")
        layers = tuple(i not in only and (i + 1) % step == 0 for i in range(n_layers))
    return MoeSpec(
        n_experts=c.get_int(key),
        top_k=c.get_int("num_experts_per_tok"),
        expert_ffn=c.get_int(ffn_key),
        norm_topk=bool(c.get("norm_topk_prob", False)) if norm_topk is None else norm_topk,
        shared_ffn=c.get_int("shared_expert_intermediate_size") if shared else 0,
        shared_gate=shared,
        layers=layers,
    )


def gguf_moe_spec(f: GGUFFile, norm_default: bool, shared_gate: bool = False) -> Optional[MoeSpec]:
    """The :class:`MoeSpec` of a GGUF file (``{arch}.expert_count`` …), None
    when it has no experts. ``norm_default``: whether llama.cpp renormalises
    the top-k weights for this architecture (``expert_weights_norm`` when the
    file says)."""
    n = f.arch_int("expert_count", 0)
    if n <= 0:
        return None
    a = f.architecture
    norm = f.get_bool(f"{a}.expert_weights_norm", norm_default)
    gating = "sigmoid" if f.arch_int("expert_gating_func", 1) == 2 else "softmax"
    shared = f.arch_int("expert_shared_feed_forward_length", 0)
    return MoeSpec(
        n_experts=n,
        top_k=f.arch_int("expert_used_count"),
        expert_ffn=f.arch_int("expert_feed_forward_length", f.arch_int("feed_forward_length", 0)),
        norm_topk=norm,
        gating=gating,
        shared_ffn=shared,
        shared_gate=shared_gate and shared > 0,
    )
