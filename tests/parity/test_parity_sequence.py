"""Sequence ops, host vs reference vs numpy written here from the papers'
recurrences: Mamba selective scan, Mamba-2 SSD, Gated DeltaNet (f32, f16),
LSTM / GRU / RNN (multi-layer, bidirectional, carry) and the generic scan.

Odd sizes (batch 2, seq 1 / 7 / 65 / 130, 3 heads, state 5 / 16 / 64). The
recurrent state of the SSM scans and GDN: running s tokens at once equals
running them one at a time through the state ("prefill form == decode
form"), and a bucket-compiled schedule run on its first n rows
(``run_active``) leaves the state of running exactly n rows.

Tolerances: the harness's (f32 1e-5, f16 1e-2, ``|err| ≤ tol·(1 + |ref|)``);
decode-vs-prefill and active-vs-exact compare f32 results at 1e-5 too (the
same arithmetic in a different grouping of runs)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pytest
import rlx
from _harness2 import assert_native, check, close, compile_both, one

A = np.ndarray
SCAN_NATIVE = ["scan_host"]
SEQ_THUNKS = ["selective_scan", "mamba2", "gated_delta_net", "lstm", "gru", "rnn"]


# ------------------------------------------------------------------ numpy
def np_selective_scan(x: A, dt: A, a: A, b: A, c: A, h0: Optional[A] = None) -> tuple[A, A]:
    """Gu & Dao 2023, Alg. 2 (recurrent): ``h = exp(Δ·A)·h + Δ·x·B``, ``y = h·C``."""
    x, dt, a, b, c = (np.asarray(v, np.float64) for v in (x, dt, a, b, c))
    bsz, s, hid = x.shape
    h = np.zeros((bsz, hid, a.shape[1])) if h0 is None else np.asarray(h0, np.float64).copy()
    y = np.zeros((bsz, s, hid))
    for t in range(s):
        d = dt[:, t][..., None]
        h = np.exp(d * a) * h + d * x[:, t][..., None] * b[:, t][:, None, :]
        y[:, t] = (h * c[:, t][:, None, :]).sum(-1)
    return y, h


def np_mamba2(
    x: A, dt: A, a: A, b: A, c: A, heads: int, p: int, h0: Optional[A] = None
) -> tuple[A, A]:
    """Dao & Gu 2024, SSD recurrent form with scalar A per head."""
    x, dt, a, b, c = (np.asarray(v, np.float64) for v in (x, dt, a, b, c))
    bsz, s, _ = x.shape
    n = b.shape[-1]
    h = np.zeros((bsz, heads, p, n)) if h0 is None else np.asarray(h0, np.float64).copy()
    y = np.zeros((bsz, s, heads, p))
    for t in range(s):
        d = dt[:, t][:, :, None, None]
        xt = x[:, t].reshape(bsz, heads, p)
        h = np.exp(d * a[None, :, None, None]) * h + d * xt[..., None] * b[:, t][:, None, None, :]
        y[:, t] = (h * c[:, t][:, None, None, :]).sum(-1)
    return y.reshape(bsz, s, heads * p), h


def np_gdn(q: A, k: A, v: A, g: A, beta: A, s0: A, heads: int) -> tuple[A, A]:
    """Yang et al. 2024: ``S = e^g (S − β (S k) kᵀ) + β v kᵀ``, ``o = S q``."""
    q, k, v, g, beta = (np.asarray(z, np.float64) for z in (q, k, v, g, beta))
    bsz, s, hn = q.shape
    n = hn // heads
    S = np.asarray(s0, np.float64).copy()
    o = np.zeros((bsz, s, heads, n))
    for t in range(s):
        qt, kt, vt = (z[:, t].reshape(bsz, heads, n) for z in (q, k, v))
        al = np.exp(g[:, t])[..., None, None]
        be = beta[:, t][..., None, None]
        sk = np.einsum("bhij,bhj->bhi", S, kt)
        S = al * (S - be * sk[..., None] * kt[..., None, :]) + be * vt[..., None] * kt[..., None, :]
        o[:, t] = np.einsum("bhij,bhj->bhi", S, qt)
    return o.reshape(bsz, s, hn), S


def _sig(z: A) -> A:
    return 1.0 / (1.0 + np.exp(-z))


def np_rnn(
    kind: str,
    x: A,
    w_ih: A,
    w_hh: A,
    b1: A,
    b2: A,
    h0: A,
    c0: Optional[A],
    layers: int,
    bidir: bool,
    carry: bool,
    relu: bool = False,
) -> A:
    """torch.nn.LSTM / GRU / RNN (batch_first) on the IR's packed layout."""
    D = 2 if bidir else 1
    inp = np.asarray(x, np.float64)
    bsz, s, _ = inp.shape
    H = w_hh.shape[-1]
    fh, fc = [], []
    for layer in range(layers):
        outs, hs, cs = [], [], []
        for d in range(D):
            li = layer * D + d
            W = w_ih[li, :, : inp.shape[-1]].astype(np.float64)
            U = w_hh[li].astype(np.float64)
            h = h0[li].astype(np.float64)
            c = None if c0 is None else c0[li].astype(np.float64)
            out = np.zeros((bsz, s, H))
            for t in range(s - 1, -1, -1) if d else range(s):
                xw = inp[:, t] @ W.T + b1[li]
                if kind == "lstm":
                    z = xw + h @ U.T
                    i, f, gg, o = (z[:, j * H : (j + 1) * H] for j in range(4))
                    c = _sig(f) * c + _sig(i) * np.tanh(gg)
                    h = _sig(o) * np.tanh(c)
                elif kind == "gru":
                    hw = h @ U.T + b2[li]
                    r = _sig(xw[:, :H] + hw[:, :H])
                    zz = _sig(xw[:, H : 2 * H] + hw[:, H : 2 * H])
                    nn = np.tanh(xw[:, 2 * H :] + r * hw[:, 2 * H :])
                    h = (1 - zz) * nn + zz * h
                else:
                    pre = xw + h @ U.T
                    h = np.maximum(pre, 0) if relu else np.tanh(pre)
                out[:, t] = h
            outs.append(out)
            hs.append(h)
            cs.append(c)
        inp = np.concatenate(outs, -1)
        fh.append(np.concatenate(hs, -1))
        if kind == "lstm":
            fc.append(np.concatenate(cs, -1))
    if not carry:
        return inp
    return np.concatenate([inp] + [r[:, None] for r in fh + fc], 1)


# ------------------------------------------------------------------ inputs
def _ssm_inputs(
    rng: np.random.Generator,
    b: int,
    s: int,
    width: int,
    gates: int,
    n: int,
    a_shape: tuple[int, ...],
) -> tuple[A, A, A, A, A]:
    x = rng.standard_normal((b, s, width)).astype(np.float32)
    dt = rng.uniform(0.01, 0.3, (b, s, gates)).astype(np.float32)
    a = -rng.uniform(0.2, 1.5, a_shape).astype(np.float32)
    bb = rng.standard_normal((b, s, n)).astype(np.float32) / np.sqrt(n)
    cc = rng.standard_normal((b, s, n)).astype(np.float32) / np.sqrt(n)
    return x, dt, a, bb, cc


def _ss_graph(b: int, s: int, h: int, n: int, with_state: bool) -> rlx.Graph:
    g = rlx.Graph("ss")
    x, dt = g.input("x", [b, s, h]), g.input("dt", [b, s, h])
    a = g.input("a", [h, n])
    bb, cc = g.input("b", [b, s, n]), g.input("c", [b, s, n])
    st = g.state("h", [b, h, n]) if with_state else None
    g.outputs(g.selective_scan(x, dt, a, bb, cc, state=st, name="y"))
    return g


def _m2_graph(b: int, s: int, heads: int, p: int, n: int, with_state: bool) -> rlx.Graph:
    g = rlx.Graph("m2")
    x, dt = g.input("x", [b, s, heads * p]), g.input("dt", [b, s, heads])
    a = g.input("a", [heads])
    bb, cc = g.input("b", [b, s, n]), g.input("c", [b, s, n])
    st = g.state("h", [b, heads, p, n]) if with_state else None
    g.outputs(g.mamba2(x, dt, a, bb, cc, heads=heads, state=st, name="y"))
    return g


def _gdn_graph(b: int, s: int, heads: int, n: int, dt: str) -> rlx.Graph:
    g = rlx.Graph("gdn")
    q, k, v = (g.input(nm, [b, s, heads * n], dt) for nm in "qkv")
    gg, be = g.input("g", [b, s, heads], dt), g.input("beta", [b, s, heads], dt)
    st = g.state("S", [b, heads, n, n], dt)
    g.outputs(g.gated_delta_net(q, k, v, gg, be, st, heads=heads, name="o"))
    return g


def _gdn_inputs(
    rng: np.random.Generator, b: int, s: int, heads: int, n: int, npdt: Any
) -> dict[str, A]:
    def unit(shape: tuple[int, ...]) -> A:
        z = rng.standard_normal(shape).reshape(b, s, heads, n)
        return (z / np.linalg.norm(z, axis=-1, keepdims=True)).reshape(shape)

    q = (unit((b, s, heads * n)) / np.sqrt(n)).astype(npdt)
    k = unit((b, s, heads * n)).astype(npdt)
    v = rng.standard_normal((b, s, heads * n)).astype(npdt)
    g = (-rng.uniform(0.01, 0.4, (b, s, heads))).astype(npdt)
    beta = rng.uniform(0.1, 0.9, (b, s, heads)).astype(npdt)
    return dict(q=q, k=k, v=v, g=g, beta=beta)


# ------------------------------------------------------------------ tests
@pytest.mark.parametrize("s,n", [(1, 5), (7, 16), (65, 5), (130, 16)])
@pytest.mark.parametrize("with_state", [False, True])
def test_selective_scan(s: int, n: int, with_state: bool) -> None:
    rng = np.random.default_rng(s * 10 + n)
    b, h = 2, 3
    x, dt, a, bb, cc = _ssm_inputs(rng, b, s, h, h, n, (h, n))
    h0 = (rng.standard_normal((b, h, n)) * 0.5).astype(np.float32)
    host, ref = compile_both(_ss_graph(b, s, h, n, with_state))
    assert_native(host, ["selective_scan"])
    if with_state:
        host.set_state("h", h0)
        ref.set_state("h", h0)
    ins = dict(x=x, dt=dt, a=a, b=bb, c=cc)
    want, fin = np_selective_scan(x, dt, a, bb, cc, h0 if with_state else None)
    for exe in (host, ref):
        close(one(exe.run(**ins)), want, 1e-5, f"{exe.device} y vs numpy")
        if with_state:
            close(exe.state("h"), fin, 1e-5, f"{exe.device} final state vs numpy")


@pytest.mark.parametrize("s,n", [(1, 16), (7, 5), (65, 64), (130, 16)])
def test_mamba2(s: int, n: int) -> None:
    rng = np.random.default_rng(s + n)
    b, heads, p = 2, 3, 4
    x, dt, a, bb, cc = _ssm_inputs(rng, b, s, heads * p, heads, n, (heads,))
    h0 = (rng.standard_normal((b, heads, p, n)) * 0.5).astype(np.float32)
    host, ref = compile_both(_m2_graph(b, s, heads, p, n, True))
    assert_native(host, ["mamba2"])
    want, fin = np_mamba2(x, dt, a, bb, cc, heads, p, h0)
    for exe in (host, ref):
        exe.set_state("h", h0)
        close(one(exe.run(x=x, dt=dt, a=a, b=bb, c=cc)), want, 1e-5, f"{exe.device} y")
        close(exe.state("h"), fin, 1e-5, f"{exe.device} state")
    # without a state operand: zero start, same as numpy's zero state
    want0, _ = np_mamba2(x, dt, a, bb, cc, heads, p)
    check(
        _m2_graph(b, s, heads, p, n, False),
        dict(x=x, dt=dt, a=a, b=bb, c=cc),
        native=["mamba2"],
        expect=want0,
    )


@pytest.mark.parametrize("dt", ["f32", "f16"])
@pytest.mark.parametrize("s,n", [(1, 16), (7, 5), (65, 16), (130, 64)])
def test_gated_delta_net(dt: str, s: int, n: int) -> None:
    npdt = {"f32": np.float32, "f16": np.float16}[dt]
    rng = np.random.default_rng(7 * s + n)
    b, heads = 2, 3
    ins = _gdn_inputs(rng, b, s, heads, n, npdt)
    s0 = (rng.standard_normal((b, heads, n, n)) * 0.1).astype(npdt)
    host, ref = compile_both(_gdn_graph(b, s, heads, n, dt))
    assert_native(host, ["gated_delta_net"])
    want, fin = np_gdn(ins["q"], ins["k"], ins["v"], ins["g"], ins["beta"], s0, heads)
    tol = 1e-5 if dt == "f32" else 1e-2
    outs = {}
    for exe in (host, ref):
        exe.set_state("S", s0)
        outs[exe.device] = one(exe.run(**ins))
        close(outs[exe.device], want, tol, f"{exe.device} o vs numpy")
        close(exe.state("S"), fin, tol, f"{exe.device} state vs numpy")
    close(outs["host"], outs["reference"], tol, "host vs reference")


@pytest.mark.parametrize("kind", ["ss", "m2", "gdn"])
def test_prefill_equals_decode(kind: str) -> None:
    """s tokens in one run == the same tokens one run at a time (s = 1
    graph) through the persistent state, on host; outputs and final state."""
    rng = np.random.default_rng(11)
    b, s, heads, p, n = 2, 9, 3, 2, 5
    if kind == "ss":
        x, dt, a, bb, cc = _ssm_inputs(rng, b, s, heads, heads, n, (heads, n))
        ins = dict(x=x, dt=dt, a=a, b=bb, c=cc)
        full, step, st = _ss_graph(b, s, heads, n, True), _ss_graph(b, 1, heads, n, True), "h"
    elif kind == "m2":
        x, dt, a, bb, cc = _ssm_inputs(rng, b, s, heads * p, heads, n, (heads,))
        ins = dict(x=x, dt=dt, a=a, b=bb, c=cc)
        full, step = _m2_graph(b, s, heads, p, n, True), _m2_graph(b, 1, heads, p, n, True)
        st = "h"
    else:
        ins = _gdn_inputs(rng, b, s, heads, n, np.float32)
        full, step, st = _gdn_graph(b, s, heads, n, "f32"), _gdn_graph(b, 1, heads, n, "f32"), "S"
    pre = rlx.compile(full, device="host")
    dec = rlx.compile(step, device="host")
    y_pre = one(pre.run(**ins))
    rows = []
    for t in range(s):
        tok = {
            k: (v if k == "a" else np.ascontiguousarray(v[:, t : t + 1])) for k, v in ins.items()
        }
        rows.append(one(dec.run(**tok)))
    close(np.concatenate(rows, 1), y_pre, 1e-5, "decode outputs vs prefill")
    close(dec.state(st), pre.state(st), 1e-5, "decode state vs prefill state")


@pytest.mark.parametrize("kind", ["ss", "m2", "gdn"])
def test_active_extent_state(kind: str) -> None:
    """A schedule compiled for 8 rows run on its first 5 (``run_active``)
    gives the outputs and the final state of a schedule compiled for 5."""
    rng = np.random.default_rng(5)
    full_rows, n_rows, heads, p, n = 8, 5, 3, 2, 4
    if kind == "ss":
        x, dt, a, bb, cc = _ssm_inputs(rng, 1, full_rows, heads, heads, n, (heads, n))
        ins = dict(x=x, dt=dt, a=a, b=bb, c=cc)
        mk, st = (lambda s: _ss_graph(1, s, heads, n, True)), "h"
    elif kind == "m2":
        x, dt, a, bb, cc = _ssm_inputs(rng, 1, full_rows, heads * p, heads, n, (heads,))
        ins = dict(x=x, dt=dt, a=a, b=bb, c=cc)
        mk, st = (lambda s: _m2_graph(1, s, heads, p, n, True)), "h"
    else:
        ins = _gdn_inputs(rng, 1, full_rows, heads, n, np.float32)
        mk, st = (lambda s: _gdn_graph(1, s, heads, n, "f32")), "S"
    token = [k for k in ins if k != "a"]
    for device in ("host", "reference"):
        bucket = rlx.compile(mk(full_rows), device=device)
        assert bucket.set_active_extent(full_rows, token) == 1
        exact = rlx.compile(mk(n_rows), device=device)
        y_b = one(bucket.run_active(n_rows, **ins))[:, :n_rows]
        short = {
            k: (v if k == "a" else np.ascontiguousarray(v[:, :n_rows])) for k, v in ins.items()
        }
        y_e = one(exact.run(**short))
        close(y_b, y_e, 1e-5, f"{device} active outputs vs exact")
        close(bucket.state(st), exact.state(st), 1e-5, f"{device} active state vs exact")


RNN_CASES = [
    # kind, layers, bidir, carry, s, nin, hidden
    ("lstm", 1, False, False, 7, 5, 8),
    ("lstm", 2, True, True, 7, 3, 5),
    ("lstm", 3, False, True, 1, 12, 4),
    ("gru", 1, True, False, 65, 4, 6),
    ("gru", 2, True, True, 7, 3, 5),
    ("rnn", 2, False, True, 7, 6, 4),
    ("rnn_relu", 1, True, True, 7, 3, 5),
]


@pytest.mark.parametrize("kind,layers,bidir,carry,s,nin,hid", RNN_CASES)
def test_recurrent(
    kind: str, layers: int, bidir: bool, carry: bool, s: int, nin: int, hid: int
) -> None:
    rng = np.random.default_rng(layers * 100 + s)
    b, D = 2, 2 if bidir else 1
    base = kind.split("_")[0]
    G = {"lstm": 4, "gru": 3, "rnn": 1}[base]
    slots, in_w = layers * D, nin if layers == 1 else max(nin, D * hid)
    sc = 1.0 / np.sqrt(hid)
    w_ih = (rng.uniform(-sc, sc, (slots, G * hid, in_w))).astype(np.float32)
    w_hh = (rng.uniform(-sc, sc, (slots, G * hid, hid))).astype(np.float32)
    b1 = (rng.uniform(-sc, sc, (slots, G * hid))).astype(np.float32)
    b2 = (rng.uniform(-sc, sc, (slots, G * hid))).astype(np.float32)
    h0 = (rng.standard_normal((slots, b, hid)) * 0.5).astype(np.float32)
    c0 = (rng.standard_normal((slots, b, hid)) * 0.5).astype(np.float32)
    x = rng.standard_normal((b, s, nin)).astype(np.float32)
    g = rlx.Graph(kind)
    X = g.input("x", [b, s, nin])
    P = {
        k: g.param(k, list(v.shape))
        for k, v in dict(w_ih=w_ih, w_hh=w_hh, b1=b1, b2=b2, h0=h0, c0=c0).items()
        if k not in ({"b2"} if base == "lstm" else {"c0"} if base == "gru" else {"b2", "c0"})
    }
    kw = dict(hidden=hid, num_layers=layers, bidirectional=bidir, carry=carry, name="y")
    if base == "lstm":
        y = g.lstm(X, P["w_ih"], P["w_hh"], P["b1"], P["h0"], P["c0"], **kw)
    elif base == "gru":
        y = g.gru(X, P["w_ih"], P["w_hh"], P["b1"], P["b2"], P["h0"], **kw)
    else:
        y = g.rnn(X, P["w_ih"], P["w_hh"], P["b1"], P["h0"], relu=kind == "rnn_relu", **kw)
    g.outputs(y)
    params = dict(w_ih=w_ih, w_hh=w_hh, b1=b1, b2=b2, h0=h0, c0=c0)
    used = {k: params[k] for k in ("w_ih", "w_hh", "b1", "h0")}
    used.update({"lstm": {"c0": c0}, "gru": {"b2": b2}}.get(base, {}))
    want = np_rnn(
        base,
        x,
        w_ih,
        w_hh,
        b1,
        b2,
        h0,
        c0 if base == "lstm" else None,
        layers,
        bidir,
        carry,
        kind == "rnn_relu",
    )
    check(g, dict(x=x), used, native=[base], expect=want)


def _scan_body() -> rlx.Graph:
    """carry c [4], slice xt [4] → (c·w + tanh(xt), new·xt), w a constant."""
    body = rlx.Graph("body")
    c = body.input("c", [4])
    xt = body.input("xt", [4])
    w = body.constant([0.5, -1.0, 0.25, 2.0])
    new = body.add(body.mul(c, w), body.tanh(xt))
    body.outputs(new, body.mul(new, xt))
    return body


def _scan_graph(reverse: bool) -> rlx.Graph:
    g = rlx.Graph("scan")
    c0 = g.input("c0", [4])
    xs = g.input("xs", [6, 4])
    g.outputs(g.scan(_scan_body(), [c0], [xs], reverse=reverse, name="y"))
    return g


@pytest.mark.parametrize("reverse", [False, True])
def test_scan(reverse: bool) -> None:
    rng = np.random.default_rng(3)
    c0 = rng.standard_normal(4).astype(np.float32)
    xs = rng.standard_normal((6, 4)).astype(np.float32)
    w = np.array([0.5, -1.0, 0.25, 2.0])
    c = c0.astype(np.float64)
    ys = np.zeros((6, 4))
    for t in range(5, -1, -1) if reverse else range(6):
        c = c * w + np.tanh(xs[t])
        ys[t] = c * xs[t]
    check(_scan_graph(reverse), dict(c0=c0, xs=xs), native=SCAN_NATIVE, expect=ys)


def test_no_sequence_thunk_falls_back() -> None:
    """One graph with every sequence op: on host none of their thunks goes
    through the numpy fallback (``stats["fallback_by_thunk"]``)."""
    b, s, h, n, heads, p, hid = 1, 5, 3, 4, 2, 2, 3
    g = rlx.Graph("all")
    x = g.input("x", [b, s, h])
    a = g.input("a", [h, n])
    bb = g.input("b", [b, s, n])
    ss = g.selective_scan(x, x, a, bb, bb, state=g.state("h1", [b, h, n]), name="ss")
    xm = g.input("xm", [b, s, heads * p])
    dt = g.input("dt", [b, s, heads])
    am = g.input("am", [heads])
    m2 = g.mamba2(xm, dt, am, bb, bb, heads=heads, state=g.state("h2", [b, heads, p, n]), name="m2")
    q = g.input("q", [b, s, heads * n])
    gd = g.gated_delta_net(q, q, q, dt, dt, g.state("S", [b, heads, n, n]), heads=heads, name="gdn")
    w = {
        k: g.input(k, [1, G * hid, d])
        for k, G, d in [
            ("wl", 4, h),
            ("wg", 3, h),
            ("wr", 1, h),
            ("ul", 4, hid),
            ("ug", 3, hid),
            ("ur", 1, hid),
        ]
    }
    bias = {k: g.input(k, [1, G * hid]) for k, G in [("bl", 4), ("bg", 3), ("br", 1)]}
    h0 = g.input("h0", [1, b, hid])
    ls = g.lstm(x, w["wl"], w["ul"], bias["bl"], h0, h0, carry=True, name="lstm")
    gr = g.gru(x, w["wg"], w["ug"], bias["bg"], bias["bg"], h0, name="gru")
    rn = g.rnn(x, w["wr"], w["ur"], bias["br"], h0, name="rnn")
    sc = g.scan(_scan_body(), [g.input("c0", [4])], [g.input("xs", [6, 4])], name="scan")
    g.outputs(ss, m2, gd, ls, gr, rn, sc)
    exe = rlx.compile(g, device="host")
    rng = np.random.default_rng(0)
    ins = {
        k: (rng.standard_normal(v.shape) * 0.3).astype(np.float32) for k, v in exe.inputs.items()
    }
    exe.run(**ins)
    fb = exe.stats["fallback_by_thunk"]
    names = SEQ_THUNKS + SCAN_NATIVE
    assert all(exe.stats["by_thunk"].get(t, 0) == 1 for t in names), exe.stats["by_thunk"]
    assert not any(fb.get(t, 0) for t in names), fb


def test_dtype_and_state_errors() -> None:
    """f16 operands of a non-GDN sequence op are refused at compile naming the
    op and dtype; the SSM state operand must be a State leaf (verifier)."""
    g = rlx.Graph("h")
    x, a = g.input("x", [1, 3, 2], "f16"), g.input("a", [2, 4], "f16")
    bb = g.input("b", [1, 3, 4], "f16")
    g.outputs(g.selective_scan(x, x, a, bb, bb))
    with pytest.raises(rlx.UnsupportedOpError, match=r"selective_scan.*f16"):
        rlx.compile(g, device="host")
    g = rlx.Graph("s")
    x, a = g.input("x", [1, 3, 2]), g.input("a", [2, 4])
    bb = g.input("b", [1, 3, 4])
    g.outputs(g.selective_scan(x, x, a, bb, bb, state=g.input("h", [1, 2, 4])))
    with pytest.raises(rlx.RlxError, match="State leaf"):
        rlx.compile(g, device="host")
