"""rlx.reference.scan_grad (scan_backward in numpy) against float64 central
differences of the reference's own forward scan (``interp.run_scan``), on a
body with a constant matmul, broadcasting, a mean and several activations;
and the error naming a body op without a gradient."""

from __future__ import annotations

import numpy as np
import pytest
import rlx
from rlx.ops.sequence import body_json
from rlx.reference.interp import run_scan
from rlx.reference.scan_grad import scan_backward


def _body() -> dict:
    rng = np.random.default_rng(0)
    b = rlx.Graph("body")
    c = b.input("c", [3])
    h = b.input("h", [1, 3])
    x = b.input("x", [2])
    w = b.constant(rng.standard_normal((2, 3)).round(3).astype(np.float32))
    z = b.add(b.mul(c, b.sigmoid(x[:1])), b.matmul(b.reshape(x, [1, 2]), w))
    n = b.tanh(b.sub(z, b.exp(b.neg(h))))
    nh = b.div(n, b.add(b.mean(b.relu(n), -1, keep_dims=True), 2.0))
    b.outputs(b.reshape(nh, [3]), b.silu(nh), b.sum(nh, -1, keep_dims=True))
    return body_json(b)


@pytest.mark.parametrize("wrt_xs", [False, True])
def test_scan_backward_matches_central_differences(wrt_xs: bool) -> None:
    rng = np.random.default_rng(1 + wrt_xs)
    body = _body()
    c0, h0 = rng.standard_normal(3), rng.standard_normal((1, 3))
    xs = rng.standard_normal((4, 2))
    dy = rng.standard_normal((4, 1, 1))
    op = {"op": "scan_backward", "body": body, "num_carry": 2, "length": 4, "wrt_xs": wrt_xs}
    got = scan_backward(op, [c0, h0, xs, dy], {})

    def loss(c: np.ndarray, h: np.ndarray, x: np.ndarray) -> float:
        return float((run_scan(body, 2, 4, False, [c, h], [x]) * dy).sum())

    base = [c0, h0] if not wrt_xs else [xs]
    want = []
    for k, v in enumerate(base):
        g = np.zeros(v.size)
        for i in range(v.size):
            d = np.zeros(v.size)
            d[i] = 1e-6
            args = [c0, h0, xs]
            j = 2 if wrt_xs else k
            p, m = list(args), list(args)
            p[j] = v + d.reshape(v.shape)
            m[j] = v - d.reshape(v.shape)
            g[i] = (loss(*p) - loss(*m)) / 2e-6
        want.append(g)
    want = np.concatenate(want)
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()


def test_scan_backward_names_an_op_without_gradient() -> None:
    b = rlx.Graph("body")
    c, x = b.input("c", [3]), b.input("x", [3])
    s = b.cumsum(b.add(c, x))
    b.outputs(s, s)
    op = {"op": "scan_backward", "body": body_json(b), "num_carry": 1, "length": 2}
    with pytest.raises(KeyError, match="cumsum"):
        scan_backward(op, [np.zeros(3), np.zeros((2, 3)), np.ones((2, 3))], {})
