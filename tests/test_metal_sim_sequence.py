"""device="metal-sim" against device="host" for the recurrences: gated
DeltaNet (f32 and f16), selective scan and Mamba-2 (with and without a
recurrent state), LSTM / GRU / RNN (one layer, two directions, stacked
layers, carry rows). On metal-sim each runs as a kernel of gdn.metal /
ssm.metal / recurrent.metal (the plan has no host command); the host runs
them through their numpy references (float64 inside). Odd sizes: batch 2,
seq 7 / 33, 3 heads, n 5 / 16, hidden 13.

Tolerances: f32 1e-5 abs + 1e-5 rel; f16 (GDN) 2e-3 abs + 2^-9 rel (the
reference rounds to f16 once from float64, the kernel from f32)."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest
import rlx

B, H = 2, 3


def _compare(
    build: Callable[[rlx.Graph], None],
    inputs: dict[str, np.ndarray],
    params: dict[str, np.ndarray],
    states: dict[str, np.ndarray],
    f16: bool = False,
) -> None:
    got: dict[str, list[np.ndarray]] = {}
    for device in ("host", "metal-sim"):
        g = rlx.Graph("seq")
        build(g)
        exe = rlx.compile(g, device=device)
        if device == "metal-sim":
            assert exe.stats["metal_host"] == 0, exe.report()
            assert exe.stats["metal_dispatches"] >= 1
        for k, v in params.items():
            exe.set_param(k, v)
        for k, v in states.items():
            exe.set_state(k, v)
        outs = [np.asarray(v, np.float64) for v in exe.run(**inputs).values()]
        outs += [np.asarray(exe.state(k), np.float64) for k in states]
        got[device] = outs
    atol, rtol = (2e-3, 2.0**-9) if f16 else (1e-5, 1e-5)
    assert len(got["host"]) == len(got["metal-sim"])
    for host, sim in zip(got["host"], got["metal-sim"]):
        np.testing.assert_allclose(sim, host, atol=atol, rtol=rtol)


def _l2(v: np.ndarray, n: int) -> np.ndarray:
    r = v.reshape(*v.shape[:-1], -1, n)
    return (r / np.linalg.norm(r, axis=-1, keepdims=True)).reshape(v.shape)


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("s,n", [(7, 16), (33, 5)])
def test_gated_delta_net(dt: str, s: int, n: int) -> None:
    rng = np.random.default_rng(s * 10 + n)
    np_dt = np.float32 if dt == "f32" else np.float16
    shp = (B, s, H * n)
    feeds = {
        "q": _l2(rng.standard_normal(shp), n),
        "k": _l2(rng.standard_normal(shp), n),
        "v": rng.uniform(-1, 1, shp),
        "g": rng.uniform(-1, -0.01, (B, s, H)),
        "beta": rng.uniform(0.05, 0.95, (B, s, H)),
    }
    feeds = {k: v.astype(np_dt) for k, v in feeds.items()}
    st = rng.uniform(-0.5, 0.5, (B, H, n, n)).astype(np_dt)

    def build(g: rlx.Graph) -> None:
        q, k, v = (g.input(x, list(shp), dt) for x in "qkv")
        gate = g.input("g", [B, s, H], dt)
        beta = g.input("beta", [B, s, H], dt)
        state = g.state("S", [B, H, n, n], dt)
        g.outputs(g.gated_delta_net(q, k, v, gate, beta, state, heads=H))

    _compare(build, feeds, {}, {"S": st}, f16=dt == "f16")


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("kind", ["selective_scan", "mamba2"])
def test_ssm_scans(kind: str, with_state: bool) -> None:
    rng = np.random.default_rng(3 + with_state)
    s, n, hid, p = 33, 16, 13, 5
    ss = kind == "selective_scan"
    width = hid if ss else H * p
    feeds = {
        "x": rng.uniform(-1, 1, (B, s, width)),
        "dt": rng.uniform(0.01, 0.5, (B, s, hid if ss else H)),
        "b": rng.uniform(-1, 1, (B, s, n)),
        "c": rng.uniform(-1, 1, (B, s, n)),
    }
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    a = -rng.uniform(0.1, 2.0, (hid, n) if ss else H).astype(np.float32)
    st_shape = [B, hid, n] if ss else [B, H, p, n]
    states = {"S": rng.uniform(-0.5, 0.5, st_shape).astype(np.float32)} if with_state else {}

    def build(g: rlx.Graph) -> None:
        x = g.input("x", [B, s, width])
        d = g.input("dt", [B, s, hid if ss else H])
        bm, cm = g.input("b", [B, s, n]), g.input("c", [B, s, n])
        am = g.param("a", list(a.shape))
        st = g.state("S", st_shape) if with_state else None
        if ss:
            y = g.selective_scan(x, d, am, bm, cm, state=st)
        else:
            y = g.mamba2(x, d, am, bm, cm, heads=H, state=st)
        g.outputs(y)

    _compare(build, feeds, {"a": a}, states)


@pytest.mark.parametrize(
    "cell,layers,bidir,carry",
    [
        ("lstm", 1, False, True),
        ("lstm", 1, True, True),
        ("lstm", 2, False, True),
        ("gru", 1, True, False),
        ("gru", 3, False, True),
        ("rnn", 1, False, True),
        ("rnn_relu", 2, False, False),
    ],
)
def test_recurrent_nets(cell: str, layers: int, bidir: bool, carry: bool) -> None:
    rng = np.random.default_rng(layers * 4 + bidir * 2 + carry)
    s, nin, hid = 7, 5, 13
    gates = {"lstm": 4, "gru": 3}.get(cell, 1)
    dirs = 2 if bidir else 1
    slots = layers * dirs
    in_w = nin if layers == 1 else max(nin, dirs * hid)
    sc = 1.0 / np.sqrt(hid)
    f32 = np.float32
    x = rng.uniform(-1, 1, (B, s, nin)).astype(f32)
    params = {
        "w_ih": rng.uniform(-sc, sc, (slots, gates * hid, in_w)).astype(f32),
        "w_hh": rng.uniform(-sc, sc, (slots, gates * hid, hid)).astype(f32),
        "b_ih": rng.uniform(-sc, sc, (slots, gates * hid)).astype(f32),
        "b_hh": rng.uniform(-sc, sc, (slots, gates * hid)).astype(f32),
        "h0": rng.uniform(-0.5, 0.5, (slots, B, hid)).astype(f32),
        "c0": rng.uniform(-0.5, 0.5, (slots, B, hid)).astype(f32),
    }
    if cell != "gru":
        del params["b_hh"]
    if cell != "lstm":
        del params["c0"]

    def build(g: rlx.Graph) -> None:
        xi = g.input("x", [B, s, nin])
        p = {k: g.param(k, list(v.shape)) for k, v in params.items()}
        kw = dict(num_layers=layers, bidirectional=bidir, carry=carry)
        if cell == "lstm":
            y = g.lstm(xi, p["w_ih"], p["w_hh"], p["b_ih"], p["h0"], p["c0"], **kw)
        elif cell == "gru":
            y = g.gru(xi, p["w_ih"], p["w_hh"], p["b_ih"], p["b_hh"], p["h0"], **kw)
        else:
            relu = cell == "rnn_relu"
            y = g.rnn(xi, p["w_ih"], p["w_hh"], p["b_ih"], p["h0"], relu=relu, **kw)
        g.outputs(y)

    _compare(build, {"x": x}, params, {})


@pytest.mark.parametrize("kind", ["gdn", "mamba2"])
def test_decode_steps_carry_the_state(kind: str) -> None:
    # one token per run, three runs: the State buffer carries the
    # recurrence from run to run on both devices (the decode pattern)
    rng = np.random.default_rng(11)
    n, p = 16, 5
    width = H * n if kind == "gdn" else H * p
    steps = [
        {
            "x": rng.uniform(-1, 1, (B, 1, width)).astype(np.float32),
            "g": rng.uniform(-1, -0.01, (B, 1, H)).astype(np.float32),
            "beta": rng.uniform(0.05, 0.95, (B, 1, H)).astype(np.float32),
            "b": rng.uniform(-1, 1, (B, 1, n)).astype(np.float32),
        }
        for _ in range(3)
    ]
    a = -rng.uniform(0.1, 2.0, H).astype(np.float32)
    st_shape = [B, H, n, n] if kind == "gdn" else [B, H, p, n]
    st0 = rng.uniform(-0.5, 0.5, st_shape).astype(np.float32)
    got: dict[str, list[np.ndarray]] = {}
    for device in ("host", "metal-sim"):
        g = rlx.Graph("decode")
        x = g.input("x", [B, 1, width])
        gate = g.input("g", [B, 1, H])
        beta = g.input("beta", [B, 1, H])
        st = g.state("S", st_shape)
        if kind == "gdn":
            # q = k = v = x (unit rows per head)
            y = g.gated_delta_net(x, x, x, gate, beta, st, heads=H)
        else:
            bm = g.input("b", [B, 1, n])
            y = g.mamba2(x, beta, g.param("a", [H]), bm, bm, heads=H, state=st)
        g.outputs(y)
        exe = rlx.compile(g, device=device)
        if device == "metal-sim":
            assert exe.stats["metal_host"] == 0, exe.report()
        if kind != "gdn":
            exe.set_param("a", a)
        exe.set_state("S", st0)
        outs = []
        for feed in steps:
            fx = dict(feed)
            if kind == "gdn":
                fx["x"] = _l2(fx["x"].astype(np.float64), n).astype(np.float32)
                del fx["b"]
            outs.append(np.asarray(list(exe.run(**fx).values())[0], np.float64))
        outs.append(np.asarray(exe.state("S"), np.float64))
        got[device] = outs
    for host, sim in zip(got["host"], got["metal-sim"]):
        np.testing.assert_allclose(sim, host, atol=1e-5, rtol=1e-5)
    # the state moved
    assert np.max(np.abs(got["host"][-1] - st0)) > 1e-3
