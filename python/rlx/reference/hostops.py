"""The numpy evaluation of single IR ops used by ``host_op`` / ``scan_host``
(:mod:`rlx.reference.interp`): :data:`OPS` maps an op's serde name to
``fn(op_json, operands, result_shape) -> ndarray``. Ops whose reference is
written against the arena reuse their thunk through :func:`_via_thunk`."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from rlx.reference import Memory, misc, quant, rng, sequence, signal, splat
from rlx.reference import backward as bwd
from rlx.reference.gguf_blocks import dequantize_rows

_ACT = {
    "gelu": lambda x: 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0))),
    "gelu_approx": quant.gelu_tanh,
    "silu": quant.silu,
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "tanh": np.tanh,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "neg": np.negative,
    "abs": np.abs,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "atan": np.arctan,
    "round": np.rint,
}
_BIN = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": lambda a, b: (
        np.trunc(a / b).astype(np.result_type(a, b))
        if np.issubdtype(np.result_type(a, b), np.integer)
        else a / b
    ),
    "max": np.maximum,
    "min": np.minimum,
    "pow": np.power,
}
_CMP = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}
_RED = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}


def _dims(shape: dict) -> tuple[int, ...]:
    return misc.static_dims(shape)


def _axis(a: int, rank: int) -> int:
    return a + rank if a < 0 else a


def _region(op: dict, xs: list, shape: dict):
    vals: list[np.ndarray] = []
    get = lambda o: xs[o["input"]] if "input" in o else vals[o["step"]]  # noqa: E731
    for st in op["steps"]:
        if st["step"] == "unary":
            vals.append(_ACT[st["act"]](get(st["a"])))
        elif st["step"] == "binary":
            vals.append(_BIN[st["kind"]](get(st["a"]), get(st["b"])))
        else:
            vals.append(np.asarray(get(st["a"])).astype(misc.np_dtype(st["to"])))
    return vals[-1]


def _swiglu(op: dict, xs: list, shape: dict):
    x = xs[0]
    n = x.shape[-1] // 2
    a, b = x[..., :n], x[..., n:]
    return quant.silu(a) * b if op["gate_first"] else a * quant.silu(b)


def _reduce(op: dict, xs: list, shape: dict):
    x = xs[0]
    axes = tuple(_axis(a, x.ndim) for a in op["axes"]) or None
    return _RED[op["kind"]](x, axis=axes, keepdims=op["keep_dims"])


def _softmax(op: dict, xs: list, shape: dict):
    x = xs[0]
    e = np.exp(x - x.max(axis=op["axis"], keepdims=True))
    return e / e.sum(axis=op["axis"], keepdims=True)


def _cumsum(op: dict, xs: list, shape: dict):
    c = np.cumsum(xs[0], axis=op["axis"])
    return c - xs[0] if op["exclusive"] else c


def _narrow(op: dict, xs: list, shape: dict):
    x = xs[0]
    ax = _axis(op["axis"], x.ndim)
    return np.take(x, np.arange(op["start"], op["start"] + op["len"]), axis=ax)


def _gather_backward(op: dict, xs: list, shape: dict):
    dy, idx = xs
    ax = _axis(op["axis"], dy.ndim)
    out = np.zeros(_dims(shape))
    i = np.asarray(idx, np.int64)
    i = np.where(i < 0, i + op["axis_dim"], i)
    np.add.at(out, (slice(None),) * ax + (i,), dy)
    return out


def _recurrent(kind: str):
    def f(op: dict, xs: list, shape: dict):
        x = xs[0]
        if kind == "gru":
            x, w_ih, w_hh, b_ih, b_hh, h0 = xs
            c0 = None
        else:
            x, w_ih, w_hh, b_ih, h0 = xs[:5]
            b_hh, c0 = None, (xs[5] if kind == "lstm" else None)
        L, H = op["num_layers"], op["hidden"]
        D = 2 if op["bidirectional"] else 1
        h0 = np.asarray(h0).reshape(L * D, x.shape[0], H)
        c0 = None if c0 is None else np.asarray(c0).reshape(L * D, x.shape[0], H)
        return sequence.recurrent_fn(
            kind,
            x,
            np.asarray(w_ih).reshape(L * D, np.shape(w_hh)[-2], -1),
            np.asarray(w_hh).reshape(L * D, -1, H),
            np.asarray(b_ih).reshape(L * D, -1),
            None if b_hh is None else np.asarray(b_hh).reshape(L * D, -1),
            h0,
            c0,
            H,
            L,
            op["bidirectional"],
            op["carry"],
            op.get("relu", False),
        )

    return f


def _rng(kind: str):
    def f(op: dict, xs: list, shape: dict):
        if op.get("seed") is None:
            raise KeyError(
                f"[host_op] {kind} without a per-op seed needs the graph key; lower it to its thunk"
            )
        key = int(op["seed"]) & 0xFFFF_FFFF_FFFF_FFFF
        n = int(np.prod(_dims(shape), dtype=np.int64))
        if kind == "rng_normal":
            v = np.float32(op["mean"]) + np.float32(op["scale"]) * rng.philox_normal(key, 0, n)
        else:
            v = np.float32(op["low"]) + (
                np.float32(op["high"]) - np.float32(op["low"])
            ) * rng.philox_uniform(key, 0, n)
        return v.reshape(_dims(shape))

    return f


def _dequant_mm(op: dict, xs: list, shape: dict):
    sch = op["scheme"]
    w = dequantize_rows(
        np.asarray(xs[1], np.uint8).reshape(op["n"], -1), quant.gguf_type(sch), op["k"]
    )
    return np.asarray(xs[0], np.float64) @ w.astype(np.float64).T


def _dequant_mm_t(op: dict, xs: list, shape: dict):
    """``dy @ dequant(w_q)`` (``dequant_mat_mul_t``)."""
    w = dequantize_rows(
        np.asarray(xs[1], np.uint8).reshape(op["n"], -1), quant.gguf_type(op["scheme"]), op["k"]
    )
    return np.asarray(xs[0], np.float64) @ w.astype(np.float64)


def _scaled(kind: str):
    def f(op: dict, xs: list, shape: dict):
        lay, fmt = op["layout"], op["fmt"]
        x = xs[0]
        r, c = x.shape[0], x.shape[1]
        if kind == "scaled_quant_scale":
            a = np.abs(np.asarray(x, np.float64))
            if lay == "per_tensor":
                amax = a.max().reshape(1)
            elif lay == "per_row":
                amax = a.max(1)
            else:
                size = int(lay["block"]["size"])
                nb = -(-c // size)
                p = np.zeros((r, nb * size))
                p[:, :c] = a
                amax = p.reshape(r, nb, size).max(2)
            return np.where(amax == 0, 1.0, amax / quant.FORMAT_MAX[fmt])
        s = quant.expand_scale(xs[1], lay, r, c).astype(np.float32)
        if kind == "scaled_quantize":
            with np.errstate(divide="ignore", invalid="ignore"):
                return quant.encode_scaled((np.asarray(x, np.float32) / s).astype(np.float32), fmt)
        return quant.decode_scaled(x, fmt).astype(np.float32) * s

    return f


def _custom(op: dict, xs: list, shape: dict):
    fn = misc.CUSTOM_OPS.get(op["name"])
    if fn is None:
        raise KeyError(f"[host_op] no custom op registered under '{op['name']}'")
    out = np.zeros(_dims(op["out"]), misc.np_dtype(op["out"]["dtype"]))
    fn(list(xs), out, b"")
    return out


def _sce_backward(op: dict, xs: list, shape: dict):
    z, lab, dl = (np.asarray(v) for v in xs)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    lab = lab.astype(np.int64)
    ok = (lab >= 0) & (lab < z.shape[1])
    p[np.nonzero(ok)[0], lab[ok]] -= 1.0
    return np.where(ok[:, None], p * dl[:, None], 0.0)


OPS = {
    "activation": lambda op, xs, s: _ACT[op["kind"]](xs[0]),
    "binary": lambda op, xs, s: _BIN[op["kind"]](xs[0], xs[1]),
    "compare": lambda op, xs, s: _CMP[op["kind"]](xs[0], xs[1]),
    "where": lambda op, xs, s: np.where(np.asarray(xs[0]) != 0, xs[1], xs[2]),
    "cast": lambda op, xs, s: (
        np.trunc(xs[0]).astype(misc.np_dtype(op["to"]))
        if (op["to"][0] in "iub" or op.get("trunc"))
        and np.issubdtype(np.asarray(xs[0]).dtype, np.floating)
        else np.asarray(xs[0]).astype(misc.np_dtype(op["to"]))
    ),
    "fma": lambda op, xs, s: xs[0] * xs[1] + xs[2],
    "elementwise_region": _region,
    "fused_swiglu": _swiglu,
    "mat_mul": lambda op, xs, s: np.matmul(xs[0], xs[1]),
    "fused_mat_mul_bias_act": lambda op, xs, s: (
        _ACT[op["act"]] if op.get("act") else (lambda v: v)
    )(np.matmul(xs[0], xs[1]) + xs[2]),
    "reshape": lambda op, xs, s: np.reshape(xs[0], _dims(s)),
    "transpose": lambda op, xs, s: np.transpose(xs[0], op["perm"]),
    "expand": lambda op, xs, s: np.broadcast_to(xs[0], _dims(s)),
    "narrow": _narrow,
    "concat": lambda op, xs, s: np.concatenate(xs, axis=op["axis"]),
    "reduce": _reduce,
    "softmax": _softmax,
    "cumsum": _cumsum,
    "gather": lambda op, xs, s: np.take(xs[0], np.asarray(xs[1], np.int64), axis=0),
    "gather_axis": lambda op, xs, s: np.take(xs[0], np.asarray(xs[1], np.int64), axis=op["axis"]),
    "dequant_mat_mul": _dequant_mm,
    "dequant_mat_mul_t": _dequant_mm_t,
    "scaled_quantize": _scaled("scaled_quantize"),
    "scaled_dequantize": _scaled("scaled_dequantize"),
    "scaled_quant_scale": _scaled("scaled_quant_scale"),
    # y only: an optional 6th operand is the initial state (a host op
    # cannot write a State back)
    "selective_scan": lambda op, xs, s: sequence.selective_scan_fn(
        *(np.asarray(v, np.float64) for v in xs)
    )[0],
    "mamba2": lambda op, xs, s: sequence.mamba2_fn(
        *(np.asarray(v, np.float64) for v in xs[:5]),
        op["heads"],
        op["head_dim"],
        None if len(xs) < 6 else np.asarray(xs[5], np.float64),
    )[0],
    "lstm": _recurrent("lstm"),
    "gru": _recurrent("gru"),
    "rnn": _recurrent("rnn"),
    "fft": lambda op, xs, s: signal.fft_block_fn(
        np.asarray(xs[0]).reshape(-1, xs[0].shape[-1]),
        xs[0].shape[-1] // 2,
        op["inverse"],
        {"backward": 0, "ortho": 1, "forward": 2}[op["norm"]],
        False,
    ).reshape(xs[0].shape),
    "log_mel": lambda op, xs, s: signal.log_mel_fn(xs[0], xs[1], op["n_fft"]),
    "log_mel_backward": lambda op, xs, s: signal.log_mel_backward_fn(
        xs[0], xs[1], xs[2], op["n_fft"]
    ),
    "welch_peaks": lambda op, xs, s: signal.welch_peaks_fn(
        xs[0], op["n_fft"], op["n_segments"], op["k"]
    ),
    "rng_normal": _rng("rng_normal"),
    "rng_uniform": _rng("rng_uniform"),
    "vq_assign": lambda op, xs, s: misc.vq_assign_fn(
        xs[0], xs[1], {"l2": 0, "dot": 1, "cosine": 2}[op["metric"]]
    ),
    "spd": lambda op, xs, s: misc.spd_forward(op["kind"], float(op.get("eps", 0.0)), list(xs)),
    "spd_backward": lambda op, xs, s: misc.spd_backward(
        op["kind"], float(op.get("eps", 0.0)), list(xs[:-1]), xs[-1]
    ),
    "custom": _custom,
    "softmax_cross_entropy_backward": _sce_backward,
    "rms_norm_backward": lambda op, xs, s: bwd.rms_norm_backward_fn(
        np.asarray(xs[0], np.float64).reshape(-1, xs[0].shape[-1]),
        np.asarray(xs[1], np.float64),
        np.asarray(xs[-1], np.float64).reshape(-1, xs[0].shape[-1]),
        op["eps"],
    )[{"input": 0, "gamma": 1, "beta": 2}[op["wrt"]]],
    "cumsum_backward": lambda op, xs, s: np.flip(
        _cumsum(op, [np.flip(xs[0], op["axis"])], s), op["axis"]
    ),
    "gather_backward": _gather_backward,
}


def _via_thunk(name: str, fields: dict, arrays: dict, out: tuple) -> np.ndarray:
    """Run thunk ``name`` on a scratch arena holding ``arrays`` (float → f32, ints →
    int32, uint8 kept); ``out = (field, shape, dtype)``. Lets ops whose reference
    is written against the arena reuse it verbatim."""
    from rlx.reference import REGISTRY

    placed, size = {}, 0
    for key, arr in arrays.items():
        arr = np.asarray(arr)
        if arr.dtype == np.uint8:
            pass
        elif arr.dtype.kind in "iub":
            arr = arr.astype(np.int32)
        else:
            arr = arr.astype(np.float32)
        placed[key] = (size, np.ascontiguousarray(arr))
        size += (arr.nbytes + 64) // 64 * 64
    oname, oshape, odt = out
    nout = int(np.prod(oshape, dtype=np.int64)) * np.dtype(odt).itemsize
    arena = np.zeros(size + nout + 64, np.uint8)
    t = dict(fields, name=name)
    for key, (off, arr) in placed.items():
        arena[off : off + arr.nbytes] = arr.reshape(-1).view(np.uint8)
        t[key] = off
    t[oname] = size
    mem = Memory(arena)
    REGISTRY[name](t, mem)
    return mem.view(size, oshape, odt).copy()


def _attn_bwd(op: dict, xs: list, s: dict) -> np.ndarray:
    q, k = np.asarray(xs[0]), np.asarray(xs[1])
    h, d = op["heads"], op["head_dim"]
    bhsd = op["layout"] == "bhsd"
    b = q.shape[0]
    seq, kvs = (q.shape[2], k.shape[2]) if bhsd else (q.shape[1], k.shape[1])
    kinds = {"none": 0, "causal": 1, "custom": 2, "bias": 3, "sliding_window": 4}
    arrays = dict(q=q, k=k, v=xs[2], dy=xs[3])
    fields = dict(
        batch=b,
        seq=seq,
        kv_seq=kvs,
        heads=h,
        head_dim=d,
        mask_kind=kinds[op["mask"]],
        window=op.get("window", 0),
        wrt={"q": 0, "k": 1, "v": 2}[op["wrt"]],
        bhsd=int(bhsd),
    )
    if len(xs) > 4:
        arrays["mask"] = xs[4]
        fields["mask_dims"] = list(np.shape(xs[4]))
    else:
        fields["mask"] = 0
    tgt = {"q": q, "k": k, "v": np.asarray(xs[2])}[op["wrt"]]
    return _via_thunk("attention_bwd", fields, arrays, ("out", tgt.shape, np.float32))


def _rope_bwd(op: dict, xs: list, s: dict) -> np.ndarray:
    dy, cos, sin = (np.asarray(v) for v in xs)
    b, seq = dy.shape[0], dy.shape[1]
    f = dict(
        batch=b,
        seq=seq,
        hidden=int(np.prod(dy.shape[2:])),
        head_dim=op["head_dim"],
        n_rot=op["n_rot"],
        cos_len=cos.size,
        interleaved=op["kind"] == "interleaved",
    )
    return _via_thunk(
        "rope_backward", f, dict(dy=dy, cos=cos, sin=sin), ("dx", dy.shape, np.float32)
    )


def _pool_geom(op: dict, x: np.ndarray, dy: np.ndarray) -> dict:
    n, c, h, w = x.shape
    kh, kw = op["kernel"]
    return dict(
        n=n,
        c=c,
        h=h,
        w=w,
        h_out=dy.shape[2],
        w_out=dy.shape[3],
        kh=kh,
        kw=kw,
        sh=op["stride"][0],
        sw=op["stride"][1],
        ph=op["padding"][0],
        pw=op["padding"][1],
    )


def _maxpool_bwd(op: dict, xs: list, s: dict) -> np.ndarray:
    x, dy = np.asarray(xs[0]), np.asarray(xs[1])
    return _via_thunk(
        "maxpool2d_backward", _pool_geom(op, x, dy), dict(x=x, dy=dy), ("dx", x.shape, np.float32)
    )


def _conv_fields(
    op: dict, n: int, ci: int, h: int, w: int, co: int, dy: np.ndarray, kh: int, kw: int
) -> dict:
    return dict(
        n=n,
        c_in=ci,
        h=h,
        c_out=co,
        h_out=dy.shape[2],
        w_out=dy.shape[3],
        kh=kh,
        kw=kw,
        sh=op["stride"][0],
        sw=op["stride"][1],
        ph=op["padding"][0],
        pw=op["padding"][1],
        dh=op["dilation"][0],
        groups=op["groups"],
    )


def _conv_bwd_input(op: dict, xs: list, s: dict) -> np.ndarray:
    dy, w = np.asarray(xs[0]), np.asarray(xs[1])
    h, wi = op["input_hw"]
    ci = w.shape[1] * op["groups"]
    f = _conv_fields(op, dy.shape[0], ci, h, wi, w.shape[0], dy, w.shape[2], w.shape[3])
    f.update(w_in=wi, dw=op["dilation"][1])
    return _via_thunk(
        "conv2d_backward_input", f, dict(dy=dy, w=w), ("dx", (dy.shape[0], ci, h, wi), np.float32)
    )


def _conv_bwd_weight(op: dict, xs: list, s: dict) -> np.ndarray:
    x, dy = np.asarray(xs[0]), np.asarray(xs[1])
    n, ci, h, wi = x.shape
    kh, kw = op["kernel"]
    f = _conv_fields(op, n, ci, h, wi, dy.shape[1], dy, kh, kw)
    f.update(w=wi, dw_dil=op["dilation"][1])
    shape = (dy.shape[1], ci // op["groups"], kh, kw)
    return _via_thunk("conv2d_backward_weight", f, dict(x=x, dy=dy), ("dw", shape, np.float32))


def _mod_rows(x: np.ndarray, m: np.ndarray) -> tuple[int, int, int]:
    """(h, mod_rows, seq_per_mod) for x rows grouped contiguously per modulation row."""
    h = x.shape[-1]
    mods = m.size // h
    return h, mods, x.size // h // mods


def _ada_bwd(op: dict, xs: list, s: dict) -> np.ndarray:
    x, sc, dy = (np.asarray(v) for v in xs)
    h, mods, sp = _mod_rows(x, sc)
    f = dict(h=h, eps=op["eps"], layer_norm=op["layer_norm"], mod_rows=mods, seq_per_mod=sp)
    total = x.size + 2 * sc.size
    return _via_thunk(
        "ada_layer_norm_backward", f, dict(x=x, scale=sc, dy=dy), ("out", (total,), np.float32)
    )


def _gated_bwd(op: dict, xs: list, s: dict) -> np.ndarray:
    y, gate, dy = (np.asarray(v) for v in xs)
    h, mods, sp = _mod_rows(y, gate)
    f = dict(h=h, mod_rows=mods, seq_per_mod=sp)
    total = 2 * y.size + gate.size
    return _via_thunk(
        "gated_residual_backward", f, dict(y=y, gate=gate, dy=dy), ("out", (total,), np.float32)
    )


def _scaled_mm(op: dict, xs: list, s: dict) -> np.ndarray:
    lhs, rhs = np.asarray(xs[0], np.uint8), np.asarray(xs[1], np.uint8)
    m, k, n = lhs.shape[0], lhs.shape[1], rhs.shape[0]
    arrays = dict(lhs=lhs, rhs=rhs, lhs_scale=xs[2], rhs_scale=xs[3])
    f = dict(
        m=m,
        k=k,
        n=n,
        lhs_fmt=op["lhs_fmt"],
        rhs_fmt=op["rhs_fmt"],
        layout=op["layout"],
        has_bias=len(xs) > 4,
    )
    if len(xs) > 4:
        arrays["bias"] = xs[4]
    else:
        f["bias"] = 0
    return _via_thunk("scaled_matmul", f, arrays, ("dst", (m, n), np.float32))


def _grouped_gguf(op: dict, xs: list, s: dict) -> np.ndarray:
    x = np.asarray(xs[0])
    f = dict(
        m=x.shape[0], k_dim=op["k"], n=op["n"], num_experts=op["num_experts"], scheme=op["scheme"]
    )
    arrays = dict(input=x, w_q=np.asarray(xs[1], np.uint8), expert_idx=xs[2])
    return _via_thunk(
        "dequant_grouped_matmul_gguf", f, arrays, ("dst", (x.shape[0], op["n"]), np.float32)
    )


def _splat(kind: str) -> Callable:
    def f(op: dict, xs: list, s: dict) -> np.ndarray:
        cfg = op["cfg"]
        if kind == "rasterize":
            return splat.rasterize_fn(np.asarray(xs[0], np.float64).reshape(-1, 16), cfg)
        args = [np.asarray(v, np.float64) for v in xs[:7]]
        g = args[0].reshape(-1, 3).shape[0]
        pos, sc, rot = args[0].reshape(g, 3), args[1].reshape(g, 3), args[2].reshape(g, 4)
        op_args = (
            pos,
            sc,
            rot,
            args[3].reshape(g),
            args[4].reshape(g, 3),
            args[5],
            args[6].reshape(20),
        )
        if kind == "prepare":
            return splat.prepare_fn(*op_args, cfg)
        if kind == "render":
            return splat.render_fn(*op_args, cfg)
        d = np.asarray(xs[7], np.float64)
        clip = float(op.get("loss_grad_clip", 0.0))
        return splat.render_backward_fn(*op_args, cfg, d, clip, int(op.get("sh_band", 3)))

    return f


def _gdn(op: dict, xs: list, s: dict):
    o, _ = sequence.gated_delta_net_fn(
        *(np.asarray(v, np.float64) for v in xs[:5]), np.asarray(xs[5], np.float64), op["heads"]
    )
    return o


OPS["gated_delta_net"] = _gdn
OPS.update(
    {
        "attention_backward": _attn_bwd,
        "rope_backward": _rope_bwd,
        "max_pool2d_backward": _maxpool_bwd,
        "conv2d_backward_input": _conv_bwd_input,
        "conv2d_backward_weight": _conv_bwd_weight,
        "ada_layer_norm_backward": _ada_bwd,
        "gated_residual_backward": _gated_bwd,
        "scaled_mat_mul": _scaled_mm,
        "dequant_grouped_mat_mul": _grouped_gguf,
        "gaussian_splat_render": _splat("render"),
        "gaussian_splat_prepare": _splat("prepare"),
        "gaussian_splat_rasterize": _splat("rasterize"),
        "gaussian_splat_render_backward": _splat("backward"),
    }
)
