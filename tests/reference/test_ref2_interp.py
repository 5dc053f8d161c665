"""``host_op`` (one IR op through the numpy interpreter) and ``scan_host`` (a
body graph looped over axis 0), against direct numpy formulations."""

from __future__ import annotations

import numpy as np
import pytest
from _mem2 import Arena
from rlx.reference import run_thunk
from rlx.reference.interp import OPS, eval_graph


def shp(dims: list[int], dtype: str = "f32") -> dict:
    return {"dims": dims, "dtype": dtype}


def node(op: dict, inputs: list[int], dims: list[int], dtype: str = "f32") -> dict:
    return {"op": op, "inputs": inputs, "shape": shp(dims, dtype), "name": ""}


def host_op(
    op: dict, args: list[np.ndarray], out_dims: list[int], out_dtype: str = "f32"
) -> tuple[Arena, list]:
    a = Arena()
    ins = [
        [a.put(x), x.size, shp(list(x.shape), {np.float32: "f32", np.int32: "i32"}[x.dtype.type])]
        for x in args
    ]
    npdt = {"f32": np.float32, "i32": np.int32, "f64": np.float64}[out_dtype]
    oo = a.out(tuple(out_dims), npdt)
    out = [oo, int(np.prod(out_dims)), shp(out_dims, out_dtype)]
    run_thunk({"name": "host_op", "op": op, "inputs": ins, "output": out}, a.build())
    return a, [a.read(oo, tuple(out_dims), npdt), ins]


def test_host_op_fft_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    z = rng.standard_normal((2, 5)) + 1j * rng.standard_normal((2, 5))
    x = np.concatenate([z.real, z.imag], 1).astype(np.float32)
    _, (got, _) = host_op({"op": "fft", "inverse": False, "norm": "ortho"}, [x], [2, 10])
    want = np.fft.fft(x[:, :5].astype(np.float64) + 1j * x[:, 5:], norm="ortho")
    np.testing.assert_allclose(got[:, :5] + 1j * got[:, 5:], want, rtol=1e-5, atol=1e-5)


def test_host_op_selective_scan_equals_thunk() -> None:
    rng = np.random.default_rng(1)
    b, s, h, n = 1, 4, 2, 3
    ops = [
        rng.standard_normal((b, s, h)),
        rng.uniform(0.1, 0.5, (b, s, h)),
        -rng.uniform(0.1, 1, (h, n)),
        rng.standard_normal((b, s, n)),
        rng.standard_normal((b, s, n)),
    ]
    ops = [o.astype(np.float32) for o in ops]
    _, (got, _) = host_op({"op": "selective_scan"}, ops, [b, s, h])
    a = Arena()
    t = dict(
        name="selective_scan",
        x=a.put(ops[0]),
        delta=a.put(ops[1]),
        a=a.put(ops[2]),
        b=a.put(ops[3]),
        c=a.put(ops[4]),
        dst=a.out((b, s, h)),
        batch=b,
        seq=s,
        hidden=h,
        state_size=n,
    )
    run_thunk(t, a.build())
    np.testing.assert_array_equal(got, a.read(t["dst"], (b, s, h)))


def test_host_op_gated_delta_net_writes_state() -> None:
    rng = np.random.default_rng(2)
    b, s, H, n = 1, 3, 1, 2
    q, k, v = (rng.standard_normal((b, s, H * n)).astype(np.float32) for _ in range(3))
    g = -rng.uniform(0.1, 0.3, (b, s, H)).astype(np.float32)
    beta = rng.uniform(0.2, 0.8, (b, s, H)).astype(np.float32)
    st = rng.standard_normal((b, H, n, n)).astype(np.float32)
    a, (o, ins) = host_op(
        {"op": "gated_delta_net", "heads": H, "state_size": n},
        [q, k, v, g, beta, st],
        [b, s, H * n],
    )
    S = st[0, 0].astype(np.float64)
    for t in range(s):
        kt = k[0, t].astype(np.float64)
        S = S @ (np.exp(g[0, t, 0]) * (np.eye(n) - beta[0, t, 0] * np.outer(kt, kt))) + beta[
            0, t, 0
        ] * np.outer(v[0, t], kt)
        np.testing.assert_allclose(o[0, t], S @ q[0, t], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a.read(ins[5][0], (n, n)), S, rtol=1e-5, atol=1e-5)


def test_host_op_unknown_op_names_it() -> None:
    with pytest.raises(KeyError, match="no_such_op"):
        host_op({"op": "no_such_op"}, [np.zeros(2, np.float32)], [2])


def test_host_op_vq_and_log_mel() -> None:
    rng = np.random.default_rng(3)
    x, cb = (
        rng.standard_normal((5, 3)).astype(np.float32),
        rng.standard_normal((4, 3)).astype(np.float32),
    )
    _, (got, _) = host_op({"op": "vq_assign", "metric": "l2"}, [x, cb], [5], "i32")
    want = [int(np.argmin(((xi - cb) ** 2).sum(1))) for xi in x.astype(np.float64)]
    assert list(got) == want
    assert "log_mel" in OPS and "lstm" in OPS and "dequant_mat_mul" in OPS


def _ema_body() -> dict:
    """carry c [3], x slice [3] -> (c' = 0.5·c + x, y = tanh(c') @ W) with W a constant [3, 2]."""
    W = [0.1, -0.2, 0.3, 0.4, -0.5, 0.6]
    return {
        "name": "ema",
        "outputs": [4, 7],
        "nodes": [
            node({"op": "input", "shape": shp([3])}, [], [3]),
            node({"op": "input", "shape": shp([3])}, [], [3]),
            node({"op": "constant", "shape": shp([1]), "values": [0.5]}, [], [1]),
            node({"op": "binary", "kind": "mul"}, [0, 2], [3]),
            node({"op": "binary", "kind": "add"}, [3, 1], [3]),
            node({"op": "constant", "shape": shp([3, 2]), "values": W}, [], [3, 2]),
            node({"op": "activation", "kind": "tanh"}, [4], [3]),
            node({"op": "mat_mul"}, [6, 5], [2]),
        ],
    }


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_host(reverse: bool) -> None:
    body = _ema_body()
    rng = np.random.default_rng(4)
    L = 5
    c0 = rng.standard_normal(3).astype(np.float32)
    xs = rng.standard_normal((L, 3)).astype(np.float32)
    a = Arena()
    ins = [[a.put(c0), 3, shp([3])], [a.put(xs), 3 * L, shp([L, 3])]]
    oo = a.out((L, 2))
    run_thunk(
        {
            "name": "scan_host",
            "body": body,
            "num_carry": 1,
            "length": L,
            "reverse": reverse,
            "inputs": ins,
            "output": [oo, 2 * L, shp([L, 2])],
        },
        a.build(),
    )
    W = np.array([0.1, -0.2, 0.3, 0.4, -0.5, 0.6]).reshape(3, 2)
    c = c0.astype(np.float64)
    want = np.zeros((L, 2))
    for i in range(L - 1, -1, -1) if reverse else range(L):
        c = 0.5 * c + xs[i]
        want[i] = np.tanh(c) @ W
    np.testing.assert_allclose(a.read(oo, (L, 2)), want, rtol=1e-5, atol=1e-6)
    # the body on its own
    outs = eval_graph(body, [c0.astype(np.float64), xs[0].astype(np.float64)])
    np.testing.assert_allclose(outs[0], 0.5 * c0 + xs[0], rtol=1e-6)


def test_host_op_adapters_agree_with_direct_formulas() -> None:
    rng = np.random.default_rng(5)
    # attention_backward (bshd) == the pure gradient on [b, h, s, d]
    from rlx.reference.backward import attention_backward_fn, attention_mask

    b, s, h, d = 1, 3, 2, 4
    q, k, v, dy = (rng.standard_normal((b, s, h * d)).astype(np.float32) for _ in range(4))
    op = {
        "op": "attention_backward",
        "wrt": "k",
        "heads": h,
        "head_dim": d,
        "mask": "causal",
        "window": 0,
        "layout": "bshd",
    }
    _, (got, _) = host_op(op, [q, k, v, dy], [b, s, h * d])

    def bhsd(x: np.ndarray) -> np.ndarray:
        return x.astype(np.float64).reshape(b, s, h, d).transpose(0, 2, 1, 3)

    want = attention_backward_fn(bhsd(q), bhsd(k), bhsd(v), bhsd(dy), attention_mask(1, s, s, 0), 1)
    np.testing.assert_allclose(
        got, want.transpose(0, 2, 1, 3).reshape(b, s, h * d), rtol=1e-5, atol=1e-5
    )
    # max_pool2d_backward: dy routed to the window maxima
    x = rng.permutation(16).reshape(1, 1, 4, 4).astype(np.float32)
    dyp = np.ones((1, 1, 2, 2), np.float32)
    _, (gp, _) = host_op(
        {"op": "max_pool2d_backward", "kernel": [2, 2], "stride": [2, 2], "padding": [0, 0]},
        [x, dyp],
        [1, 1, 4, 4],
    )
    for i in range(2):
        for j in range(2):
            win = x[0, 0, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2]
            assert gp[0, 0, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2][win == win.max()] == 1.0
    assert gp.sum() == 4.0
    # gaussian splat render through host_op == render_fn
    from rlx.reference.splat import render_fn

    cfg = dict(
        width=6,
        height=5,
        tile_size=4,
        radius_scale=3.0,
        alpha_cutoff=1 / 255,
        max_splat_steps=0,
        transmittance_threshold=1e-4,
        max_list_entries=0,
    )
    meta = np.concatenate([np.eye(4).ravel(), [6.0, 6.0, 3.0, 2.5]]).astype(np.float32)
    ops = [
        np.array([[0.0, 0.1, 3.0]]),
        np.full((1, 3), 0.3),
        np.array([[1.0, 0, 0, 0]]),
        np.array([0.7]),
        np.array([[0.2, 0.5, 0.9]]),
        np.zeros((1, 0, 3)),
        meta,
    ]
    ops = [o.astype(np.float32) for o in ops]
    _, (img, _) = host_op({"op": "gaussian_splat_render", "cfg": cfg}, ops, [5, 6, 3])
    want = render_fn(*[o.astype(np.float64) for o in ops], cfg)
    np.testing.assert_allclose(img, want, rtol=1e-5, atol=1e-6)
    assert img.max() > 0.1
