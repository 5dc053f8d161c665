"""Gradient checking helpers: a float64 evaluator of rlx graphs and central
finite differences.

The evaluator walks the IR node by node in float64: ops the numpy
reference interprets (``rlx.reference.hostops.OPS``) run there; the forward
ops it lacks, or runs through an f32 arena (the scaled / grouped quantised
matmuls), use the textbook formulas below (written from the op docs, not
from rlx's kernels); the ``*_backward`` ops whose reference thunks read f32
buffers run their numpy functions (``rlx.reference.backward``) on the
float64 values instead (:data:`BACKWARD`).
"""

from __future__ import annotations

import json
import weakref
from typing import Any, Callable

import numpy as np
import rlx
from rlx.autodiff import grad
from rlx.reference import backward as bwd
from rlx.reference import quant
from rlx.reference.attention import axial_angles, rotate, sdpa
from rlx.reference.gguf_blocks import dequantize_rows
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


def _scaled_dequantize(op: dict, xs: list[Arr]) -> Arr:
    codes, scale = xs
    r, c = codes.shape
    return quant.decode_scaled(codes, op["fmt"]) * quant.expand_scale(scale, op["layout"], r, c)


def _scaled_quant_scale(op: dict, xs: list[Arr]) -> Arr:
    """``amax / fmt_max`` per group (1 where amax = 0), written out in f64."""
    a = np.abs(xs[0])
    r, c = a.shape
    lay = op["layout"]
    if lay == "per_tensor":
        amax = a.max().reshape(1)
    elif lay == "per_row":
        amax = a.max(axis=1)
    else:
        size = int(lay["block"]["size"])
        amax = np.stack([a[:, j : j + size].max(axis=1) for j in range(0, c, size)], axis=1)
    return np.where(amax == 0, 1.0, amax / quant.FORMAT_MAX[op["fmt"]])


def _scaled_mm(op: dict, xs: list[Arr]) -> Arr:
    lay = op["layout"]
    a = _scaled_dequantize({"fmt": op["lhs_fmt"], "layout": lay}, xs[0:4:2])
    b = _scaled_dequantize({"fmt": op["rhs_fmt"], "layout": lay}, xs[1:4:2])
    out = a @ b.T
    return out + xs[4] if len(xs) > 4 else out


def _dequant_grouped(op: dict, xs: list[Arr]) -> Arr:
    x, wq, idx = xs
    e, n, k = op["num_experts"], op["n"], op["k"]
    typ = quant.gguf_type(op["scheme"])
    w = np.stack([dequantize_rows(np.asarray(wq[i], np.uint8).reshape(n, -1), typ, k)
                  for i in range(e)]).astype(np.float64)  # fmt: skip
    out = np.zeros((x.shape[0], n))
    for row, ex in enumerate(np.asarray(idx, np.int64)):
        if 0 <= ex < e:  # an expert index out of range gives a zero row
            out[row] = w[ex] @ x[row]
    return out


def _axial_rope2d(op: dict, xs: list[Arr]) -> Arr:
    (x,) = xs
    b, s, hid = x.shape
    d = op["head_dim"]
    ang = axial_angles(op["end_x"], op["end_y"], d, op["theta"]).astype(np.float64)
    ang = ang[np.arange(s) % ang.shape[0]][None, :, None, :]
    xh = x.reshape(b, s, hid // d, d)
    return rotate(xh, np.cos(ang), np.sin(ang), True).reshape(x.shape)


FORWARD.update(
    {
        "scaled_dequantize": _scaled_dequantize,
        "scaled_mat_mul": _scaled_mm,
        "scaled_quant_scale": _scaled_quant_scale,
        "dequant_grouped_mat_mul": _dequant_grouped,
        "axial_rope2d": _axial_rope2d,
    }
)


# ------------------------------------------------------- backward ops in f64
def _bhsd(x: Arr, d: int, bhsd: bool) -> Arr:
    return x if bhsd else x.reshape(x.shape[0], x.shape[1], -1, d).transpose(0, 2, 1, 3)


def _attn_bwd(op: dict, xs: list[Arr]) -> Arr:
    d, bhsd = op["head_dim"], op["layout"] == "bhsd"
    q, k, v, dy = (_bhsd(x, d, bhsd) for x in xs[:4])
    b, h, s, _ = q.shape
    kv = k.shape[2]
    kinds = {"none": 0, "causal": 1, "custom": 2, "bias": 3, "sliding_window": 4}
    custom = np.broadcast_to(xs[4], (b, h, s, kv)) if len(xs) > 4 else None
    mask = bwd.attention_mask(kinds[op["mask"]], s, kv, op.get("window", 0), custom)
    wrt = {"q": 0, "k": 1, "v": 2}[op["wrt"]]
    out = bwd.attention_backward_fn(q, k, v, dy, mask, wrt)
    return out if bhsd else out.transpose(0, 2, 1, 3).reshape(xs[wrt].shape)


def _rope_bwd(op: dict, xs: list[Arr]) -> Arr:
    dy, cos, sin = xs
    b, s, hid = dy.shape
    d, half = op["head_dim"], op["n_rot"] // 2
    cos, sin = cos.reshape(-1, half), sin.reshape(-1, half)
    if cos.shape[0] != b * s:  # one table row per position
        cos, sin = np.tile(cos[:s], (b, 1)), np.tile(sin[:s], (b, 1))
    dx = bwd.rope_backward_fn(dy.reshape(b * s, hid // d, d), cos, sin, d, op["n_rot"],
                              op["kind"] == "interleaved")  # fmt: skip
    return dx.reshape(dy.shape)


def _conv_args(op: dict) -> tuple:
    return op["stride"], op["padding"], op["dilation"], op["groups"]


def _ada_bwd(op: dict, xs: list[Arr]) -> Arr:
    x, sc, dy = xs
    h = x.shape[-1]
    mods = sc.size // h
    parts = bwd.ada_layer_norm_backward_fn(x.reshape(mods, -1, h), sc.reshape(mods, h),
                                           dy.reshape(mods, -1, h), op["eps"],
                                           op["layer_norm"])  # fmt: skip
    return np.concatenate([p.ravel() for p in parts])


def _gated_bwd(op: dict, xs: list[Arr]) -> Arr:
    y, gate, g = xs
    h = y.shape[-1]
    mods = gate.size // h
    return bwd.gated_residual_backward_fn(y.reshape(mods, -1, h), gate.reshape(mods, h),
                                          g.reshape(mods, -1, h))  # fmt: skip


#: ``*_backward`` ops whose ``OPS`` entry runs the thunk on an f32 arena
BACKWARD: dict[str, Callable[[dict, list[Arr]], Arr]] = {
    "attention_backward": _attn_bwd,
    "rope_backward": _rope_bwd,
    "max_pool2d_backward": lambda op, xs: bwd.maxpool2d_backward_fn(
        xs[0], xs[1], op["kernel"], op["stride"], op["padding"]
    ),
    "conv2d_backward_input": lambda op, xs: bwd.conv2d_backward_input_fn(
        xs[0], xs[1], op["input_hw"], *_conv_args(op)
    ),
    "conv2d_backward_weight": lambda op, xs: bwd.conv2d_backward_weight_fn(
        xs[0], xs[1], op["kernel"], *_conv_args(op)
    ),
    "ada_layer_norm_backward": _ada_bwd,
    "gated_residual_backward": _gated_bwd,
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
        elif kind in BACKWARD:
            v = BACKWARD[kind](op, [np.asarray(x) for x in xs])
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
    x = np.array(x, np.float64, order="C")  # reshape(-1) must be a view
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


# ------------------------------------------------------------ the check
#: gradient vs central differences, both in float64
TIGHT = 1e-6
#: f32 compiled gradients vs the float64 ones
HOST = 1e-4
DEVICES = ("host", "reference")

Case = Callable[[rlx.Graph, dict], rlx.Node]


def _rng() -> np.random.Generator:
    return np.random.default_rng(7)


def check(build: Case, shapes: dict, wrt: list[str], tol: float = TIGHT,
          feeds_extra: dict | None = None, positive: tuple[str, ...] = (),
          devices: tuple[str, ...] | None = None, directional: bool = False,
          init: dict | None = None) -> float:  # fmt: skip
    """Build, differentiate w.r.t. ``wrt`` and compare with finite differences
    (inputs standard normal unless ``init`` gives their values); returns the
    largest relative error."""
    rng = _rng()
    g = rlx.Graph("gc")
    nodes = {n: g.input(n, s) for n, s in shapes.items()}
    extra = feeds_extra or {}
    for n, v in extra.items():
        nodes[n] = g.input(n, list(v.shape), "i32" if v.dtype.kind in "iu" else "f32")
    out = build(g, nodes)
    r = g.input("r", list(out.shape))
    loss = g.sum(out * r)
    grads = grad(g, loss, [nodes[n] for n in wrt])
    g.outputs(loss, *grads)
    feeds = {n: rng.standard_normal(s) for n, s in shapes.items()}
    for n in positive:
        feeds[n] = np.abs(feeds[n]) + 0.5
    feeds.update({n: np.asarray(v, np.float64) for n, v in (init or {}).items()})
    feeds.update(extra)
    feeds["r"] = rng.standard_normal([int(d) for d in out.shape])
    vals = evaluate(g, feeds)
    forward_matches_compiled(build, shapes, extra, feeds)
    worst = 0.0
    for name, got in zip(wrt, vals[1:]):

        def f(v: np.ndarray, name: str = name) -> float:
            return float(evaluate(g, {**feeds, name: v})[0])

        if directional:  # along one random direction: 2 evaluations, not 2·numel
            v = rng.standard_normal(np.shape(feeds[name]))
            h = 1e-6
            want = np.array((f(feeds[name] + h * v) - f(feeds[name] - h * v)) / (2 * h))
            got = np.array(float((got * v).sum()))
        else:
            want = fd_grad(f, feeds[name])
        err = rel_err(got, want)
        assert err <= tol, f"d/d{name}: relative error {err:.2e} > {tol:.0e}"
        worst = max(worst, err)
    for device in DEVICES if devices is None else devices:
        compiled(g, feeds, vals[1:], wrt, device)
    return worst


def forward_matches_compiled(build: Case, shapes: dict, extra: dict, feeds: dict) -> None:
    """The float64 evaluator's forward (the function the differences are taken
    of) agrees with rlx's own compiled forward on the reference device."""
    g = rlx.Graph("fwd")
    nodes = {n: g.input(n, s) for n, s in shapes.items()}
    for n, v in extra.items():
        nodes[n] = g.input(n, list(v.shape), "i32" if v.dtype.kind in "iu" else "f32")
    g.outputs(build(g, nodes))
    want = evaluate(g, feeds)[0]
    args = {k: v.astype(np.int32 if v.dtype.kind in "iu" else np.float32)
            for k, v in feeds.items() if k in nodes}  # fmt: skip
    got = next(iter(rlx.compile(g, device="reference").run(**args).values()))
    assert rel_err(got, want) <= HOST, f"forward: relative error {rel_err(got, want):.2e}"


def compiled(g: rlx.Graph, feeds: dict, want: list, wrt: list[str], device: str) -> None:
    """The same gradients compiled for ``device`` in f32: ≤ 1e-4 relative to float64
    (every ``*_backward`` op lowers: a compile error fails the test)."""
    exe = rlx.compile(g, device=device)
    args = {k: v.astype(np.int32 if v.dtype.kind in "iu" else np.float32) for k, v in feeds.items()}
    out = list(exe.run(**args).values())
    for name, got, w in zip(wrt, out[1:], want):
        err = rel_err(got, w)
        assert err <= HOST, f"{device} d/d{name}: relative error {err:.2e} > {HOST:.0e}"
