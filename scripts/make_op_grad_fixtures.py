"""Generate tests/fixtures/grad/ops.npz: torch.autograd gradients of single
ops, one case per differentiable op family (issue 18 point 3). Run by hand
with a venv outside the repo that has torch (scripts/setup_peers.sh's, or
any ``pip install torch numpy gguf``; torch is never a dependency of the
repo, and CI never imports it): ``$PEER/bin/python scripts/make_op_grad_fixtures.py``.
The committed file was made with torch 2.15.0 (CPU).

Each case has small fixed-seed inputs (float32 values, or fixed ones: SPD
matrices, a splat scene; integer indices as int32, codes as u8), a fixed
random upstream gradient ``r`` of the output's shape, the
op's forward computed by torch in float64 from those float32 values, and
``torch.autograd.grad(out, inputs, r)`` for the differentiated inputs.
Saved per case ``<case>``: ``<case>.in.<name>`` (every input),
``<case>.r``, ``<case>.out`` and ``<case>.grad.<name>`` (one per
differentiated input), all float32 but the integer inputs.

The op is written with torch's own functions (``F.conv2d``,
``F.max_pool2d``, ``F.layer_norm``, ``torch.gather``, ...) where one exists
with the same meaning; attention, RoPE and the masks are written out from
their definitions (scores, mask, softmax, weighted sum; rotate-half /
interleaved pairs), and so are the LSTM / GRU / RNN (step by step on rlx's
stacked weight layout), fft on rlx's ``[re.., im..]`` block layout (via
torch.fft), log_mel, adaLN and the gated residual. The ``*_carry`` cases run
torch.nn.LSTM / GRU / RNN themselves (final states appended as rlx's
``carry`` rows); the scaled-format cases decode the u8 codes with torch's
float8 / int8 dtypes; the GGUF cases quantise and dequantise the weights
with gguf-py (llama.cpp's Python package) and differentiate the input. The
fused and structured ops (fused matmul / norms / attention block, regions,
scatter, scan, SPD, ...) have their cases in scripts/op_grad_cases_extra.py
and the Gaussian splats in scripts/op_grad_cases_splat.py, registered after
these: new cases go at the end, so the earlier cases' random inputs stay
bit-identical.
tests/autodiff/test_op_grad_fixtures.py builds the same op with
``rlx.Graph``, differentiates it with ``rlx.grad`` and checks host and
metal-sim against these numbers.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Callable, Union

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
# torch-free case lists shared with the tests (tests/autodiff/_*.py)
sys.path.insert(0, str(ROOT / "tests" / "autodiff"))
from _recurrent_cases import RECURRENT, RECURRENT_CARRY  # noqa: E402

T = torch.Tensor
Fwd = Callable[[dict[str, T]], T]

#: an input's domain: a name (``inputs``) or the fixed float values themselves
Domain = Union[str, np.ndarray]
#: case name → (float inputs {name: (shape, domain)}, integer inputs, names
#: to differentiate, forward)
Spec = tuple[dict[str, tuple[list[int], Domain]], dict[str, np.ndarray], list[str], Fwd]
CASES: dict[str, Spec] = {}


def case(name: str, floats: dict[str, tuple[list[int], Domain]], wrt: list[str],
         ints: dict[str, np.ndarray] | None = None) -> Callable[[Fwd], Fwd]:  # fmt: skip
    def reg(fn: Fwd) -> Fwd:
        assert name not in CASES and "." not in name
        CASES[name] = (floats, ints or {}, wrt, fn)
        return fn

    return reg


def simple(name: str, fn: Fwd, shapes: dict[str, list[int]], domain: str = "normal") -> None:
    """A case differentiated w.r.t. all of its float inputs."""
    case(name, {k: (s, domain) for k, s in shapes.items()}, list(shapes))(fn)


# ------------------------------------------------------------ elementwise
UNARY: dict[str, Fwd] = {
    "gelu": lambda d: F.gelu(d["x"]),
    "gelu_approx": lambda d: F.gelu(d["x"], approximate="tanh"),
    "silu": lambda d: F.silu(d["x"]),
    "relu": lambda d: F.relu(d["x"]),
    "sigmoid": lambda d: torch.sigmoid(d["x"]),
    "tanh": lambda d: torch.tanh(d["x"]),
    "exp": lambda d: torch.exp(d["x"]),
    "sin": lambda d: torch.sin(d["x"]),
    "cos": lambda d: torch.cos(d["x"]),
    "atan": lambda d: torch.atan(d["x"]),
    "neg": lambda d: -d["x"],
    "abs": lambda d: torch.abs(d["x"]),
}
POSITIVE: dict[str, Fwd] = {
    "log": lambda d: torch.log(d["x"]),
    "sqrt": lambda d: torch.sqrt(d["x"]),
    "rsqrt": lambda d: torch.rsqrt(d["x"]),
    "tan": lambda d: torch.tan(d["x"]),  # on (0.25, 1.25): away from π/2
}
for _k, _f in UNARY.items():
    simple(f"unary_{_k}", _f, {"x": [3, 5]})
for _k, _f in POSITIVE.items():
    simple(f"unary_{_k}", _f, {"x": [4, 3]}, "positive")

BINARY: dict[str, Callable[[T, T], T]] = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.div,
    "max": torch.maximum,
    "min": torch.minimum,
}
for _k, _op in BINARY.items():
    # b [3, 1] broadcasts over a's leading axis and along its own size-1 axis
    case(f"binary_{_k}", {"a": ([2, 3, 4], "normal"),
                          "b": ([3, 1], "positive" if _k == "div" else "normal")},
         ["a", "b"])(lambda d, op=_op: op(d["a"], d["b"]))  # fmt: skip
case("binary_pow", {"a": ([3, 4], "positive"), "b": ([4], "normal")}, ["a", "b"])(
    lambda d: torch.pow(d["a"], d["b"])
)
simple("where", lambda d: torch.where(d["a"] > 0, d["a"] * d["b"], d["b"]),
       {"a": [3, 4], "b": [3, 4]})  # fmt: skip

# ------------------------------------------------------------------ matmul
MATMULS = [("matmul_2d", [3, 4], [4, 5]), ("matmul_batched", [2, 3, 4], [2, 4, 5]),
           ("matmul_broadcast", [2, 1, 3, 4], [3, 4, 2]), ("matmul_3d_by_2d", [2, 3, 4], [4, 5]),
           ("matmul_vec", [4], [4, 5])]  # fmt: skip
for _name, _sa, _sb in MATMULS:
    simple(_name, lambda d: d["a"] @ d["b"], {"a": _sa, "b": _sb})

# ------------------------------------------------- softmax / cross-entropy
simple("softmax_last", lambda d: torch.softmax(d["x"], -1), {"x": [3, 5]})
simple("softmax_mid", lambda d: torch.softmax(d["x"], 1), {"x": [2, 4, 3]})
simple("log_softmax", lambda d: torch.log_softmax(d["x"], -1), {"x": [3, 5]})
case("cross_entropy_labels", {"z": ([4, 6], "normal")}, ["z"],
     {"lab": np.array([0, 5, 2, 3], np.int32)})(
    lambda d: F.cross_entropy(d["z"], d["lab"].long(), reduction="none"))  # fmt: skip
case("cross_entropy_soft", {"z": ([4, 6], "normal"), "t": ([4, 6], "simplex")}, ["z", "t"])(
    lambda d: F.cross_entropy(d["z"], d["t"], reduction="none")
)

# -------------------------------------------------------------------- norms
simple("layer_norm", lambda d: F.layer_norm(d["x"], (6,), d["gm"], d["bt"], eps=1e-5),
       {"x": [2, 3, 6], "gm": [6], "bt": [6]})  # fmt: skip
simple("rms_norm", lambda d: F.rms_norm(d["x"], (8,), d["gm"], eps=1e-6),
       {"x": [2, 3, 8], "gm": [8]})  # fmt: skip
simple("rms_norm_bias", lambda d: F.rms_norm(d["x"], (8,), d["gm"], eps=1e-5) + d["bt"],
       {"x": [3, 8], "gm": [8], "bt": [8]})  # fmt: skip
simple("group_norm", lambda d: F.group_norm(d["x"], 2, d["gm"], d["bt"], eps=1e-5),
       {"x": [2, 4, 3, 2], "gm": [4], "bt": [4]})  # fmt: skip


@case("layer_norm2d", {"x": ([2, 4, 3, 2], "normal"), "gm": ([4], "normal"),
                       "bt": ([4], "normal")}, ["x", "gm", "bt"])  # fmt: skip
def _ln2d(d: dict[str, T]) -> T:
    y = F.layer_norm(d["x"].permute(0, 2, 3, 1), (4,), d["gm"], d["bt"], eps=1e-5)
    return y.permute(0, 3, 1, 2)


# ------------------------------------------------------- attention / rope
def attention(q: T, k: T, v: T, heads: int, kvh: int, mask: str, window: int = 0,
              scale: float | None = None) -> T:  # fmt: skip
    """Scaled dot-product attention on BSHD ``[b, s, heads·d]``: query head
    h reads key / value head ``h // (heads // kvh)``; ``causal``: key j ≤
    query i; ``sliding_window``: also i − j ≤ window."""
    b, s, _ = q.shape
    d = q.shape[-1] // heads
    kv = k.shape[1]
    qh = q.reshape(b, s, heads, d).transpose(1, 2)
    kh = k.reshape(b, kv, kvh, d).transpose(1, 2).repeat_interleave(heads // kvh, 1)
    vh = v.reshape(b, kv, kvh, d).transpose(1, 2).repeat_interleave(heads // kvh, 1)
    sc = (qh @ kh.transpose(-1, -2)) * (scale if scale is not None else 1 / math.sqrt(d))
    i = torch.arange(s)[:, None] + (kv - s)
    j = torch.arange(kv)[None, :]
    if mask != "none":
        vis = j <= i
        if mask == "sliding_window":
            vis = vis & (i - j <= window)
        sc = sc.masked_fill(~vis, float("-inf"))
    o = torch.softmax(sc, -1) @ vh
    return o.transpose(1, 2).reshape(b, s, heads * d)


ATTN = [("attention_causal_gqa", 4, 2, "causal", 0, None),
        ("attention_none_mqa", 4, 1, "none", 0, None),
        ("attention_window_scaled", 2, 2, "sliding_window", 2, 0.3)]  # fmt: skip
for _name, _h, _kvh, _mask, _win, _sc in ATTN:
    case(_name, {"q": ([1, 5, _h * 4], "normal"), "k": ([1, 5, _kvh * 4], "normal"),
                 "v": ([1, 5, _kvh * 4], "normal")}, ["q", "k", "v"])(
        lambda d, h=_h, kvh=_kvh, m=_mask, w=_win, sc=_sc: attention(
            d["q"], d["k"], d["v"], h, kvh, m, w, sc))  # fmt: skip


def rope(x: T, cos: T, sin: T, head_dim: int, n_rot: int, interleaved: bool) -> T:
    """RoPE on ``[b, s, heads·head_dim]``, the first ``n_rot`` lanes of each
    head rotated by the angles of ``cos`` / ``sin`` ``[s, n_rot/2]``:
    pairs (i, i + n_rot/2) (NeoX, rotate-half) or (2i, 2i + 1)."""
    b, s, hid = x.shape
    xh = x.reshape(b, s, hid // head_dim, head_dim)
    rot, rest = xh[..., :n_rot], xh[..., n_rot:]
    c, sn = cos[None, :, None, :], sin[None, :, None, :]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack([x1 * c - x2 * sn, x2 * c + x1 * sn], -1).flatten(-2)
    else:
        x1, x2 = rot[..., : n_rot // 2], rot[..., n_rot // 2 :]
        out = torch.cat([x1 * c - x2 * sn, x2 * c + x1 * sn], -1)
    return torch.cat([out, rest], -1).reshape(b, s, hid)


for _name, _nrot, _inter in [("rope_neox", 4, False), ("rope_interleaved", 4, True),
                             ("rope_neox_partial", 2, False)]:  # fmt: skip
    case(_name, {"x": ([1, 4, 8], "normal"), "cos": ([4, _nrot // 2], "angle_cos"),
                 "sin": ([4, _nrot // 2], "angle_sin")}, ["x"])(
        lambda d, nr=_nrot, it=_inter: rope(d["x"], d["cos"], d["sin"], 4, nr, it))  # fmt: skip

# ------------------------------------------------------------- reductions
for _kind, _fn in [("sum", torch.sum), ("mean", torch.mean), ("prod", torch.prod)]:
    simple(f"reduce_{_kind}_axis1", lambda d, f=_fn: f(d["x"], 1), {"x": [2, 3, 4]})
simple("reduce_sum_all", lambda d: d["x"].sum(), {"x": [2, 3, 4]})
simple("reduce_mean_keep", lambda d: d["x"].mean((0, 2), keepdim=True), {"x": [2, 3, 4]})
simple("reduce_max_last", lambda d: d["x"].amax(-1), {"x": [2, 3, 4]})
simple("reduce_min_keep", lambda d: d["x"].amin(1, keepdim=True), {"x": [2, 3, 4]})
simple("cumsum_axis1", lambda d: torch.cumsum(d["x"], 1), {"x": [2, 4, 3]})
simple("cumsum_exclusive", lambda d: torch.cumsum(d["x"], -1) - d["x"], {"x": [2, 4, 3]})

# ------------------------------------------------------ gather / indexing
case("gather_rows", {"tab": ([5, 3], "normal")}, ["tab"],
     {"idx": np.array([[1, 3, 1], [0, 1, 4]], np.int32)})(
    lambda d: d["tab"][d["idx"].long()])  # fmt: skip
case("gather_axis", {"x": ([2, 3, 2], "normal")}, ["x"],
     {"idx": np.array([2, 0, 2, 1], np.int32)})(
    lambda d: torch.index_select(d["x"], 1, d["idx"].long()))  # fmt: skip
case("gather_elements", {"x": ([2, 3, 3], "normal")}, ["x"],
     {"idx": np.array([[[1, 2], [0, 2], [2, 2]], [[0, 0], [1, 1], [1, 0]]], np.int32)})(
    lambda d: torch.gather(d["x"], 1, d["idx"].long()))  # fmt: skip


@case("gather_nd", {"x": ([2, 3, 4], "normal")}, ["x"],
      {"idx": np.array([[[0, 2], [1, 1]], [[0, 2], [1, 0]]], np.int32)})  # fmt: skip
def _gather_nd(d: dict[str, T]) -> T:
    i = d["idx"].long()
    return d["x"][i[..., 0], i[..., 1]]


case("scatter_add", {"u": ([3, 2, 3], "normal")}, ["u"], {"idx": np.array([2, 0, 2], np.int32)})(
    lambda d: torch.zeros(4, 2, 3, dtype=d["u"].dtype).index_add(0, d["idx"].long(), d["u"])
)

# ------------------------------------------------------------ conv / pool
simple("conv2d_pad", lambda d: F.conv2d(d["x"], d["w"], d["b"], padding=1),
       {"x": [1, 2, 5, 5], "w": [3, 2, 3, 3], "b": [3]})  # fmt: skip
simple("conv2d_stride_groups",
       lambda d: F.conv2d(d["x"], d["w"], d["b"], stride=2, padding=1, groups=2),
       {"x": [2, 4, 7, 6], "w": [4, 2, 3, 3], "b": [4]})  # fmt: skip
simple("conv2d_dilation", lambda d: F.conv2d(d["x"], d["w"], stride=1, padding=2, dilation=2),
       {"x": [1, 3, 6, 5], "w": [2, 3, 3, 2]})  # fmt: skip
simple("max_pool_2x2", lambda d: F.max_pool2d(d["x"], 2), {"x": [1, 2, 6, 4]})
simple("max_pool_3s2p1", lambda d: F.max_pool2d(d["x"], 3, 2, 1), {"x": [2, 2, 5, 5]})
simple("avg_pool_2x2", lambda d: F.avg_pool2d(d["x"], 2), {"x": [1, 2, 6, 4]})
simple("avg_pool_3s2p1", lambda d: F.avg_pool2d(d["x"], 3, 2, 1, count_include_pad=False),
       {"x": [2, 2, 5, 5]})  # fmt: skip

# ------------------------------------------------------------- shape ops
simple("concat", lambda d: torch.cat([d["a"], d["b"]], 1), {"a": [2, 3, 4], "b": [2, 2, 4]})
simple("slice", lambda d: d["x"][:, 1:3], {"x": [2, 5, 3]})
simple("transpose", lambda d: d["x"].permute(2, 0, 1), {"x": [2, 3, 4]})
simple("reshape", lambda d: d["x"].reshape(4, 6), {"x": [2, 3, 4]})
simple("expand", lambda d: d["x"].expand(3, 2, 4), {"x": [1, 2, 4]})
simple("reverse", lambda d: torch.flip(d["x"], [1]), {"x": [2, 3, 4]})


# ---------------------------------------------------------------- recurrent
def recurrent(kind: str, d: dict[str, T], bidir: bool, layers: int, relu: bool = False) -> T:
    """LSTM (gates i, f, g, o) / GRU (r, z, n) / Elman RNN written out step
    by step from the rlx layout (python/rlx/reference/sequence.py, torch.nn's
    gate order): ``w_ih [L·D, G·h, in_w]`` (layer 0 reads the first ``in``
    columns, later layers the first ``D·h``), ``w_hh [L·D, G·h, h]``, LSTM /
    RNN ``b [L·D, G·h]`` (= b_ih + b_hh), GRU ``bi`` / ``bh`` separate
    (``b_hn`` inside ``r ⊙ (·)``), ``h0`` / ``c0 [L·D, b, h]``; direction 1
    runs backwards."""
    y = d["x"]
    s = y.shape[1]
    nd = 2 if bidir else 1
    for layer in range(layers):
        outs = []
        for di in range(nd):
            li = layer * nd + di
            h = d["h0"][li]
            c = d["c0"][li] if kind == "lstm" else None
            w = d["w_ih"][li, :, : y.shape[-1]]
            xw = y @ w.T + (d["bi"][li] if kind == "gru" else d["b"][li])
            ys: list[T] = [y[:, 0, :0]] * s
            for t in range(s - 1, -1, -1) if di == 1 else range(s):
                hw = h @ d["w_hh"][li].T
                if kind == "lstm":
                    i, f, gg, o = (xw[:, t] + hw).chunk(4, -1)
                    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(gg)
                    h = torch.sigmoid(o) * torch.tanh(c)
                elif kind == "gru":
                    xr, xz, xn = xw[:, t].chunk(3, -1)
                    hr, hz, hn = (hw + d["bh"][li]).chunk(3, -1)
                    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
                    h = (1 - z) * torch.tanh(xn + r * hn) + z * h
                else:
                    h = torch.relu(xw[:, t] + hw) if relu else torch.tanh(xw[:, t] + hw)
                ys[t] = h
            outs.append(torch.stack(ys, 1))
        y = torch.cat(outs, -1)
    return y


#: batch, sequence, input width and hidden size of every recurrent case
_B, _S, _IN, _H = 2, 4, 3, 3


def recurrent_shapes(kind: str, bidir: bool, layers: int) -> dict[str, list[int]]:
    """Input shapes of a recurrent case on rlx's stacked layout."""
    nd = 2 if bidir else 1
    g = {"lstm": 4, "gru": 3, "rnn": 1}[kind]
    in_w = _IN if layers == 1 else max(_IN, nd * _H)
    slots = layers * nd
    sh = {"x": [_B, _S, _IN], "w_ih": [slots, g * _H, in_w], "w_hh": [slots, g * _H, _H]}
    gb = [slots, g * _H]
    sh.update({"bi": gb, "bh": gb} if kind == "gru" else {"b": gb})
    sh["h0"] = [slots, _B, _H]
    if kind == "lstm":
        sh["c0"] = [slots, _B, _H]
    return sh


for _name, _kind, _bi, _nl, _relu in RECURRENT:
    simple(_name, lambda d, k=_kind, bi=_bi, nl=_nl, re=_relu: recurrent(k, d, bi, nl, re),
           recurrent_shapes(_kind, _bi, _nl))  # fmt: skip


# ------------------------------------------- transposed conv / resize / misc
simple("conv_transpose2d_stride_pad",
       lambda d: F.conv_transpose2d(d["x"], d["w"], d["b"], stride=2, padding=1, output_padding=1),
       {"x": [1, 2, 3, 4], "w": [2, 3, 3, 3], "b": [3]})  # fmt: skip
simple("conv_transpose2d_groups_dilation",
       lambda d: F.conv_transpose2d(d["x"], d["w"], stride=1, padding=1, dilation=2, groups=2),
       {"x": [2, 4, 3, 3], "w": [4, 1, 2, 3]})  # fmt: skip
simple("resize_nearest2x", lambda d: F.interpolate(d["x"], scale_factor=2, mode="nearest"),
       {"x": [2, 2, 3, 2]})  # fmt: skip
# im2col [n, c·kh·kw, h_out·w_out], channel-major like F.unfold
simple("im2col", lambda d: F.unfold(d["x"], (2, 3), stride=(2, 1), padding=1, dilation=(1, 2)),
       {"x": [2, 2, 5, 6]})  # fmt: skip
case("fma", {"a": ([2, 3, 4], "normal"), "b": ([3, 1], "normal"), "c": ([4], "normal")},
     ["a", "b", "c"])(lambda d: d["a"] * d["b"] + d["c"])  # fmt: skip
# f32 → f16 → f32: the forward is rounded to f16, the gradient is the identity
simple("cast_f16_round_trip", lambda d: d["x"].float().half().double(), {"x": [3, 5]})


# ----------------------------------------------------- signal / DiT blocks
def fft_blocks(x: T, inverse: bool, norm: str) -> T:
    """rlx's fft on the real block layout ``[.., 2n]`` = ``[re.., im..]``."""
    n = x.shape[-1] // 2
    z = torch.complex(x[..., :n], x[..., n:])
    y = (torch.fft.ifft if inverse else torch.fft.fft)(z, norm=norm)
    return torch.cat([y.real, y.imag], -1)


FFTS = [("fft", False, "backward"), ("fft_ortho", False, "ortho"), ("ifft", True, "backward"),
        ("ifft_forward_norm", True, "forward")]  # fmt: skip
for _name, _inv, _norm in FFTS:
    simple(_name, lambda d, i=_inv, nm=_norm: fft_blocks(d["x"], i, nm), {"x": [2, 3, 16]})


@case("log_mel", {"spec": ([4, 16], "normal"), "filters": ([3, 5], "positive")}, ["spec"])
def _log_mel(d: dict[str, T]) -> T:
    """``log(filters @ |spec[:n_bins]|² + 1e-10)`` on block rows, n_fft 8,
    n_bins 5 (filters' width); rlx gives the filter bank no gradient."""
    nf, nb = 8, d["filters"].shape[1]
    p = d["spec"][:, :nb] ** 2 + d["spec"][:, nf : nf + nb] ** 2
    return torch.log(p @ d["filters"].T + 1e-10)


def ada_norm(x: T, scale: T, shift: T, layer_norm: bool, eps: float) -> T:
    """DiT adaLN ``norm(x)·(1 + scale) + shift``, LayerNorm / RMSNorm
    without affine (python/rlx/reference/norm.py)."""
    if layer_norm:
        y = F.layer_norm(x, x.shape[-1:], eps=eps)
    else:
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * (1 + scale) + shift


simple("ada_layer_norm", lambda d: ada_norm(d["x"], d["sc"], d["sh"], True, 1e-6),
       {"x": [2, 3, 8], "sc": [2, 1, 8], "sh": [2, 1, 8]})  # fmt: skip
simple("ada_rms_norm", lambda d: ada_norm(d["x"], d["sc"], d["sh"], False, 1e-5),
       {"x": [2, 3, 8], "sc": [2, 3, 8], "sh": [2, 3, 8]})  # fmt: skip
simple("gated_residual", lambda d: d["x"] + d["gt"] * d["y"],
       {"x": [2, 3, 8], "y": [2, 3, 8], "gt": [2, 1, 8]})  # fmt: skip


# ------------------------------------- torch.nn recurrent nets with final states
def torch_recurrent(kind: str, d: dict[str, T], bidir: bool, layers: int, relu: bool) -> T:
    """torch.nn.LSTM / GRU / RNN themselves (batch_first) run on rlx's stacked
    weights through ``torch.func.functional_call``, the output followed by
    rlx's ``carry`` rows: each layer's final h (directions side by side),
    then for the LSTM each layer's final c."""
    nd = 2 if bidir else 1
    hid = d["w_hh"].shape[-1]
    n_in = d["x"].shape[-1]
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}[kind]
    kw = {"nonlinearity": "relu" if relu else "tanh"} if kind == "rnn" else {}
    mod = cls(n_in, hid, num_layers=layers, bidirectional=bidir, batch_first=True, **kw)
    params: dict[str, T] = {}
    for layer in range(layers):
        width = n_in if layer == 0 else nd * hid
        for di in range(nd):
            li, sfx = layer * nd + di, f"_l{layer}" + ("_reverse" if di else "")
            params["weight_ih" + sfx] = d["w_ih"][li, :, :width]
            params["weight_hh" + sfx] = d["w_hh"][li]
            if kind == "gru":
                params["bias_ih" + sfx], params["bias_hh" + sfx] = d["bi"][li], d["bh"][li]
            else:  # rlx's one bias is b_ih + b_hh
                params["bias_ih" + sfx] = d["b"][li]
                params["bias_hh" + sfx] = torch.zeros_like(d["b"][li])
    mod = mod.double()
    state = (d["h0"], d["c0"]) if kind == "lstm" else d["h0"]
    y, fin = torch.func.functional_call(mod, params, (d["x"], state))
    finals = list(fin) if kind == "lstm" else [fin]
    b = d["x"].shape[0]
    rows = [f.reshape(layers, nd, b, hid).permute(0, 2, 1, 3).reshape(layers, b, 1, nd * hid)
            for f in finals]  # fmt: skip
    return torch.cat([y, *(r[i] for r in rows for i in range(layers))], 1)


for _name, _kind, _bi, _nl, _relu in RECURRENT_CARRY:
    simple(_name, lambda d, k=_kind, bi=_bi, nl=_nl, re=_relu: torch_recurrent(k, d, bi, nl, re),
           recurrent_shapes(_kind, _bi, _nl))  # fmt: skip


# ------------------------------------------- scaled formats and GGUF weights
#: torch's own float8 / int8 decoding of the u8 codes; the scale-format maxima
FP8 = {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}
FMT_MAX = {"fp8_e4m3": 448.0, "fp8_e5m2": 57344.0, "int8": 127.0}
_crng = np.random.default_rng(1818)


def codes(fmt: str, shape: list[int]) -> np.ndarray:
    """Random u8 codes of ``fmt`` (finite values; encoded by torch)."""
    v = torch.tensor(_crng.standard_normal(shape) * 20.0, dtype=torch.float32)
    if fmt == "int8":
        return v.round().clamp(-127, 127).to(torch.int8).view(torch.uint8).numpy()
    return v.to(FP8[fmt]).view(torch.uint8).numpy()


def decode(c: T, fmt: str) -> T:
    dt = torch.int8 if fmt == "int8" else FP8[fmt]
    return c.to(torch.uint8).view(dt).double()


def expand(s: T, layout: str, r: int, c: int) -> T:
    """A scale per tensor ``[1]``, per row ``[r]`` or per block ``[r, ⌈c/size⌉]``."""
    if layout == "per_tensor":
        return s.reshape(1, 1).expand(r, c)
    if layout == "per_row":
        return s.reshape(r, 1).expand(r, c)
    size = int(layout.split(":")[1])
    return s.repeat_interleave(size, 1)[:, :c]


def group_amax(x: T, layout: str) -> T:
    a = x.abs()
    if layout == "per_tensor":
        return a.amax().reshape(1)
    if layout == "per_row":
        return a.amax(1)
    size = int(layout.split(":")[1])
    nb = -(-a.shape[1] // size)
    return F.pad(a, (0, nb * size - a.shape[1])).reshape(a.shape[0], nb, size).amax(2)


for _fmt, _lay, _m, _n, _k in [("fp8_e4m3", "block:16", 3, 4, 40), ("int8", "per_row", 2, 5, 7),
                               ("fp8_e5m2", "per_tensor", 3, 2, 9)]:  # fmt: skip
    _nb = -(-_k // 16)
    _sd = {"per_tensor": ([1], [1]), "per_row": ([_m], [_n])}.get(_lay, ([_m, _nb], [_n, _nb]))

    def _smm(d: dict[str, T], fmt: str = _fmt, lay: str = _lay) -> T:
        (m, k), n = d["lhs"].shape, d["rhs"].shape[0]
        a = decode(d["lhs"], fmt) * expand(d["sa"], lay, m, k)
        b = decode(d["rhs"], fmt) * expand(d["sb"], lay, n, k)
        return a @ b.T + d["bias"]

    case(f"scaled_mat_mul_{_fmt}_{_lay.replace(':', '')}",
         {"sa": (_sd[0], "positive"), "sb": (_sd[1], "positive"), "bias": ([_n], "normal")},
         ["sa", "sb", "bias"],
         {"lhs": codes(_fmt, [_m, _k]), "rhs": codes(_fmt, [_n, _k])})(_smm)  # fmt: skip

    def _sdq(d: dict[str, T], fmt: str = _fmt, lay: str = _lay) -> T:
        r, c = d["codes"].shape
        return decode(d["codes"], fmt) * expand(d["s"], lay, r, c)

    case(f"scaled_dequantize_{_fmt}_{_lay.replace(':', '')}", {"s": (_sd[0], "positive")}, ["s"],
         {"codes": codes(_fmt, [_m, _k])})(_sdq)  # fmt: skip
    case(f"scaled_quant_scale_{_fmt}_{_lay.replace(':', '')}", {"x": ([_m, _k], "normal")},
         ["x"])(lambda d, f=_fmt, lay=_lay: group_amax(d["x"], lay) / FMT_MAX[f])  # fmt: skip


def gguf_weight(typ: str, rows: int, k: int) -> np.ndarray:
    """Packed GGUF rows quantised by gguf-py (llama.cpp's Python package)."""
    from gguf import GGMLQuantizationType, quants

    w = _crng.standard_normal((rows, k)).astype(np.float32)
    return quants.quantize(w, GGMLQuantizationType[typ.upper()])


def gguf_dense(wq: T, typ: str) -> T:
    from gguf import GGMLQuantizationType, quants

    return torch.from_numpy(quants.dequantize(wq.numpy(), GGMLQuantizationType[typ.upper()]))


for _typ in ["q8_0", "q4_0"]:
    case(f"dequant_mat_mul_{_typ}", {"x": ([2, 3, 64], "normal")}, ["x"],
         {"w_q": gguf_weight(_typ, 5, 64)})(
        lambda d, t=_typ: d["x"] @ gguf_dense(d["w_q"], t).double().T)  # fmt: skip
_EIDX = np.array([2, 0, 1, 2], np.int32)


@case("dequant_grouped_mat_mul_q8_0", {"x": ([4, 32], "normal")}, ["x"],
      {"w_q": gguf_weight("q8_0", 3 * 5, 32).reshape(3, 5, -1), "idx": _EIDX})  # fmt: skip
def _dequant_grouped(d: dict[str, T]) -> T:
    """Row ``m`` times its expert ``idx[m]``'s dequantised ``[n, k]`` weight."""
    w = torch.stack([gguf_dense(e, "q8_0") for e in d["w_q"]]).double()
    return torch.einsum("mk,mnk->mn", d["x"], w[d["idx"]])


# the cases of the fused / structured ops (scan, SPD, scatter, ...) and of
# the Gaussian splats, appended after the ones above (scripts/op_grad_cases_*.py)
import op_grad_cases_extra  # noqa: E402
import op_grad_cases_splat  # noqa: E402

op_grad_cases_extra.register(sys.modules[__name__])
op_grad_cases_splat.register(sys.modules[__name__])


def inputs(rng: np.random.Generator, floats: dict[str, tuple[list[int], Domain]]) -> dict:
    out: dict[str, np.ndarray] = {}
    ang = rng.uniform(0, 3, (64,))
    for name, (shape, domain) in floats.items():
        n = int(np.prod(shape))
        if isinstance(domain, np.ndarray):  # fixed values (a scene, SPD matrices)
            assert list(domain.shape) == shape, (name, domain.shape, shape)
            v = domain
        elif domain == "normal":
            v = rng.standard_normal(shape)
        elif domain == "positive":
            v = rng.uniform(0.25, 1.25, shape)
        elif domain == "simplex":
            e = np.exp(rng.standard_normal(shape))
            v = e / e.sum(-1, keepdims=True)
        elif domain == "angle_cos":
            v = np.cos(ang[:n]).reshape(shape)
        elif domain == "angle_sin":
            v = np.sin(ang[:n]).reshape(shape)
        else:
            raise ValueError(domain)
        out[name] = v.astype(np.float32)
    return out


def main() -> None:
    rng = np.random.default_rng(18)
    res: dict[str, np.ndarray] = {}
    for name, (floats, ints, wrt, fwd) in CASES.items():
        fl = inputs(rng, floats)
        ts = {
            k: torch.tensor(v, dtype=torch.float64, requires_grad=k in wrt) for k, v in fl.items()
        }
        ts.update({k: torch.from_numpy(v if v.dtype == np.uint8 else v.astype(np.int64))
                   for k, v in ints.items()})  # fmt: skip
        out = fwd(ts)
        r = rng.standard_normal(tuple(out.shape)).astype(np.float32)
        grads = torch.autograd.grad(out, [ts[k] for k in wrt], torch.tensor(r, dtype=torch.float64))
        for k, v in {**fl, **ints}.items():
            res[f"{name}.in.{k}"] = v
        res[f"{name}.r"] = r
        res[f"{name}.out"] = out.detach().numpy().astype(np.float32)
        for k, gv in zip(wrt, grads):
            res[f"{name}.grad.{k}"] = gv.numpy().astype(np.float32)
    dst = ROOT / "tests" / "fixtures" / "grad" / "ops.npz"
    np.savez_compressed(dst, **res)
    print(
        f"wrote {dst} ({len(CASES)} cases, {dst.stat().st_size} bytes), torch {torch.__version__}"
    )


if __name__ == "__main__":
    main()
