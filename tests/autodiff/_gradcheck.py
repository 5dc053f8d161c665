"""Gradient checking helpers: a float64 evaluator of rlx graphs and central
finite differences.

The evaluator walks the IR node by node in float64: ops the numpy
reference interprets (``rlx.reference.hostops.OPS``, which includes the
``*_backward`` ops) run there; the forward ops it lacks use the textbook
formulas below (written from the op docs, not from rlx's kernels).
"""

from __future__ import annotations

import json
import weakref
from typing import Any, Callable

import numpy as np
import rlx
from rlx.reference.attention import rotate, sdpa
from rlx.reference.hostops import OPS
from rlx.reference.interp import eval_op

Arr = np.ndarray


def _ln(x: Arr, eps: float) -> Arr:
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)


def _rms(x: Arr, eps: float) -> Arr:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)


def _attention(op: dict, xs: list[Arr]) -> Arr:
    q, k, v = xs[:3]
    h, d = op["heads"], op["head_dim"]
    bshd = op["layout"] == "bshd"
    if bshd:
        b, s, _ = q.shape
        q = q.reshape(b, s, h, d).transpose(0, 2, 1, 3)
        kvh = k.shape[-1] // d
        k = k.reshape(b, -1, kvh, d).transpose(0, 2, 1, 3)
        v = v.reshape(b, -1, kvh, d).transpose(0, 2, 1, 3)
    s, kv = q.shape[2], k.shape[2]
    i = np.arange(s)[:, None] + (kv - s)
    j = np.arange(kv)[None, :]
    mask = op["mask"]
    visible = None
    bias = None
    if mask == "causal":
        visible = j <= i
    elif mask == "sliding_window":
        visible = (j <= i) & (i - j <= op["window"])
    elif mask == "custom":
        visible = xs[3] != 0
    elif mask == "bias":
        bias = xs[3]
    scale = op["score_scale"] if op.get("score_scale") is not None else 1.0 / np.sqrt(d)
    o = sdpa(q, k, v, scale, op.get("softcap") or 0.0, visible, bias)
    if bshd:
        o = o.transpose(0, 2, 1, 3).reshape(xs[0].shape)
    return o


def _rope(op: dict, xs: list[Arr]) -> Arr:
    x, cos, sin = xs
    b, s, hid = x.shape
    d, nr = op["head_dim"], op["n_rot"]
    xh = x.reshape(b, s, hid // d, d).copy()
    c = cos.reshape(b, s, 1, -1) if cos.shape[0] == b * s and b * s != s else cos[None, :, None, :]
    sn = sin.reshape(b, s, 1, -1) if sin.shape[0] == b * s and b * s != s else sin[None, :, None, :]
    xh[..., :nr] = rotate(xh[..., :nr], c, sn, op["kind"] == "interleaved")
    return xh.reshape(x.shape)


def _fused_block(op: dict, xs: list[Arr]) -> Arr:
    x, w_qkv, w_out = xs[:3]
    h, d = op["heads"], op["head_dim"]
    inner = h * d
    qkv = x @ w_qkv
    q, k, v = (qkv[..., i * inner : (i + 1) * inner] for i in range(3))
    extra = xs[3:]
    if op["rope"]:
        ro = {"head_dim": d, "n_rot": d, "kind": "neox"}
        q, k = _rope(ro, [q, extra[0], extra[1]]), _rope(ro, [k, extra[0], extra[1]])
        extra = extra[2:]
    at = {"heads": h, "head_dim": d, "layout": "bshd", "mask": op["mask"], "window": 0}
    return _attention(at, [q, k, v, *extra]) @ w_out


def _conv2d(op: dict, xs: list[Arr]) -> Arr:
    x, w = xs[0], xs[1]
    (sh, sw), (ph, pw), (dh, dw) = op["stride"], op["padding"], op["dilation"]
    groups = op["groups"]
    n, ci, h, wi = x.shape
    co, cig, kh, kw = w.shape
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (wi + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = np.zeros((n, co, ho, wo))
    cog = co // groups
    for gi in range(groups):
        xs_g = xp[:, gi * cig : (gi + 1) * cig]
        wg = w[gi * cog : (gi + 1) * cog]
        for ky in range(kh):
            for kx in range(kw):
                patch = xs_g[:, :, ky * dh : ky * dh + (ho - 1) * sh + 1 : sh,
                             kx * dw : kx * dw + (wo - 1) * sw + 1 : sw]  # fmt: skip
                out[:, gi * cog : (gi + 1) * cog] += np.einsum(
                    "nchw,oc->nohw", patch, wg[:, :, ky, kx]
                )
    if len(xs) > 2:
        out += xs[2][None, :, None, None]
    return out


def _conv_t(op: dict, xs: list[Arr]) -> Arr:
    x, w = xs[0], xs[1]
    (sh, sw), (ph, pw), (dh, dw) = op["stride"], op["padding"], op["dilation"]
    (oph, opw), groups = op["output_padding"], op["groups"]
    n, ci, h, wi = x.shape
    _, cog, kh, kw = w.shape
    ho = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    wo = (wi - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    full = np.zeros((n, cog * groups, ho + 2 * ph + sh, wo + 2 * pw + sw))
    cig = ci // groups
    for gi in range(groups):
        xg = x[:, gi * cig : (gi + 1) * cig]
        for ky in range(kh):
            for kx in range(kw):
                contrib = np.einsum("nchw,co->nohw", xg, w[gi * cig : (gi + 1) * cig, :, ky, kx])
                full[:, gi * cog : (gi + 1) * cog,
                     ky * dh : ky * dh + (h - 1) * sh + 1 : sh,
                     kx * dw : kx * dw + (wi - 1) * sw + 1 : sw] += contrib  # fmt: skip
    out = full[:, :, ph : ph + ho, pw : pw + wo]
    if len(xs) > 2:
        out = out + xs[2][None, :, None, None]
    return out


def _max_pool(op: dict, xs: list[Arr]) -> Arr:
    (x,) = xs
    (kh, kw), (sh, sw), (ph, pw) = op["kernel"], op["stride"], op["padding"]
    n, c, h, w = x.shape
    ho = (h + 2 * ph - kh) // sh + 1
    wo = (w + 2 * pw - kw) // sw + 1
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=-np.inf)
    out = np.full((n, c, ho, wo), -np.inf)
    for ky in range(kh):
        for kx in range(kw):
            out = np.maximum(
                out, xp[:, :, ky : ky + (ho - 1) * sh + 1 : sh, kx : kx + (wo - 1) * sw + 1 : sw]
            )
    return out


def _avg_pool(op: dict, xs: list[Arr]) -> Arr:
    (x,) = xs
    (kh, kw), (sh, sw), (ph, pw) = op["kernel"], op["stride"], op["padding"]
    n, c, h, w = x.shape
    ho = (h + 2 * ph - kh) // sh + 1
    wo = (w + 2 * pw - kw) // sw + 1
    out = np.zeros((n, c, ho, wo))
    for i in range(ho):
        for j in range(wo):
            y0, x0 = max(i * sh - ph, 0), max(j * sw - pw, 0)
            y1, x1 = min(i * sh - ph + kh, h), min(j * sw - pw + kw, w)
            out[:, :, i, j] = x[:, :, y0:y1, x0:x1].mean((2, 3))
    return out


def _sce(op: dict, xs: list[Arr]) -> Arr:
    z, lab = xs
    m = z.max(-1, keepdims=True)
    logp = z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))
    if lab.dtype.kind in "iu":
        return -logp[np.arange(z.shape[0]), lab.astype(np.int64)]
    return -(lab * logp).sum(-1)


def _scatter_add(op: dict, xs: list[Arr]) -> Arr:
    u, idx = xs
    out = np.zeros((op["out_dim"], *u.shape[1:]))
    np.add.at(out, idx.astype(np.int64), u)
    return out


def _gather_nd(op: dict, xs: list[Arr]) -> Arr:
    data, idx = xs
    idx = idx.astype(np.int64)
    q = idx.shape[-1]
    lead = np.array(data.shape[:q])
    idx = np.where(idx < 0, idx + lead, idx)
    return data[tuple(np.moveaxis(idx, -1, 0))]


def _gather_elements(op: dict, xs: list[Arr]) -> Arr:
    data, idx = xs
    ax = op["axis"] % data.ndim
    idx = idx.astype(np.int64)
    coords = list(np.indices(idx.shape))
    coords[ax] = np.where(idx < 0, idx + data.shape[ax], idx)
    return data[tuple(coords)]


def _scatter_elements(op: dict, xs: list[Arr]) -> Arr:
    data, idx, upd = xs
    ax = op["axis"] % data.ndim
    out = np.array(data, np.float64)
    coords = list(np.indices(idx.shape))
    idx = idx.astype(np.int64)
    coords[ax] = np.where(idx < 0, idx + data.shape[ax], idx)
    out[tuple(coords)] = upd
    return out


def _im2col(op: dict, xs: list[Arr]) -> Arr:
    (x,) = xs
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = (op[k] for k in ("kernel", "stride", "padding",
                                                               "dilation"))  # fmt: skip
    n, c, h, w = x.shape
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = np.zeros((n, c, kh, kw, ho, wo))
    for ky in range(kh):
        for kx in range(kw):
            out[:, :, ky, kx] = xp[:, :, ky * dh : ky * dh + (ho - 1) * sh + 1 : sh,
                                   kx * dw : kx * dw + (wo - 1) * sw + 1 : sw]  # fmt: skip
    return out.reshape(n, c * kh * kw, ho * wo)


def _norm_res(op: dict, xs: list[Arr], rms: bool) -> Arr:
    hb = op["has_bias"]
    h = xs[0] + xs[1] + (xs[2] if hb else 0.0)
    rest = xs[3 if hb else 2 :]
    if rms:
        y = _rms(h, op["eps"]) * rest[0]
        return y + rest[1] if len(rest) > 1 else y
    return _ln(h, op["eps"]) * rest[0] + rest[1]


def _ada(op: dict, xs: list[Arr]) -> Arr:
    x, sc, sh = xs
    nx = _ln(x, op["eps"]) if op["layer_norm"] else _rms(x, op["eps"])
    # scale rows modulate contiguous runs of x rows (leading dims a prefix, then 1s)
    return nx * (1.0 + sc) + sh


def _group_norm(op: dict, xs: list[Arr]) -> Arr:
    x, gm, bt = xs
    n, c = x.shape[:2]
    xr = _ln(x.reshape(n, op["num_groups"], -1), op["eps"]).reshape(x.shape)
    return xr * gm[None, :, None, None] + bt[None, :, None, None]


def _ln2d(op: dict, xs: list[Arr]) -> Arr:
    x, gm, bt = xs
    y = _ln(x.transpose(0, 2, 3, 1), op["eps"]) * gm + bt
    return y.transpose(0, 3, 1, 2)


FORWARD: dict[str, Callable[[dict, list[Arr]], Arr]] = {
    "group_norm": _group_norm,
    "layer_norm2d": _ln2d,
    "layer_norm": lambda op, xs: _ln(xs[0], op["eps"]) * xs[1] + xs[2],
    "rms_norm": lambda op, xs: _rms(xs[0], op["eps"]) * xs[1] + (xs[2] if len(xs) > 2 else 0.0),
    "fused_residual_ln": lambda op, xs: _norm_res(op, xs, False),
    "fused_residual_rms_norm": lambda op, xs: _norm_res(op, xs, True),
    "ada_layer_norm": _ada,
    "gated_residual": lambda op, xs: xs[0] + xs[2] * xs[1],
    "attention": _attention,
    "fused_attention_block": _fused_block,
    "rope": _rope,
    "conv2d": _conv2d,
    "conv_transpose2d": _conv_t,
    "pool2d": lambda op, xs: _max_pool(op, xs) if op["kind"] == "max" else _avg_pool(op, xs),
    "softmax_cross_entropy": _sce,
    "scatter_add": _scatter_add,
    "gather_nd": _gather_nd,
    "gather_elements": _gather_elements,
    "im2_col": _im2col,
    "grouped_mat_mul": lambda op, xs: np.einsum(
        "mk,mkn->mn", xs[0], xs[1][xs[2].astype(np.int64)]
    ),  # fmt: skip
    "scatter_elements": _scatter_elements,
    "reverse": lambda op, xs: np.flip(xs[0], [a % xs[0].ndim for a in op["axes"]]),
    "arg_max": lambda op, xs: np.argmax(xs[0], op["axis"]),
    "resize_nearest2x": lambda op, xs: xs[0].repeat(2, axis=2).repeat(2, axis=3),
}


#: parsed JSON per graph (valid while its node count and outputs are unchanged)
_PARSED: weakref.WeakKeyDictionary[Any, tuple[Any, Any]] = weakref.WeakKeyDictionary()


def evaluate(graph: rlx.Graph, feeds: dict[str, Arr], every: bool = False) -> list[Arr]:
    """Values of the graph's outputs (of every node when ``every``), every
    float computed in float64. An in-place ``scatter_nd`` into a state has
    the updated value."""
    key = (len(graph), tuple(graph._g.outputs()))
    hit = _PARSED.get(graph)
    if hit is None or hit[0] != key:
        hit = _PARSED[graph] = (key, json.loads(graph.to_json()))
    gj = hit[1]
    vals: list[Any] = []
    for node in gj["nodes"]:
        op = node["op"]
        kind = op["op"]
        xs = [vals[i] for i in node["inputs"]]
        if kind in ("input", "param", "state"):
            v = np.asarray(feeds[node["name"]])
        elif kind == "constant":
            dims = [int(d) for d in node["shape"]["dims"]]
            c = np.asarray(op["values"], np.float64)
            v = np.broadcast_to(c.reshape(()), dims) if c.size == 1 else c.reshape(dims)
            if node["shape"]["dtype"] in ("i32", "i64"):
                v = v.astype(np.int64)
            elif node["shape"]["dtype"] == "bool":
                v = v != 0
        elif kind == "scatter_nd":
            v = np.array(xs[0], np.float64)
            idx = np.asarray(xs[1]).astype(np.int64)
            v[tuple(np.moveaxis(idx, -1, 0))] = xs[2]
        elif kind in FORWARD:
            v = FORWARD[kind](op, xs)
        elif kind in OPS:
            if kind == "cast" and op["to"] in ("f32", "f16", "bf16"):
                v = np.asarray(xs[0], np.float64)  # keep float64 through float casts
            else:
                v = eval_op(op, xs, node["shape"])
        else:
            raise KeyError(f"no float64 evaluation for '{kind}'")
        v = np.asarray(v)
        if v.dtype.kind == "f":
            v = v.astype(np.float64)
        vals.append(v)
    return vals if every else [vals[i] for i in gj["outputs"]]


def fd_grad(f: Callable[[Arr], float], x: Arr, h: float = 1e-6) -> Arr:
    """Central finite differences of scalar ``f`` at ``x``."""
    x = np.array(x, np.float64)
    out = np.zeros_like(x)
    flat, gflat = x.reshape(-1), out.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + h
        fp = f(x)
        flat[i] = old - h
        fm = f(x)
        flat[i] = old
        gflat[i] = (fp - fm) / (2 * h)
    return out


def rel_err(a: Arr, b: Arr) -> float:
    """``max|a − b| / max(max|b|, 1e-3)``."""
    return float(np.abs(np.asarray(a) - b).max() / max(float(np.abs(b).max()), 1e-3))
