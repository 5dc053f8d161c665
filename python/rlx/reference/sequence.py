"""Recurrences: Mamba selective scan, Mamba-2 SSD, Gated DeltaNet, LSTM, GRU, RNN.

All computation is float64 on widened operands, rounded once on store. The
pure functions (``*_fn``) take and return numpy arrays; the thunk wrappers
read and write the arena. ``scan_host`` / ``host_op`` live in
:mod:`rlx.reference.interp`.

Recurrent nets (LSTM / GRU / RNN) use the layout documented once on the IR
op ``Lstm`` (``crates/rlx-ir/src/op/mod.rs``): padded
``w_ih [L·D, G·hidden, in_w]`` (``in_w = in`` for one layer, else
``max(in, D·hidden)``; layer 0 reads the first ``in`` columns, later layers
the first ``D·hidden``), ``w_hh [L·D, G·hidden, hidden]``, biases
``[L·D, G·hidden]`` (LSTM / RNN: ``b_ih + b_hh``; GRU keeps both because
``b_hn`` sits inside ``r ⊙ (·)``), ``h0`` / ``c0 [L·D, batch, hidden]``,
output ``[batch, seq, D·hidden]`` and, with ``carry``, ``L`` rows of final h
(layer 0 first) then for the LSTM ``L`` rows of final c appended along the
sequence axis.

The SSM scans take an optional recurrent state (``state`` in the thunk):
the scan starts from it and writes the final state back.
"""

from __future__ import annotations

import numpy as np

from rlx.reference import Memory, reference


def _sig(x: np.ndarray):
    return 1.0 / (1.0 + np.exp(-x))


def _f32(mem: Memory, off: int, shape: tuple | int) -> np.ndarray:
    return mem.view(off, shape, np.float32).astype(np.float64)


# -------------------------------------------------------------- state spaces


def selective_scan_fn(
    x: np.ndarray,
    delta: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    state: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Mamba selective scan (Gu & Dao, "Mamba: Linear-Time Sequence Modeling with
    Selective State Spaces", 2023, Alg. 2, recurrent form):

    ``h_t = exp(Δ_t·A) ⊙ h_{t−1} + (Δ_t·x_t)·B_t``, ``y_t = h_t · C_t``.
    Shapes: x, Δ ``[b, s, h]``, A ``[h, n]``, B, C ``[b, s, n]``, initial
    state ``[b, h, n]`` (zero when None) → ``(y [b, s, h], final state)``.
    Δ is used as given (any softplus / bias is applied upstream); no D skip."""
    bsz, s, hid = x.shape
    h = np.zeros((bsz, hid, a.shape[1])) if state is None else state.astype(np.float64)
    y = np.empty((bsz, s, hid))
    for t in range(s):
        dt = delta[:, t, :, None]
        h = np.exp(dt * a[None]) * h + (dt * x[:, t, :, None]) * b[:, t, None, :]
        y[:, t] = np.einsum("bhn,bn->bh", h, c[:, t])
    return y, h


def mamba2_fn(
    x: np.ndarray,
    dt: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray,
    heads: int,
    head_dim: int,
    state: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Mamba-2 SSD, recurrent form (Dao & Gu, "Transformers are SSMs", ICML 2024), one
    B/C group, scalar A per head:

    ``h_t[hd] = exp(dt_t[hd]·a[hd])·h_{t−1}[hd] + dt_t[hd]·x_t[hd] ⊗ B_t``,
    ``y_t[hd] = h_t[hd] · C_t``; x ``[b, s, heads·p]``, dt ``[b, s, heads]``,
    a ``[heads]``, B, C ``[b, s, n]``, initial state ``[b, heads, p, n]``
    (zero when None). Returns ``(y, final state)``."""
    bsz, s, _ = x.shape
    n = b.shape[-1]
    xs = x.reshape(bsz, s, heads, head_dim)
    h = (
        np.zeros((bsz, heads, head_dim, n))
        if state is None
        else state.astype(np.float64).reshape(bsz, heads, head_dim, n)
    )
    y = np.empty((bsz, s, heads, head_dim))
    for t in range(s):
        d = dt[:, t, :, None, None]
        h = (
            np.exp(d * a[None, :, None, None]) * h
            + d * xs[:, t, :, :, None] * b[:, t, None, None, :]
        )
        y[:, t] = np.einsum("bhpn,bn->bhp", h, c[:, t])
    return y.reshape(bsz, s, heads * head_dim), h


def gated_delta_net_fn(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    g: np.ndarray,
    beta: np.ndarray,
    state: np.ndarray,
    heads: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Gated DeltaNet (Yang, Kautz & Hatamizadeh, "Gated Delta Networks: Improving
    Mamba2 with Delta Rule", 2024), recurrent form:

    ``S_t = S_{t−1}·(α_t (I − β_t k_t k_tᵀ)) + β_t v_t k_tᵀ`` with ``α_t = exp(g_t)``,
    ``o_t = S_t q_t``. ``S[i, j]``: row ``i`` indexes the value dim, column ``j``
    the key dim. q, k, v ``[b, s, heads·n]`` are used as given (no L2
    normalisation or 1/√n scaling here), g, β ``[b, s, heads]``, state
    ``[b, heads, n, n]``. Returns ``(o, final state)``."""
    bsz, s, hn = q.shape
    n = hn // heads
    sh = lambda z: z.reshape(bsz, s, heads, n)  # noqa: E731
    q, k, v = sh(q), sh(k), sh(v)
    st = state.astype(np.float64).copy()
    o = np.empty((bsz, s, heads, n))
    for t in range(s):
        al = np.exp(g[:, t])[..., None, None]
        be = beta[:, t][..., None, None]
        kt, vt = k[:, t], v[:, t]
        sk = np.einsum("bhij,bhj->bhi", st, kt)
        st = (
            al * (st - be * sk[..., :, None] * kt[..., None, :])
            + be * vt[..., :, None] * kt[..., None, :]
        )
        o[:, t] = np.einsum("bhij,bhj->bhi", st, q[:, t])
    return o.reshape(bsz, s, hn), st


@reference("selective_scan")
def selective_scan(t: dict, mem: Memory) -> None:
    """Thunk wrapper of :func:`selective_scan_fn` (f32)."""
    b, s, h, n = t["batch"], t["seq"], t["hidden"], t["state_size"]
    st = t.get("state")
    y, fin = selective_scan_fn(
        _f32(mem, t["x"], (b, s, h)),
        _f32(mem, t["delta"], (b, s, h)),
        _f32(mem, t["a"], (h, n)),
        _f32(mem, t["b"], (b, s, n)),
        _f32(mem, t["c"], (b, s, n)),
        None if st is None else _f32(mem, st, (b, h, n)),
    )
    mem.view(t["dst"], (b, s, h), np.float32)[...] = y
    if st is not None:
        mem.view(st, (b, h, n), np.float32)[...] = fin


@reference("mamba2")
def mamba2(t: dict, mem: Memory) -> None:
    """Thunk wrapper of :func:`mamba2_fn` (f32)."""
    b, s, hd, p, n = t["batch"], t["seq"], t["heads"], t["head_dim"], t["state_size"]
    st = t.get("state")
    y, fin = mamba2_fn(
        _f32(mem, t["x"], (b, s, hd * p)),
        _f32(mem, t["dt"], (b, s, hd)),
        _f32(mem, t["a"], hd),
        _f32(mem, t["b"], (b, s, n)),
        _f32(mem, t["c"], (b, s, n)),
        hd,
        p,
        None if st is None else _f32(mem, st, (b, hd, p, n)),
    )
    mem.view(t["dst"], (b, s, hd * p), np.float32)[...] = y
    if st is not None:
        mem.view(st, (b, hd, p, n), np.float32)[...] = fin


@reference("gated_delta_net")
def gated_delta_net(t: dict, mem: Memory) -> None:
    """Thunk wrapper of :func:`gated_delta_net_fn`. With ``f16`` every operand
    (q, k, v, g, β, state, dst) is float16; the state is read once, carried in
    float64 across the sequence and written back (rounded) once at the end."""
    b, s, h, n = t["batch"], t["seq"], t["heads"], t["state_size"]
    dt = np.float16 if t.get("f16") else np.float32
    rd = lambda off, shp: mem.view(off, shp, dt).astype(np.float64)  # noqa: E731
    st_view = mem.view(t["state"], (b, h, n, n), dt)
    o, st = gated_delta_net_fn(
        rd(t["q"], (b, s, h * n)),
        rd(t["k"], (b, s, h * n)),
        rd(t["v"], (b, s, h * n)),
        rd(t["g"], (b, s, h)),
        rd(t["beta"], (b, s, h)),
        st_view.astype(np.float64),
        h,
    )
    mem.view(t["dst"], (b, s, h * n), dt)[...] = o
    st_view[...] = st


# ------------------------------------------------------------ recurrent nets

_GATES = {"lstm": 4, "gru": 3, "rnn": 1}


def _cell(
    kind: str,
    xw: np.ndarray,
    h: np.ndarray,
    c: np.ndarray | None,
    w_hh: np.ndarray,
    b_hh: np.ndarray | None,
    relu: bool,
):
    """One step; ``xw`` already holds ``x W_ihᵀ + b`` (LSTM/RNN: the summed bias)."""
    hw = h @ w_hh.T
    if kind == "lstm":
        i, f, g, o = np.split(xw + hw, 4, axis=-1)
        c = _sig(f) * c + _sig(i) * np.tanh(g)
        return _sig(o) * np.tanh(c), c
    if kind == "gru":
        hw = hw + b_hh
        xr, xz, xn = np.split(xw, 3, axis=-1)
        hr, hz, hn = np.split(hw, 3, axis=-1)
        r, z = _sig(xr + hr), _sig(xz + hz)
        nn_ = np.tanh(xn + r * hn)
        return (1.0 - z) * nn_ + z * h, c
    pre = xw + hw
    return (np.maximum(pre, 0.0) if relu else np.tanh(pre)), c


def recurrent_fn(
    kind: str,
    x: np.ndarray,
    w_ih: np.ndarray,
    w_hh: np.ndarray,
    b_ih: np.ndarray,
    b_hh: np.ndarray | None,
    h0: np.ndarray,
    c0: np.ndarray | None,
    hidden: int,
    layers: int,
    bidir: bool,
    carry: bool,
    relu: bool = False,
) -> np.ndarray:
    """LSTM / GRU / Elman RNN with PyTorch semantics and the layout of the module doc.

    ``w_ih`` is the padded ``[L·D, G·hidden, in_w]``; ``b_hh`` is only used by
    the GRU; ``c0`` only by the LSTM. Returns ``[b, s (+ carry rows), D·hidden]``."""
    bsz, s, _ = x.shape
    D, H = 2 if bidir else 1, hidden
    inp = x
    fin_h, fin_c = [], []
    for layer in range(layers):
        in_l = inp.shape[-1]
        outs, hs, cs = [], [], []
        for d in range(D):
            li = layer * D + d
            w = w_ih[li, :, :in_l]
            xw = inp @ w.T + b_ih[li]
            h = h0[li]
            c = c0[li] if c0 is not None else None
            out = np.empty((bsz, s, H))
            steps = range(s - 1, -1, -1) if d == 1 else range(s)
            for tt in steps:
                h, c = _cell(
                    kind, xw[:, tt], h, c, w_hh[li], None if b_hh is None else b_hh[li], relu
                )
                out[:, tt] = h
            outs.append(out)
            hs.append(h)
            cs.append(c)
        inp = np.concatenate(outs, axis=-1)
        fin_h.append(np.concatenate(hs, axis=-1))
        if kind == "lstm":
            fin_c.append(np.concatenate(cs, axis=-1))
    if not carry:
        return inp
    rows = [inp] + [h[:, None] for h in fin_h] + [c[:, None] for c in fin_c]
    return np.concatenate(rows, axis=1)


def _recurrent_thunk(t: dict, mem: Memory, kind: str) -> None:
    b, s, nin, H, L = t["batch"], t["seq"], t["input_size"], t["hidden"], t["num_layers"]
    D = 2 if t["bidirectional"] else 1
    G = _GATES[kind]
    in_w = nin if L == 1 else max(nin, D * H)
    x = _f32(mem, t["x"], (b, s, nin))
    w_ih = _f32(mem, t["w_ih"], (L * D, G * H, in_w))
    w_hh = _f32(mem, t["w_hh"], (L * D, G * H, H))
    if kind == "gru":
        b_ih = _f32(mem, t["b_ih"], (L * D, G * H))
        b_hh = _f32(mem, t["b_hh"], (L * D, G * H))
    else:
        b_ih, b_hh = _f32(mem, t["bias"], (L * D, G * H)), None
    h0 = _f32(mem, t["h0"], (L * D, b, H))
    c0 = _f32(mem, t["c0"], (L * D, b, H)) if kind == "lstm" else None
    y = recurrent_fn(
        kind,
        x,
        w_ih,
        w_hh,
        b_ih,
        b_hh,
        h0,
        c0,
        H,
        L,
        t["bidirectional"],
        t["carry"],
        t.get("relu", False),
    )
    mem.view(t["dst"], y.shape, np.float32)[...] = y


@reference("lstm")
def lstm(t: dict, mem: Memory) -> None:
    """LSTM (Hochreiter & Schmidhuber 1997; PyTorch ``nn.LSTM`` gate order i, f, g, o):
    ``c' = σ(f)c + σ(i)tanh(g)``, ``h' = σ(o)tanh(c')``."""
    _recurrent_thunk(t, mem, "lstm")


@reference("gru")
def gru(t: dict, mem: Memory) -> None:
    """GRU (Cho et al. 2014; PyTorch ``nn.GRU`` order r, z, n):
    ``n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))``, ``h' = (1 − z) n + z h``."""
    _recurrent_thunk(t, mem, "gru")


@reference("rnn")
def rnn(t: dict, mem: Memory) -> None:
    """Elman RNN: ``h' = tanh(W_ih x + W_hh h + b)`` (ReLU when ``relu``)."""
    _recurrent_thunk(t, mem, "rnn")
