"""Recurrences and scans: Mamba selective scan, Mamba-2, Gated DeltaNet,
LSTM / GRU / RNN, and the generic ``scan`` over a body graph."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from rlx.node import Node
from rlx.ops._base import GraphBase

if TYPE_CHECKING:
    from rlx.graph import Graph


def body_json(body: Graph) -> Any:
    """A body graph in the serde form embedded in ``scan`` ops."""
    return json.loads(body.to_json())


class SequenceOps(GraphBase):
    """Recurrent and scan ops."""

    def selective_scan(
        self,
        x: Node,
        delta: Node,
        a: Node,
        b: Node,
        c: Node,
        *,
        state: Optional[Node] = None,
        name: str = "",
    ) -> Node:
        """Mamba selective scan: x, delta ``[b, s, h]``, a ``[h, n]``, b/c ``[b, s, n]`` → ``[b,
        s, h]``.

        ``state`` (a ``g.state`` leaf ``[b, h, n]``, x's dtype) is the recurrent
        state for decoding: the scan starts from it and writes the final state
        back in place. Without it the state starts at zero and is discarded."""
        ins = [x, delta, a, b, c] + ([] if state is None else [state])
        return self._add({"op": "selective_scan"}, ins, name)

    def mamba2(
        self,
        x: Node,
        dt: Node,
        a: Node,
        b: Node,
        c: Node,
        *,
        heads: int,
        head_dim: Optional[int] = None,
        state_size: Optional[int] = None,
        state: Optional[Node] = None,
        name: str = "",
    ) -> Node:
        """Mamba-2 SSD scan: x ``[b, s, heads·p]``, dt ``[b, s, heads]``, a ``[heads]``,
        b/c ``[b, s, n]``. ``head_dim`` defaults to x's last dim / heads,
        ``state_size`` to b's last dim.

        ``state`` (a ``g.state`` leaf ``[b, heads, p, n]``, x's dtype) is the
        recurrent state for decoding: the scan starts from it and writes the
        final state back in place. Without it the state starts at zero."""
        if head_dim is None:
            head_dim = self._static(x, -1, "mamba2", "head_dim") // max(heads, 1)
        if state_size is None:
            state_size = self._static(b, -1, "mamba2", "state_size")
        op = {"op": "mamba2", "heads": heads, "head_dim": head_dim, "state_size": state_size}
        ins = [x, dt, a, b, c] + ([] if state is None else [state])
        return self._add(op, ins, name)

    def gated_delta_net(
        self,
        q: Node,
        k: Node,
        v: Node,
        g: Node,
        beta: Node,
        state: Node,
        *,
        heads: int,
        state_size: Optional[int] = None,
        name: str = "",
    ) -> Node:
        """Gated DeltaNet: q/k/v ``[b, s, heads·n]``, g/beta ``[b, s, heads]``, state
        ``[b, heads, n, n]`` (updated in place) → ``[b, s, heads·n]``."""
        if state_size is None:
            state_size = self._static(state, -1, "gated_delta_net", "state_size")
        op = {"op": "gated_delta_net", "heads": heads, "state_size": state_size}
        return self._add(op, [q, k, v, g, beta, state], name)

    def _rnn_attrs(self, w_hh: Node, hidden: Optional[int], op: str, **kw: Any) -> dict[str, Any]:
        if hidden is None:
            hidden = self._static(w_hh, -1, op, "hidden")
        return {"op": op, "hidden": hidden, **kw}

    def lstm(
        self,
        x: Node,
        w_ih: Node,
        w_hh: Node,
        bias: Node,
        h0: Node,
        c0: Node,
        *,
        hidden: Optional[int] = None,
        num_layers: int = 1,
        bidirectional: bool = False,
        carry: bool = False,
        name: str = "",
    ) -> Node:
        """LSTM (gates i, f, g, o) over x ``[b, s, in]`` → ``[b, s, dirs·hidden]``
        (``[b, s + 2·num_layers, ..]`` with ``carry``: each layer's final h,
        then each layer's final c).

        Weights are stacked per layer·direction (PyTorch ``weight_ih_l{l}{_reverse}``
        order): w_ih ``[L·dirs, 4h, in_w]`` with ``in_w = in`` for one layer,
        else ``max(in, dirs·h)`` (zero-pad the narrower slots), w_hh
        ``[L·dirs, 4h, h]``, bias ``[L·dirs, 4h]`` (= ``b_ih + b_hh``), h0 / c0
        ``[L·dirs, b, h]``. The full layout is documented on the IR op
        ``Lstm``. ``hidden`` defaults to w_hh's last dim."""
        op = self._rnn_attrs(
            w_hh, hidden, "lstm", num_layers=num_layers, bidirectional=bidirectional, carry=carry
        )
        return self._add(op, [x, w_ih, w_hh, bias, h0, c0], name)

    def gru(
        self,
        x: Node,
        w_ih: Node,
        w_hh: Node,
        b_ih: Node,
        b_hh: Node,
        h0: Node,
        *,
        hidden: Optional[int] = None,
        num_layers: int = 1,
        bidirectional: bool = False,
        carry: bool = False,
        name: str = "",
    ) -> Node:
        """GRU (gates r, z, n) → ``[b, s, dirs·hidden]`` (``s + num_layers`` rows
        with ``carry``); weights as on :meth:`lstm` with ``3h`` gate rows, the
        biases ``b_ih`` / ``b_hh [L·dirs, 3h]`` kept separate."""
        op = self._rnn_attrs(
            w_hh, hidden, "gru", num_layers=num_layers, bidirectional=bidirectional, carry=carry
        )
        return self._add(op, [x, w_ih, w_hh, b_ih, b_hh, h0], name)

    def rnn(
        self,
        x: Node,
        w_ih: Node,
        w_hh: Node,
        bias: Node,
        h0: Node,
        *,
        hidden: Optional[int] = None,
        num_layers: int = 1,
        bidirectional: bool = False,
        carry: bool = False,
        relu: bool = False,
        name: str = "",
    ) -> Node:
        """Elman RNN (tanh, or ReLU with ``relu=True``); weights as on :meth:`lstm`
        with ``h`` gate rows (``s + num_layers`` rows with ``carry``)."""
        op = self._rnn_attrs(
            w_hh,
            hidden,
            "rnn",
            num_layers=num_layers,
            bidirectional=bidirectional,
            carry=carry,
            relu=relu,
        )
        return self._add(op, [x, w_ih, w_hh, bias, h0], name)

    def scan(
        self,
        body: Graph,
        carry_init: Sequence[Node],
        xs: Sequence[Node],
        *,
        length: Optional[int] = None,
        reverse: bool = False,
        name: str = "",
    ) -> Node:
        """Generic scan. ``body`` takes the carries then one slice of each ``xs``
        (scanned along axis 0) and outputs the new carries then ``y``; the
        result is ``y`` stacked ``[length, ..]``. ``length`` defaults to
        ``xs[0].shape[0]``."""
        if length is None:
            length = self._static(xs[0], 0, "scan", "length") if xs else 0
        op = {
            "op": "scan",
            "body": body_json(body),
            "num_carry": len(carry_init),
            "length": length,
            "reverse": reverse,
        }
        return self._add(op, [*carry_init, *xs], name)
