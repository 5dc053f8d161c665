"""Recurrences against explicit scalar / per-step loops written from the papers'
equations (float64 loops; f32 buffers at rtol/atol 1e-5, f16 at 1e-2)."""

from __future__ import annotations

import numpy as np
import pytest
from _mem2 import Arena
from rlx.reference import run_thunk


def sig(v: float) -> float:
    return 1.0 / (1.0 + np.exp(-v))


def test_selective_scan() -> None:
    rng = np.random.default_rng(0)
    b, s, h, n = 2, 5, 3, 4
    x = rng.standard_normal((b, s, h)).astype(np.float32)
    dt = rng.uniform(0.01, 0.5, (b, s, h)).astype(np.float32)
    A = -rng.uniform(0.1, 2, (h, n)).astype(np.float32)
    B = rng.standard_normal((b, s, n)).astype(np.float32)
    C = rng.standard_normal((b, s, n)).astype(np.float32)
    want = np.zeros((b, s, h))
    for bi in range(b):
        for hi in range(h):
            st = np.zeros(n)
            for t in range(s):
                for ni in range(n):
                    st[ni] = (
                        np.exp(dt[bi, t, hi] * A[hi, ni]) * st[ni]
                        + dt[bi, t, hi] * B[bi, t, ni] * x[bi, t, hi]
                    )
                want[bi, t, hi] = sum(C[bi, t, ni] * st[ni] for ni in range(n))
    a = Arena()
    t = dict(
        name="selective_scan",
        x=a.put(x),
        delta=a.put(dt),
        a=a.put(A),
        b=a.put(B),
        c=a.put(C),
        dst=a.out((b, s, h)),
        batch=b,
        seq=s,
        hidden=h,
        state_size=n,
    )
    run_thunk(t, a.build())
    np.testing.assert_allclose(a.read(t["dst"], (b, s, h)), want, rtol=1e-5, atol=1e-5)


def test_mamba2() -> None:
    rng = np.random.default_rng(1)
    b, s, H, p, n = 2, 4, 3, 2, 5
    x = rng.standard_normal((b, s, H * p)).astype(np.float32)
    dt = rng.uniform(0.01, 0.5, (b, s, H)).astype(np.float32)
    A = -rng.uniform(0.1, 2, H).astype(np.float32)
    B = rng.standard_normal((b, s, n)).astype(np.float32)
    C = rng.standard_normal((b, s, n)).astype(np.float32)
    want = np.zeros((b, s, H * p))
    for bi in range(b):
        for hd in range(H):
            st = np.zeros((p, n))
            for t in range(s):
                d = float(dt[bi, t, hd])
                xv = x[bi, t, hd * p : (hd + 1) * p].astype(np.float64)
                st = np.exp(d * A[hd]) * st + d * np.outer(xv, B[bi, t])
                want[bi, t, hd * p : (hd + 1) * p] = st @ C[bi, t]
    a = Arena()
    t = dict(
        name="mamba2",
        x=a.put(x),
        dt=a.put(dt),
        a=a.put(A),
        b=a.put(B),
        c=a.put(C),
        dst=a.out((b, s, H * p)),
        batch=b,
        seq=s,
        heads=H,
        head_dim=p,
        state_size=n,
    )
    run_thunk(t, a.build())
    np.testing.assert_allclose(a.read(t["dst"], (b, s, H * p)), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["selective_scan", "mamba2"])
def test_scan_state_in_out(kind: str) -> None:
    """With ``state`` the scan starts from it and writes the final state:
    running s steps at once equals running them in two pieces through the
    state, and equals a zero-state run when the state starts at zero."""
    rng = np.random.default_rng(4)
    b, s, h, n, H, p = 2, 5, 3, 4, 2, 3
    ss = kind == "selective_scan"
    width = h if ss else H * p
    x = rng.standard_normal((b, s, width)).astype(np.float32)
    dt = rng.uniform(0.01, 0.5, (b, s, h if ss else H)).astype(np.float32)
    A = -rng.uniform(0.1, 2, (h, n) if ss else H).astype(np.float32)
    B = rng.standard_normal((b, s, n)).astype(np.float32)
    C = rng.standard_normal((b, s, n)).astype(np.float32)
    st_shape = (b, h, n) if ss else (b, H, p, n)

    def run(lo: int, hi: int, state: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        a = Arena()
        t = dict(
            name=kind,
            x=a.put(np.ascontiguousarray(x[:, lo:hi])),
            a=a.put(A),
            b=a.put(np.ascontiguousarray(B[:, lo:hi])),
            c=a.put(np.ascontiguousarray(C[:, lo:hi])),
            state=None if state is None else a.put(state),
            dst=a.out((b, hi - lo, width)),
            batch=b,
            seq=hi - lo,
            state_size=n,
        )
        t["delta" if ss else "dt"] = a.put(np.ascontiguousarray(dt[:, lo:hi]))
        t.update({"hidden": h} if ss else {"heads": H, "head_dim": p})
        run_thunk(t, a.build())
        fin = None if state is None else a.read(t["state"], st_shape)
        return a.read(t["dst"], (b, hi - lo, width)), fin

    y_ref, _ = run(0, s, None)
    y0, s0 = run(0, s, np.zeros(st_shape, np.float32))
    np.testing.assert_array_equal(y0, y_ref)
    y1, s1 = run(0, 2, np.zeros(st_shape, np.float32))
    y2, s2 = run(2, s, s1)
    np.testing.assert_allclose(np.concatenate([y1, y2], 1), y_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s2, s0, rtol=1e-5, atol=1e-5)
    # the final state is the explicit recurrence's
    want = np.zeros(st_shape)
    for t_ in range(s):
        if ss:
            d = dt[:, t_, :, None].astype(np.float64)
            want = np.exp(d * A[None]) * want + d * x[:, t_, :, None] * B[:, t_, None, :]
        else:
            d = dt[:, t_, :, None, None].astype(np.float64)
            xs = x[:, t_].reshape(b, H, p, 1)
            want = np.exp(d * A[None, :, None, None]) * want + d * xs * B[:, t_, None, None, :]
    np.testing.assert_allclose(s0, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("f16", [False, True])
def test_gated_delta_net(f16: bool) -> None:
    rng = np.random.default_rng(2)
    b, s, H, n = 2, 4, 2, 3
    dt = np.float16 if f16 else np.float32
    q, k, v = (rng.standard_normal((b, s, H * n)).astype(dt) for _ in range(3))
    g = (-rng.uniform(0.01, 0.5, (b, s, H))).astype(dt)
    beta = rng.uniform(0.1, 0.9, (b, s, H)).astype(dt)
    S0 = (rng.standard_normal((b, H, n, n)) * 0.1).astype(dt)
    want_o = np.zeros((b, s, H * n))
    want_S = np.zeros((b, H, n, n))
    for bi in range(b):
        for hd in range(H):
            S = S0[bi, hd].astype(np.float64)
            sl = slice(hd * n, (hd + 1) * n)
            for t in range(s):
                kt, vt, qt = (z[bi, t, sl].astype(np.float64) for z in (k, v, q))
                al, be = np.exp(float(g[bi, t, hd])), float(beta[bi, t, hd])
                S = S @ (al * (np.eye(n) - be * np.outer(kt, kt))) + be * np.outer(vt, kt)
                want_o[bi, t, sl] = S @ qt
            want_S[bi, hd] = S
    a = Arena()
    so = a.put(S0)
    t = dict(
        name="gated_delta_net",
        q=a.put(q),
        k=a.put(k),
        v=a.put(v),
        g=a.put(g),
        beta=a.put(beta),
        state=so,
        dst=a.out((b, s, H * n), dt),
        batch=b,
        seq=s,
        heads=H,
        state_size=n,
        f16=f16,
    )
    run_thunk(t, a.build())
    tol = 1e-2 if f16 else 1e-5
    np.testing.assert_allclose(a.read(t["dst"], (b, s, H * n), dt), want_o, rtol=tol, atol=tol)
    np.testing.assert_allclose(a.read(so, (b, H, n, n), dt), want_S, rtol=tol, atol=tol)


# ---- LSTM / GRU / RNN: per-step loops with explicit per-gate matrices ----------------


def _lstm_dir(
    x: np.ndarray,
    W: np.ndarray,
    U: np.ndarray,
    bias: np.ndarray,
    h: np.ndarray,
    c: np.ndarray,
    rev: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    H = h.shape[-1]
    out = np.zeros((x.shape[0], x.shape[1], H))
    order = range(x.shape[1] - 1, -1, -1) if rev else range(x.shape[1])
    for t in order:
        pre = x[:, t] @ W.T + h @ U.T + bias
        i, f, g, o = (pre[:, j * H : (j + 1) * H] for j in range(4))
        c = sig(f) * c + sig(i) * np.tanh(g)
        h = sig(o) * np.tanh(c)
        out[:, t] = h
    return out, h, c


def _gru_dir(
    x: np.ndarray,
    W: np.ndarray,
    U: np.ndarray,
    bi: np.ndarray,
    bh: np.ndarray,
    h: np.ndarray,
    rev: bool,
) -> tuple[np.ndarray, np.ndarray]:
    H = h.shape[-1]
    out = np.zeros((x.shape[0], x.shape[1], H))
    order = range(x.shape[1] - 1, -1, -1) if rev else range(x.shape[1])
    for t in order:
        gi, gh = x[:, t] @ W.T + bi, h @ U.T + bh
        r = sig(gi[:, :H] + gh[:, :H])
        z = sig(gi[:, H : 2 * H] + gh[:, H : 2 * H])
        nn_ = np.tanh(gi[:, 2 * H :] + r * gh[:, 2 * H :])
        h = (1 - z) * nn_ + z * h
        out[:, t] = h
    return out, h


def _rnn_dir(
    x: np.ndarray,
    W: np.ndarray,
    U: np.ndarray,
    bias: np.ndarray,
    h: np.ndarray,
    rev: bool,
    relu: bool,
) -> tuple[np.ndarray, np.ndarray]:
    out = np.zeros((x.shape[0], x.shape[1], h.shape[-1]))
    order = range(x.shape[1] - 1, -1, -1) if rev else range(x.shape[1])
    for t in order:
        pre = x[:, t] @ W.T + h @ U.T + bias
        h = np.maximum(pre, 0) if relu else np.tanh(pre)
        out[:, t] = h
    return out, h


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn", "rnn_relu"])
@pytest.mark.parametrize(
    "layers,bidir,carry,nin",
    [(1, False, False, 3), (2, True, True, 3), (2, False, True, 3), (3, True, True, 12)],
)
def test_recurrent(kind: str, layers: int, bidir: bool, carry: bool, nin: int) -> None:
    """The IR layout: padded ``w_ih [L·D, G·H, in_w]`` (padding NaN: never
    read) and ``L`` carry rows per state."""
    rng = np.random.default_rng(3)
    b, s, H = 2, 4, 5
    D = 2 if bidir else 1
    G = {"lstm": 4, "gru": 3}.get(kind, 1)
    x = rng.standard_normal((b, s, nin)).astype(np.float32)
    Ws = [
        (rng.standard_normal((G * H, nin if l_ == 0 else D * H)) * 0.4).astype(np.float32)
        for l_ in range(layers)
        for _ in range(D)
    ]
    Us = (rng.standard_normal((layers * D, G * H, H)) * 0.4).astype(np.float32)
    b1 = (rng.standard_normal((layers * D, G * H)) * 0.2).astype(np.float32)
    b2 = (rng.standard_normal((layers * D, G * H)) * 0.2).astype(np.float32)
    h0 = (rng.standard_normal((layers * D, b, H)) * 0.5).astype(np.float32)
    c0 = (rng.standard_normal((layers * D, b, H)) * 0.5).astype(np.float32)
    inp = x.astype(np.float64)
    fh, fc = [], []
    for layer in range(layers):
        outs, hs, cs = [], [], []
        for d in range(D):
            li = layer * D + d
            if kind == "lstm":
                o, h, c = _lstm_dir(inp, Ws[li], Us[li], b1[li], h0[li], c0[li], d == 1)
                cs.append(c)
            elif kind == "gru":
                o, h = _gru_dir(inp, Ws[li], Us[li], b1[li], b2[li], h0[li], d == 1)
            else:
                o, h = _rnn_dir(inp, Ws[li], Us[li], b1[li], h0[li], d == 1, kind == "rnn_relu")
            outs.append(o)
            hs.append(h)
        inp = np.concatenate(outs, -1)
        fh.append(np.concatenate(hs, -1))
        if cs:
            fc.append(np.concatenate(cs, -1))
    want = inp
    if carry:
        want = np.concatenate([inp] + [h[:, None] for h in fh] + [c[:, None] for c in fc], 1)
    in_w = nin if layers == 1 else max(nin, D * H)
    w_pad = np.full((layers * D, G * H, in_w), np.nan, np.float32)
    for li, w in enumerate(Ws):
        w_pad[li, :, : w.shape[1]] = w
    a = Arena()
    t = dict(
        name=kind.split("_")[0],
        x=a.put(x),
        w_ih=a.put(w_pad),
        w_hh=a.put(Us),
        h0=a.put(h0),
        batch=b,
        seq=s,
        input_size=nin,
        hidden=H,
        num_layers=layers,
        bidirectional=bidir,
        carry=carry,
        relu=kind == "rnn_relu",
    )
    if kind == "gru":
        t.update(b_ih=a.put(b1), b_hh=a.put(b2))
    else:
        t["bias"] = a.put(b1)
    if kind == "lstm":
        t["c0"] = a.put(c0)
    t["dst"] = a.out(want.shape)
    run_thunk(t, a.build())
    np.testing.assert_allclose(a.read(t["dst"], want.shape), want, rtol=1e-5, atol=1e-5)
