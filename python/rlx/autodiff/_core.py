"""The reverse-mode driver: walk the graph from the loss back to the
requested nodes, call each op's vector-Jacobian rule and sum the
contributions that reach one node.

A rule is ``rule(ctx, node, dy) -> list[Node | None]``: one gradient per
operand of ``node`` (``None`` where no gradient flows, e.g. integer
indices). Rules emit ordinary IR ops (or the IR's ``*_backward`` ops) into
the same graph, after the forward; they only build what :meth:`Ctx.needs`
asks for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Optional

from rlx._types import Dim
from rlx.errors import RlxError
from rlx.node import Node

if TYPE_CHECKING:
    from rlx.graph import Graph

FLOAT_DTYPES = frozenset({"f16", "bf16", "f32", "f64"})

#: ops that quantise their float operand 0 (weights) into integer codes: a
#: zero gradient to it would silently freeze what the caller asked to train
#: (their scale operand may be differentiated through the other uses)
QUANTISING_OPS = frozenset({"scaled_quantize"})


class GradError(RlxError):
    """A gradient cannot be built (bad ``wrt`` / ``loss`` arguments)."""


class NotDifferentiableError(GradError):
    """The loss depends on ``wrt`` through an op without a gradient rule, or
    through an operand the op cannot differentiate (the message names it)."""


Rule = Callable[["Ctx", Node, Node], Sequence[Optional[Node]]]

#: op name → VJP rule (filled by the per-family modules)
RULES: dict[str, Rule] = {}


def rule(*ops: str) -> Callable[[Rule], Rule]:
    """Register ``fn`` as the VJP rule of ``ops``."""

    def deco(fn: Rule) -> Rule:
        for op in ops:
            RULES[op] = fn
        return fn

    return deco


def is_float(n: Node) -> bool:
    """True for a floating-point node (only those carry gradients)."""
    return n.dtype in FLOAT_DTYPES


class Ctx:
    """What a rule may ask while it runs: the graph, and which operands of
    the current node need a gradient."""

    def __init__(
        self, graph: Graph, active: set[int], dense: Optional[dict[int, Node]] = None
    ) -> None:
        self.g = graph
        self._active = active
        self._node: Optional[Node] = None
        #: quantised weight node id → its dequantised f32 ``[n, k]`` copy
        #: (``grad(dense_weights=)``): ``dequant_mat_mul``'s input gradient
        #: multiplies by it instead of dequantising through an identity
        self.dense: dict[int, Node] = dense or {}

    def needs(self, i: int) -> bool:
        """True when operand ``i`` of the node being differentiated needs a gradient."""
        assert self._node is not None
        ins = self._node.inputs
        return i < len(ins) and ins[i].id in self._active

    def fail(self, node: Node, why: str) -> NotDifferentiableError:
        """The error for an operand ``node`` cannot differentiate (``raise ctx.fail(..)``)."""
        return NotDifferentiableError(f"[grad] {node.op} (node %{node.id} '{node.name}'): {why}")

    # ------------------------------------------------------------ helpers
    def full(self, dims: Sequence[Dim], value: float, dtype: str) -> Node:
        """``value`` over ``dims`` (symbolic dims allowed: a broadcast scalar)."""
        if all(isinstance(d, int) for d in dims):
            return self.g.constant(value, dtype=dtype, shape=list(dims))
        return self.g.expand(self.g.constant(value, dtype=dtype, shape=[]), list(dims))

    def zeros(self, dims: Sequence[Dim], dtype: str) -> Node:
        """Zeros of ``dims``."""
        return self.full(dims, 0.0, dtype)

    def sum_to(self, grad: Node, dims: Sequence[Dim]) -> Node:
        """Sum ``grad`` (a broadcast result) back to ``dims`` (numpy broadcasting rules)."""
        dims = list(dims)
        gdims = list(grad.shape)
        if gdims == dims:
            return grad
        lead = len(gdims) - len(dims)
        if lead > 0:
            grad = self.g.sum(grad, list(range(lead)))
            gdims = gdims[lead:]
        axes = [i for i, (a, b) in enumerate(zip(gdims, dims)) if b == 1 and a != 1]
        if axes:
            grad = self.g.sum(grad, axes, keep_dims=True)
        if list(grad.shape) != dims:
            grad = self.g.reshape(grad, dims)
        return grad

    def like(self, grad: Node, x: Node) -> Node:
        """``grad`` summed to ``x``'s dims and cast to its dtype."""
        out = self.sum_to(grad, x.shape)
        return out if out.dtype == x.dtype else self.g.cast(out, x.dtype)

    def select(self, cond: Node, a: float, b: float, like: Node) -> Node:
        """``cond ? a : b`` with scalars of ``like``'s dtype."""
        return self.g.where(cond, self.scalar(a, like), self.scalar(b, like))

    def scalar(self, v: float, like: Node) -> Node:
        """A scalar constant of ``like``'s dtype."""
        return self.g.constant(float(v), dtype=like.dtype, shape=[])


def _ancestors(graph: Graph, root: int) -> set[int]:
    seen = {root}
    stack = [root]
    while stack:
        i = stack.pop()
        for j in graph._g.node(i)[1]:
            if j not in seen:
                seen.add(j)
                stack.append(j)
    return seen


def grad(
    graph: Graph,
    loss: Node,
    wrt: Sequence[Node],
    *,
    seed: Optional[Node] = None,
    dense_weights: Optional[Mapping[Node, Node]] = None,
) -> list[Node]:
    """Reverse-mode gradients of ``loss`` with respect to each node of ``wrt``.

    The backward ops are appended to ``graph`` (they read the forward values
    they need, which the planner keeps alive like any other value). ``seed``
    is the gradient flowing into ``loss`` (default: ones, i.e. the gradient
    of ``sum(loss)``). A node used several times gets the sum of its
    contributions. A ``wrt`` node the loss does not depend on gets zeros.

    ``dense_weights`` maps the packed weight operand of a frozen
    ``dequant_mat_mul`` to an f32 ``[n, k]`` node holding its dequantised
    values (typically a param bound once to a copy made at load): the input
    gradient is then one ``dy @ W`` matmul. Without it, GGUF block formats
    use ``dequant_mat_mul_t`` (``dy @ dequant(W)`` straight from the packed
    blocks: same multiply-adds, no extra memory); the formats with separate
    scale tensors dequantise ``W`` every step by running the quantised
    matmul on a ``k × k`` identity (``k²·n`` multiply-adds).

    Raises :class:`NotDifferentiableError` (an :class:`rlx.RlxError`) naming
    the op when the loss depends on ``wrt`` through an op without a rule,
    and :class:`GradError` for an integer ``wrt`` or a node of another graph.
    """
    from rlx import autodiff as _ad  # noqa: F401  # registers the rules

    if not isinstance(loss, Node) or loss.graph is not graph:
        raise GradError("[grad] loss must be a node of the graph")
    if not is_float(loss):
        raise GradError(f"[grad] loss %{loss.id} '{loss.name}' is {loss.dtype}, not a float")
    wrt = list(wrt)
    for w in wrt:
        if not isinstance(w, Node) or w.graph is not graph:
            raise GradError("[grad] every wrt entry must be a node of the graph")
        if not is_float(w):
            raise GradError(
                f"[grad] wrt %{w.id} '{w.name}' ({w.op}) is {w.dtype}: "
                "integer and bool values have no gradient"
            )
    n_fwd = loss.id + 1
    # active: float nodes that depend on some wrt and that the loss depends on
    anc = _ancestors(graph, loss.id)
    wrt_ids = {w.id for w in wrt}
    reach: set[int] = set()
    for i in range(min(wrt_ids, default=n_fwd), n_fwd):
        if i not in anc:
            continue
        _, ins, _ = graph._g.node(i)
        if i in wrt_ids or any(j in reach for j in ins):
            if graph._g.shape(i)[1] in FLOAT_DTYPES:
                reach.add(i)
            elif graph.node(i).op in QUANTISING_OPS and ins[0] in reach:
                node = graph.node(i)
                raise NotDifferentiableError(
                    f"[grad] {node.op} (node %{i} '{node.name}') is not differentiable: "
                    "its quantised codes carry no gradient to the values quantised"
                )
    dense: dict[int, Node] = {}
    for wq, wd in (dense_weights or {}).items():
        if wd.graph is not graph or wd.dtype != "f32" or wd.ndim != 2:
            raise GradError(
                f"[grad] dense_weights['{wq.name}'] must be an f32 [n, k] node of the graph"
            )
        dense[wq.id] = wd
    ctx = Ctx(graph, reach, dense)
    grads: dict[int, Node] = {}
    if seed is not None and list(seed.shape) != list(loss.shape):
        raise GradError(
            f"[grad] seed shape {list(seed.shape)} differs from loss {list(loss.shape)}"
        )
    if loss.id in reach:
        if seed is None:
            seed = ctx.full(loss.shape, 1.0, loss.dtype)
        elif seed.dtype != loss.dtype:
            seed = graph.cast(seed, loss.dtype)
        grads[loss.id] = seed
    for i in range(loss.id, -1, -1):
        dy = grads.get(i)
        if dy is None or i not in reach:
            continue
        node = graph.node(i)
        if node.op in ("input", "param", "state", "constant"):
            continue
        if i in wrt_ids and not any(j in reach for j in graph._g.node(i)[1]):
            continue
        fn = RULES.get(node.op)
        if fn is None:
            raise NotDifferentiableError(
                f"[grad] {node.op} (node %{i} '{node.name}') is not differentiable: "
                "no gradient rule for this op"
            )
        ctx._node = node
        outs = fn(ctx, node, dy)
        for x, gx in zip(node.inputs, outs):
            if gx is None or x.id not in reach:
                continue
            prev = grads.get(x.id)
            grads[x.id] = gx if prev is None else graph.add(prev, gx)
    return [grads[w.id] if w.id in grads else ctx.zeros(w.shape, w.dtype) for w in wrt]
