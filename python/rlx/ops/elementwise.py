"""Elementwise ops: activations, binary arithmetic, comparisons, where,
cast, fma, fused regions and SwiGLU."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

from rlx._types import DTypeLike, dtype_name
from rlx.errors import GraphError
from rlx.node import Node, Operand
from rlx.ops._base import GraphBase

ACTIVATIONS = (
    "gelu", "gelu_approx", "silu", "relu", "sigmoid", "tanh", "exp", "log", "sqrt",
    "rsqrt", "neg", "abs", "sin", "cos", "tan", "atan", "round",
)  # fmt: skip
BINARY_OPS = ("add", "sub", "mul", "div", "max", "min", "pow")
COMPARE_OPS = ("eq", "ne", "lt", "le", "gt", "ge")

#: A region step: its serde dict, or a tuple shorthand
#: ``("exp", "x0")``, ``("add", "s0", "x1")``, ``("cast", "f16", "s1")``
#: where ``"xN"`` is region input N and ``"sN"`` the result of step N.
RegionStepLike = Union[dict[str, Any], tuple[Any, ...]]


def _region_operand(a: Any) -> dict[str, int]:
    if isinstance(a, dict):
        return a
    if isinstance(a, str) and len(a) > 1 and a[0] in "xs" and a[1:].isdigit():
        return {"input" if a[0] == "x" else "step": int(a[1:])}
    raise GraphError(
        f"[elementwise_region] bad step operand {a!r}: use 'x<i>' (input) or 's<i>' (step)"
    )


def region_step(step: RegionStepLike) -> dict[str, Any]:
    """Normalise a region step to its serde dict (see :data:`RegionStepLike`)."""
    if isinstance(step, dict):
        return step
    if not step:
        raise GraphError("[elementwise_region] empty step")
    head, *rest = step
    if head == "cast" and len(rest) == 2:
        return {"step": "cast", "to": dtype_name(rest[0]), "a": _region_operand(rest[1])}
    if head in ACTIVATIONS and len(rest) == 1:
        return {"step": "unary", "act": head, "a": _region_operand(rest[0])}
    if head in BINARY_OPS and len(rest) == 2:
        return {
            "step": "binary",
            "kind": head,
            "a": _region_operand(rest[0]),
            "b": _region_operand(rest[1]),
        }
    raise GraphError(f"[elementwise_region] cannot parse step {step!r}")


class ElementwiseOps(GraphBase):
    """Activations, binary and comparison ops, where / cast / fma / regions."""

    # ------------------------------------------------------------ activation
    def activation(self, x: Node, kind: str, *, name: str = "") -> Node:
        """``kind(x)`` for any of the 17 activations (``"gelu"``, ``"silu"``...)."""
        return self._add({"op": "activation", "kind": kind}, [x], name)

    def gelu(self, x: Node, *, name: str = "") -> Node:
        """Exact (erf) GELU."""
        return self.activation(x, "gelu", name=name)

    def gelu_approx(self, x: Node, *, name: str = "") -> Node:
        """Tanh-approximated GELU."""
        return self.activation(x, "gelu_approx", name=name)

    def silu(self, x: Node, *, name: str = "") -> Node:
        """``x * sigmoid(x)``."""
        return self.activation(x, "silu", name=name)

    def relu(self, x: Node, *, name: str = "") -> Node:
        """``max(x, 0)``."""
        return self.activation(x, "relu", name=name)

    def sigmoid(self, x: Node, *, name: str = "") -> Node:
        """``1 / (1 + exp(-x))``."""
        return self.activation(x, "sigmoid", name=name)

    def tanh(self, x: Node, *, name: str = "") -> Node:
        """Hyperbolic tangent."""
        return self.activation(x, "tanh", name=name)

    def exp(self, x: Node, *, name: str = "") -> Node:
        """``e**x``."""
        return self.activation(x, "exp", name=name)

    def log(self, x: Node, *, name: str = "") -> Node:
        """Natural logarithm."""
        return self.activation(x, "log", name=name)

    def sqrt(self, x: Node, *, name: str = "") -> Node:
        """Square root."""
        return self.activation(x, "sqrt", name=name)

    def rsqrt(self, x: Node, *, name: str = "") -> Node:
        """``1 / sqrt(x)``."""
        return self.activation(x, "rsqrt", name=name)

    def neg(self, x: Node, *, name: str = "") -> Node:
        """``-x``."""
        return self.activation(x, "neg", name=name)

    def abs(self, x: Node, *, name: str = "") -> Node:
        """``|x|``."""
        return self.activation(x, "abs", name=name)

    def sin(self, x: Node, *, name: str = "") -> Node:
        """Sine."""
        return self.activation(x, "sin", name=name)

    def cos(self, x: Node, *, name: str = "") -> Node:
        """Cosine."""
        return self.activation(x, "cos", name=name)

    def tan(self, x: Node, *, name: str = "") -> Node:
        """Tangent."""
        return self.activation(x, "tan", name=name)

    def atan(self, x: Node, *, name: str = "") -> Node:
        """Arc tangent."""
        return self.activation(x, "atan", name=name)

    def round(self, x: Node, *, name: str = "") -> Node:
        """Round half to even (numpy ``rint``)."""
        return self.activation(x, "round", name=name)

    # ---------------------------------------------------------------- binary
    def binary(self, a: Operand, b: Operand, kind: str, *, name: str = "") -> Node:
        """``a <kind> b`` with numpy broadcasting; scalars become constants."""
        na, nb = self._operands("binary", a, b)
        return self._add({"op": "binary", "kind": kind}, [na, nb], name)

    def add(self, a: Operand, b: Operand, *, name: str = "") -> Node:
        """``a + b``."""
        return self.binary(a, b, "add", name=name)

    def sub(self, a: Operand, b: Operand, *, name: str = "") -> Node:
        """``a - b``."""
        return self.binary(a, b, "sub", name=name)

    def mul(self, a: Operand, b: Operand, *, name: str = "") -> Node:
        """``a * b``."""
        return self.binary(a, b, "mul", name=name)

    def div(self, a: Operand, b: Operand, *, name: str = "") -> Node:
        """``a / b`` (truncating for integers)."""
        return self.binary(a, b, "div", name=name)

    def maximum(self, a: Operand, b: Operand, *, name: str = "") -> Node:
        """Elementwise maximum (NaN-propagating)."""
        return self.binary(a, b, "max", name=name)

    def minimum(self, a: Operand, b: Operand, *, name: str = "") -> Node:
        """Elementwise minimum (NaN-propagating)."""
        return self.binary(a, b, "min", name=name)

    def pow(self, a: Operand, b: Operand, *, name: str = "") -> Node:
        """``a ** b``."""
        return self.binary(a, b, "pow", name=name)

    # ------------------------------------------------------------ comparison
    def compare(self, a: Operand, b: Operand, kind: str, *, name: str = "") -> Node:
        """``a <kind> b`` → bool, broadcasting."""
        na, nb = self._operands("compare", a, b)
        return self._add({"op": "compare", "kind": kind}, [na, nb], name)

    def eq(self, a: Operand, b: Operand, *, name: str = "") -> Node:
        """``a == b`` → bool."""
        return self.compare(a, b, "eq", name=name)

    def ne(self, a: Operand, b: Operand, *, name: str = "") -> Node:
        """``a != b`` → bool."""
        return self.compare(a, b, "ne", name=name)

    def lt(self, a: Operand, b: Operand, *, name: str = "") -> Node:
        """``a < b`` → bool."""
        return self.compare(a, b, "lt", name=name)

    def le(self, a: Operand, b: Operand, *, name: str = "") -> Node:
        """``a <= b`` → bool."""
        return self.compare(a, b, "le", name=name)

    def gt(self, a: Operand, b: Operand, *, name: str = "") -> Node:
        """``a > b`` → bool."""
        return self.compare(a, b, "gt", name=name)

    def ge(self, a: Operand, b: Operand, *, name: str = "") -> Node:
        """``a >= b`` → bool."""
        return self.compare(a, b, "ge", name=name)

    # ------------------------------------------------------------------ misc
    def where(self, cond: Node, a: Operand, b: Operand, *, name: str = "") -> Node:
        """``cond ? a : b`` with three-way broadcasting; result dtype promotes a and b."""
        self._check("where", cond)
        na, nb = self._operands("where", a, b)
        return self._add({"op": "where"}, [cond, na, nb], name)

    def cast(self, x: Node, dtype: DTypeLike, *, trunc: bool = False, name: str = "") -> Node:
        """Convert to ``dtype`` (float → int truncates toward zero).

        ``trunc=True`` (float → float only) rounds toward zero and keeps the
        integral value in a float dtype: ONNX's float → int truncation
        without the integer's range (no saturation; NaN and ±inf pass
        through)."""
        op: dict[str, object] = {"op": "cast", "to": dtype_name(dtype)}
        if trunc:
            op["trunc"] = True
        return self._add(op, [x], name)

    def fma(self, a: Operand, b: Operand, c: Operand, *, name: str = "") -> Node:
        """``a * b + c`` with broadcasting."""
        return self._add({"op": "fma"}, self._operands("fma", a, b, c), name)

    def elementwise_region(
        self, inputs: Sequence[Node], steps: Sequence[RegionStepLike], *, name: str = ""
    ) -> Node:
        """A fused chain of elementwise steps; the result is the last step's value.

        ``steps`` are serde dicts or shorthands, e.g.
        ``[("mul", "x0", "x1"), ("exp", "s0"), ("cast", "f16", "s1")]``.
        """
        op = {"op": "elementwise_region", "steps": [region_step(s) for s in steps]}
        return self._add(op, list(inputs), name)

    def swiglu(self, x: Node, *, gate_first: bool = False, name: str = "") -> Node:
        """SwiGLU on a ``[.., 2n]`` tensor → ``[.., n]``: ``x[.., :n] * silu(x[.., n:])``
        (``silu(x[.., :n]) * x[.., n:]`` when ``gate_first``)."""
        return self._add({"op": "fused_swiglu", "gate_first": gate_first}, [x], name)
