"""Per-op gradients against torch.autograd fixtures on host and metal-sim.

``tests/fixtures/grad/ops.npz`` (``scripts/make_op_grad_fixtures.py``, run
by hand with torch; CI never imports it) holds, per case, small inputs, an
upstream gradient ``r``, torch's forward in float64 and torch.autograd's
gradients of ``Σ out·r``. Here the same op is built with ``rlx.Graph``, the
backward by ``rlx.grad``, compiled for each device in f32 and run: the
forward and every gradient agree with torch to ``max|got − want| /
max|want| ≤ 1e-4``.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import rlx
from rlx.ops.misc import SplatConfig

sys.path.insert(0, str(Path(__file__).parent))
from _recurrent_cases import RECURRENT, RECURRENT_CARRY  # noqa: E402

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "grad" / "ops.npz"
TOL = 1e-4
G = rlx.Graph
N = rlx.Node
Build = Callable[[G, dict[str, N]], N]

BUILDS: dict[str, Build] = {}

for _k in ["gelu", "gelu_approx", "silu", "relu", "sigmoid", "tanh", "exp", "sin", "cos", "atan",
           "neg", "abs", "log", "sqrt", "rsqrt", "tan"]:  # fmt: skip
    BUILDS[f"unary_{_k}"] = lambda g, n, k=_k: g.activation(n["x"], k)
for _k in ["add", "sub", "mul", "div", "max", "min", "pow"]:
    BUILDS[f"binary_{_k}"] = lambda g, n, k=_k: g.binary(n["a"], n["b"], k)
BUILDS["where"] = lambda g, n: g.where(n["a"] > 0.0, n["a"] * n["b"], n["b"])
for _k in ["matmul_2d", "matmul_batched", "matmul_broadcast", "matmul_3d_by_2d", "matmul_vec"]:
    BUILDS[_k] = lambda g, n: n["a"] @ n["b"]
BUILDS["softmax_last"] = lambda g, n: g.softmax(n["x"], -1)
BUILDS["softmax_mid"] = lambda g, n: g.softmax(n["x"], 1)


def _log_softmax(g: G, n: dict[str, N]) -> N:
    z = n["x"] - g.max(n["x"], -1, keep_dims=True)
    return z - g.log(g.sum(g.exp(z), -1, keep_dims=True))


BUILDS["log_softmax"] = _log_softmax
BUILDS["cross_entropy_labels"] = lambda g, n: g.softmax_cross_entropy(n["z"], n["lab"])
BUILDS["cross_entropy_soft"] = lambda g, n: g.softmax_cross_entropy(n["z"], n["t"])
BUILDS["layer_norm"] = lambda g, n: g.layer_norm(n["x"], n["gm"], n["bt"], eps=1e-5)
BUILDS["rms_norm"] = lambda g, n: g.rms_norm(n["x"], n["gm"], eps=1e-6)
BUILDS["rms_norm_bias"] = lambda g, n: g.rms_norm(n["x"], n["gm"], n["bt"], eps=1e-5)
BUILDS["group_norm"] = lambda g, n: g.group_norm(n["x"], n["gm"], n["bt"], num_groups=2)
BUILDS["layer_norm2d"] = lambda g, n: g.layer_norm2d(n["x"], n["gm"], n["bt"], eps=1e-5)
BUILDS["attention_causal_gqa"] = lambda g, n: g.attention(
    n["q"], n["k"], n["v"], heads=4, kv_heads=2, mask="causal"
)
BUILDS["attention_none_mqa"] = lambda g, n: g.attention(
    n["q"], n["k"], n["v"], heads=4, kv_heads=1, mask="none"
)
BUILDS["attention_window_scaled"] = lambda g, n: g.attention(
    n["q"], n["k"], n["v"], heads=2, kv_heads=2, mask="sliding_window", window=2, score_scale=0.3
)
BUILDS["rope_neox"] = lambda g, n: g.rope(n["x"], n["cos"], n["sin"], head_dim=4)
BUILDS["rope_interleaved"] = lambda g, n: g.rope(
    n["x"], n["cos"], n["sin"], head_dim=4, kind="interleaved"
)
BUILDS["rope_neox_partial"] = lambda g, n: g.rope(n["x"], n["cos"], n["sin"], head_dim=4, n_rot=2)
for _k in ["sum", "mean", "prod"]:
    BUILDS[f"reduce_{_k}_axis1"] = lambda g, n, k=_k: g.reduce(n["x"], k, [1])
BUILDS["reduce_sum_all"] = lambda g, n: g.sum(n["x"])
BUILDS["reduce_mean_keep"] = lambda g, n: g.mean(n["x"], [0, 2], keep_dims=True)
BUILDS["reduce_max_last"] = lambda g, n: g.max(n["x"], -1)
BUILDS["reduce_min_keep"] = lambda g, n: g.min(n["x"], 1, keep_dims=True)
BUILDS["cumsum_axis1"] = lambda g, n: g.cumsum(n["x"], 1)
BUILDS["cumsum_exclusive"] = lambda g, n: g.cumsum(n["x"], -1, exclusive=True)
BUILDS["gather_rows"] = lambda g, n: g.gather(n["tab"], n["idx"])
BUILDS["gather_axis"] = lambda g, n: g.gather_axis(n["x"], n["idx"], 1)
BUILDS["gather_elements"] = lambda g, n: g.gather_elements(n["x"], n["idx"], 1)
BUILDS["gather_nd"] = lambda g, n: g.gather_nd(n["x"], n["idx"])
BUILDS["scatter_add"] = lambda g, n: g.scatter_add(n["u"], n["idx"], 4)
BUILDS["conv2d_pad"] = lambda g, n: g.conv2d(n["x"], n["w"], n["b"], padding=1)
BUILDS["conv2d_stride_groups"] = lambda g, n: g.conv2d(
    n["x"], n["w"], n["b"], stride=2, padding=1, groups=2
)
BUILDS["conv2d_dilation"] = lambda g, n: g.conv2d(n["x"], n["w"], padding=2, dilation=2)
BUILDS["max_pool_2x2"] = lambda g, n: g.max_pool2d(n["x"], 2)
BUILDS["max_pool_3s2p1"] = lambda g, n: g.max_pool2d(n["x"], 3, stride=2, padding=1)
BUILDS["avg_pool_2x2"] = lambda g, n: g.avg_pool2d(n["x"], 2)
BUILDS["avg_pool_3s2p1"] = lambda g, n: g.avg_pool2d(n["x"], 3, stride=2, padding=1)
BUILDS["concat"] = lambda g, n: g.concat([n["a"], n["b"]], 1)
BUILDS["slice"] = lambda g, n: g.narrow(n["x"], 1, 1, 2)
BUILDS["transpose"] = lambda g, n: g.transpose(n["x"], [2, 0, 1])
BUILDS["reshape"] = lambda g, n: g.reshape(n["x"], [4, 6])
BUILDS["expand"] = lambda g, n: g.expand(n["x"], [3, 2, 4])
BUILDS["reverse"] = lambda g, n: g.reverse(n["x"], 1)
BUILDS["conv_transpose2d_stride_pad"] = lambda g, n: g.conv_transpose2d(
    n["x"], n["w"], n["b"], stride=2, padding=1, output_padding=1
)
BUILDS["conv_transpose2d_groups_dilation"] = lambda g, n: g.conv_transpose2d(
    n["x"], n["w"], padding=1, dilation=2, groups=2
)
BUILDS["resize_nearest2x"] = lambda g, n: g.resize_nearest2x(n["x"])
BUILDS["im2col"] = lambda g, n: g.im2col(n["x"], (2, 3), stride=(2, 1), padding=1, dilation=(1, 2))
BUILDS["fma"] = lambda g, n: g.fma(n["a"], n["b"], n["c"])
BUILDS["cast_f16_round_trip"] = lambda g, n: g.cast(g.cast(n["x"], "f16"), "f32")

for _name, _kind, _bi, _nl, _relu in RECURRENT:
    if _kind == "lstm":
        BUILDS[_name] = lambda g, n, bi=_bi, nl=_nl: g.lstm(
            n["x"], n["w_ih"], n["w_hh"], n["b"], n["h0"], n["c0"], bidirectional=bi, num_layers=nl
        )
    elif _kind == "gru":
        BUILDS[_name] = lambda g, n, bi=_bi, nl=_nl: g.gru(
            n["x"], n["w_ih"], n["w_hh"], n["bi"], n["bh"], n["h0"], bidirectional=bi, num_layers=nl
        )
    else:
        BUILDS[_name] = lambda g, n, bi=_bi, nl=_nl, re=_relu: g.rnn(
            n["x"], n["w_ih"], n["w_hh"], n["b"], n["h0"], bidirectional=bi, num_layers=nl, relu=re
        )

FFTS = [("fft", False, "backward"), ("fft_ortho", False, "ortho"), ("ifft", True, "backward"),
        ("ifft_forward_norm", True, "forward")]  # fmt: skip
for _name, _inv, _norm in FFTS:
    BUILDS[_name] = lambda g, n, i=_inv, nm=_norm: g.fft(n["x"], inverse=i, norm=nm)
BUILDS["log_mel"] = lambda g, n: g.log_mel(n["spec"], n["filters"], n_fft=8)
BUILDS["ada_layer_norm"] = lambda g, n: g.ada_layer_norm(n["x"], n["sc"], n["sh"], eps=1e-6)
BUILDS["ada_rms_norm"] = lambda g, n: g.ada_layer_norm(
    n["x"], n["sc"], n["sh"], eps=1e-5, layer_norm=False
)
BUILDS["gated_residual"] = lambda g, n: g.gated_residual(n["x"], n["y"], n["gt"])

# torch.nn's own nets; the output followed by the carry rows (final h, c)
for _name, _kind, _bi, _nl, _relu in RECURRENT_CARRY:
    _kw = dict(bidirectional=_bi, num_layers=_nl, carry=True)
    if _kind == "lstm":
        BUILDS[_name] = lambda g, n, kw=_kw: g.lstm(
            n["x"], n["w_ih"], n["w_hh"], n["b"], n["h0"], n["c0"], **kw
        )
    elif _kind == "gru":
        BUILDS[_name] = lambda g, n, kw=_kw: g.gru(
            n["x"], n["w_ih"], n["w_hh"], n["bi"], n["bh"], n["h0"], **kw
        )
    else:
        BUILDS[_name] = lambda g, n, kw=_kw, re=_relu: g.rnn(
            n["x"], n["w_ih"], n["w_hh"], n["b"], n["h0"], relu=re, **kw
        )

# the scaled formats (codes decoded by torch's float8 / int8) and GGUF
# weights quantised and dequantised by gguf-py
for _fmt, _lay in [("fp8_e4m3", "block:16"), ("int8", "per_row"), ("fp8_e5m2", "per_tensor")]:
    _sfx = f"{_fmt}_{_lay.replace(':', '')}"
    BUILDS[f"scaled_mat_mul_{_sfx}"] = lambda g, n, f=_fmt, lay=_lay: g.scaled_matmul(
        n["lhs"], n["rhs"], n["sa"], n["sb"], n["bias"], lhs_fmt=f, rhs_fmt=f, layout=lay
    )
    BUILDS[f"scaled_dequantize_{_sfx}"] = lambda g, n, f=_fmt, lay=_lay: g.scaled_dequantize(
        n["codes"], n["s"], fmt=f, layout=lay
    )
    BUILDS[f"scaled_quant_scale_{_sfx}"] = lambda g, n, f=_fmt, lay=_lay: g.scaled_quant_scale(
        n["x"], fmt=f, layout=lay
    )
for _typ in ["q8_0", "q4_0"]:
    BUILDS[f"dequant_mat_mul_{_typ}"] = lambda g, n, t=_typ: g.dequant_matmul(
        n["x"], n["w_q"], scheme=t
    )
BUILDS["dequant_grouped_mat_mul_q8_0"] = lambda g, n: g.dequant_grouped_matmul(
    n["x"], n["w_q"], n["idx"], scheme="q8_0"
)

# ------------------------------------------- fused and structured ops
for _act in ["none", "gelu", "gelu_approx", "silu", "relu", "sigmoid", "tanh"]:
    BUILDS[f"fused_mat_mul_bias_act_{_act}"] = lambda g, n, a=_act: g.matmul_bias_act(
        n["a"], n["w"], n["bias"], act=None if a == "none" else a
    )
BUILDS["fused_swiglu"] = lambda g, n: g.swiglu(n["x"])
BUILDS["fused_swiglu_gate_first"] = lambda g, n: g.swiglu(n["x"], gate_first=True)
BUILDS["elementwise_region_chain"] = lambda g, n: g.elementwise_region(
    [n["x0"], n["x1"], n["x2"]],
    [("mul", "x0", "x1"), ("sigmoid", "s0"), ("div", "s1", "x2"), ("max", "s2", "x0"),
     ("pow", "x2", "x1"), ("sub", "s3", "s4"), ("atan", "s5"), ("mul", "s6", "s0")],
)  # fmt: skip
BUILDS["elementwise_region_f16"] = lambda g, n: g.elementwise_region(
    [n["x0"], n["x1"]],
    [("cast", "f16", "x0"), ("cast", "f32", "s0"), ("gelu", "s1"), ("mul", "s2", "x1"),
     ("exp", "s3")],
)  # fmt: skip
BUILDS["grouped_mat_mul"] = lambda g, n: g.grouped_matmul(n["x"], n["w"], n["idx"])
BUILDS["dequant_mat_mul_t_q8_0"] = lambda g, n: g.dequant_matmul_t(
    n["dy"], n["w_q"], scheme="q8_0", k=64
)
BUILDS["dequant_mat_mul_t_q4_k"] = lambda g, n: g.dequant_matmul_t(
    n["dy"], n["w_q"], scheme="q4_k", k=256
)
BUILDS["fused_residual_ln"] = lambda g, n: g.residual_layer_norm(
    n["x"], n["res"], n["gm"], n["bt"], eps=1e-5
)
BUILDS["fused_residual_ln_bias"] = lambda g, n: g.residual_layer_norm(
    n["x"], n["res"], n["gm"], n["bt"], n["b"], eps=1e-5
)
BUILDS["fused_residual_rms_norm"] = lambda g, n: g.residual_rms_norm(
    n["x"], n["res"], n["gm"], eps=1e-6
)
BUILDS["fused_residual_rms_norm_bias_beta"] = lambda g, n: g.residual_rms_norm(
    n["x"], n["res"], n["gm"], n["bt"], n["b"], eps=1e-5
)
BUILDS["axial_rope2d"] = lambda g, n: g.axial_rope2d(
    n["x"], end_x=3, end_y=2, head_dim=8, num_heads=2
)
BUILDS["axial_rope2d_repeat"] = lambda g, n: g.axial_rope2d(
    n["x"], end_x=2, end_y=2, head_dim=8, num_heads=1, theta=100.0, repeat_factor=3
)
BUILDS["fused_attention_block_rope_causal"] = lambda g, n: g.fused_attention_block(
    n["x"], n["w_qkv"], n["w_out"], heads=2, cos=n["cos"], sin=n["sin"]
)
BUILDS["fused_attention_block_plain"] = lambda g, n: g.fused_attention_block(
    n["x"], n["w_qkv"], n["w_out"], heads=3, mask=None
)
BUILDS["fused_attention_block_rope_mask"] = lambda g, n: g.fused_attention_block(
    n["x"], n["w_qkv"], n["w_out"], heads=2, cos=n["cos"], sin=n["sin"], mask="custom",
    mask_input=n["mask"],
)  # fmt: skip
BUILDS["scatter_elements_axis0"] = lambda g, n: g.scatter_elements(n["data"], n["idx"], n["upd"])
BUILDS["scatter_elements_last_axis"] = lambda g, n: g.scatter_elements(
    n["data"], n["idx"], n["upd"], axis=-1
)
BUILDS["scatter_nd_rows"] = lambda g, n: g.scatter_nd(n["data"], n["idx"], n["upd"])
BUILDS["scatter_nd_elements"] = lambda g, n: g.scatter_nd(n["data"], n["idx"], n["upd"])


def _scan_elman(g: G, n: dict[str, N]) -> N:
    """Carries h and the weight (passed through); y = the new h."""
    b = rlx.Graph("elman")
    h, w, x = b.input("h", [2, 4]), b.input("w", [4, 4]), b.input("x", [2, 4])
    hn = b.tanh(h @ (w * 0.5) + x)
    b.outputs(hn, w, hn)
    return g.scan(b, [n["h0"], n["w"]], [n["xs"]])


def _scan_reverse(g: G, n: dict[str, N]) -> N:
    b = rlx.Graph("rev")
    c, x, w = b.input("c", [3]), b.input("x", [3]), b.input("w", [3])
    cn = b.tanh(c * w + b.sin(x))
    b.outputs(cn, cn * x + c)
    return g.scan(b, [n["c0"]], [n["xs"], n["ws"]], reverse=True)


def _scan_two(g: G, n: dict[str, N]) -> N:
    b = rlx.Graph("two")
    h, s, x = b.input("h", [2, 3]), b.input("s", [3]), b.input("x", [2, 3])
    f = b.sigmoid(x + h)
    hn = f * b.tanh(x - h) + (1.0 - f) * h * s
    sn = s * 0.9 + b.mean(hn, 0)
    b.outputs(hn, sn, hn * sn)
    return g.scan(b, [n["h0"], n["s0"]], [n["xs"]], reverse=True)


BUILDS["scan_elman"] = _scan_elman
BUILDS["scan_reverse_two_xs"] = _scan_reverse
BUILDS["scan_two_carries_reverse"] = _scan_two
BUILDS["spd_bi_map"] = lambda g, n: g.spd("bi_map", n["x"], n["w"])
BUILDS["spd_re_eig"] = lambda g, n: g.spd("re_eig", n["x"], eps=0.6)
BUILDS["spd_log_eig"] = lambda g, n: g.spd("log_eig", n["x"])
BUILDS["spd_karcher_mean"] = lambda g, n: g.spd("karcher_mean", n["x"], eps=1e-7)
BUILDS["spd_batch_norm"] = lambda g, n: g.spd("batch_norm", n["x"], n["bias"], eps=1e-7)

# Gaussian splats: 12 × 10 pixels in 4-pixel tiles (scripts/op_grad_cases_splat.py)
_SPLAT = SplatConfig(width=12, height=10, tile_size=4)
_SPLATS = {
    "gaussian_splat_prepare_sh16": ("prepare", {}),
    "gaussian_splat_prepare_rgb": ("prepare", {}),
    "gaussian_splat_rasterize_stop": ("rasterize", {"transmittance_threshold": 0.3}),
    "gaussian_splat_render_rgb": ("render", {}),
    "gaussian_splat_render_sh9_steps": ("render", {"max_splat_steps": 2}),
}
for _name, (_kind, _chg) in _SPLATS.items():
    _cfg = dataclasses.replace(_SPLAT, **_chg)
    if _kind == "rasterize":
        BUILDS[_name] = lambda g, n, c=_cfg: g.gaussian_splat_rasterize(n["prep"], n["cam"], cfg=c)
    else:
        BUILDS[_name] = lambda g, n, c=_cfg, k=_kind: getattr(g, f"gaussian_splat_{k}")(
            *(n[x] for x in ["pos", "scl", "rot", "opa", "col", "sh", "cam"]), cfg=c
        )


def _load() -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """The fixture as ``{case: {"in": {...}, "grad": {...}, "r"/"out": ...}}``."""
    cases: dict[str, dict] = {}
    with np.load(FIX) as fx:
        for key in fx.files:
            name, part, *rest = key.split(".")
            c = cases.setdefault(name, {"in": {}, "grad": {}})
            if rest:
                c[part][rest[0]] = fx[key]
            else:
                c[part] = fx[key]
    return cases


CASES = _load()


def rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max())


def test_every_fixture_case_has_a_builder() -> None:
    assert sorted(CASES) == sorted(BUILDS)
    assert FIX.stat().st_size < 1 << 20


#: fixture arrays' numpy kinds → input dtypes (the rest are integer indices)
_DTYPES = {"f4": "f32", "u1": "u8"}


def _forward(name: str) -> tuple[G, dict[str, N], N]:
    """The case's op on inputs shaped and typed as the fixture's."""
    c = CASES[name]
    g = rlx.Graph(name)
    nodes = {k: g.input(k, list(v.shape), _DTYPES.get(v.dtype.kind + str(v.itemsize), "i32"))
             for k, v in c["in"].items()}  # fmt: skip
    out = BUILDS[name](g, nodes)
    assert tuple(out.shape) == c["out"].shape, (out.shape, c["out"].shape)
    return g, nodes, out


def test_every_differentiable_op_has_a_case() -> None:
    """Every op with a gradient rule is in some case's forward graph."""
    seen = {x.op for name in BUILDS for x in _forward(name)[0].nodes}
    assert not set(rlx.autodiff.differentiable_ops()) - seen


def _graph(name: str) -> tuple[G, list[str], list[int]]:
    """The op, its output and gradients; with the differentiated inputs' names
    and the index of each gradient among the outputs."""
    c = CASES[name]
    g, nodes, out = _forward(name)
    r = g.input("r", list(c["r"].shape))
    wrt = sorted(c["grad"])
    grads = rlx.grad(g, g.sum(out * r), [nodes[k] for k in wrt])
    # a node is an output once (fused_residual_*: d/dx and d/dres are one node)
    uniq = list({gr.id: gr for gr in grads}.values())
    g.outputs(out, *uniq)
    return g, wrt, [1 + [u.id for u in uniq].index(gr.id) for gr in grads]


@pytest.mark.parametrize("device", ["host", "metal-sim"])
@pytest.mark.parametrize("name", sorted(BUILDS))
def test_op_gradient_matches_torch(name: str, device: str) -> None:
    c = CASES[name]
    g, wrt, at = _graph(name)
    exe = rlx.compile(g, device=device)
    out = list(exe.run(**c["in"], r=c["r"]).values())
    assert rel(out[0], c["out"]) <= TOL, f"{device} forward: {rel(out[0], c['out']):.2e}"
    for k, i in zip(wrt, at):
        err = rel(out[i], c["grad"][k])
        assert err <= TOL, f"{device} d/d{k}: relative error {err:.2e} > {TOL:.0e}"
