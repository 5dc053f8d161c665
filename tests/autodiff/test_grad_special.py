"""Gradient rules of the less common differentiable ops against central
finite differences in float64 (``_gradcheck.check``: ≤ 1e-6 relative, and
the compiled f32 gradients on host / reference ≤ 1e-4): Gaussian-splat
rendering, SAM 2 axial RoPE, partial interleaved RoPE, soft-capped
attention, attention with custom / bias masks and in BHSD layout, the
fused residual RMSNorm, and the float operands of the quantised matmuls
(scales and bias of ``scaled_mat_mul``, the activation of
``dequant_grouped_mat_mul``)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import rlx
from rlx.autodiff import NotDifferentiableError, grad
from rlx.ops.misc import SplatConfig

sys.path.insert(0, str(Path(__file__).parent))
from _gradcheck import _rng, check  # noqa: E402


# ------------------------------------------------------------ splatting
def _splat_scene(g: int, k: int) -> dict:
    """Splats well inside the view (smooth settings: no alpha cut-off, no
    early stop, tiles large enough that no footprint changes tile)."""
    rng = np.random.default_rng(2)
    pos = np.column_stack([rng.uniform(-0.4, 0.4, g), rng.uniform(-0.4, 0.4, g),
                           rng.uniform(2.5, 4, g)])  # fmt: skip
    view = np.eye(4)
    c, s = np.cos(0.1), np.sin(0.1)
    view[:3, :3] = [[c, 0, s], [0, 1, 0], [-s, 0, c]]
    view[:3, 3] = [0.1, -0.2, 0.3]
    return {
        "pos": pos,
        "scl": rng.uniform(0.15, 0.4, (g, 3)),
        "rot": rng.standard_normal((g, 4)),
        "opa": rng.uniform(0.3, 0.8, g),
        "col": rng.uniform(0, 1, (g, 3)),
        "sh": rng.standard_normal((g, k, 3)) * 0.5,
        "cam": np.concatenate([view.ravel(), [9.0, 8.0, 5.5, 4.5]]).astype(np.float32),
    }


@pytest.mark.parametrize("k", [0, 4])
def test_gaussian_splat_render(k: int) -> None:
    cfg = SplatConfig(width=11, height=9, tile_size=4, radius_scale=8.0, alpha_cutoff=0.0,
                      max_splat_steps=1000, transmittance_threshold=0.0)  # fmt: skip
    scene = _splat_scene(3, k)
    cam = scene.pop("cam")
    shapes = {n: list(v.shape) for n, v in scene.items()}

    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        return g.gaussian_splat_render(n["pos"], n["scl"], n["rot"], n["opa"], n["col"],
                                       n["sh"], n["cam"], cfg=cfg)  # fmt: skip

    wrt = ["pos", "scl", "rot", "opa", "col"] + (["sh"] if k else [])
    check(build, shapes, wrt, feeds_extra={"cam": cam}, init=scene)


def test_splat_camera_gets_no_gradient() -> None:
    cfg = SplatConfig(width=8, height=6)
    g = rlx.Graph("cam")
    dims = {"p": [2, 3], "s": [2, 3], "r": [2, 4], "o": [2], "c": [2, 3], "sh": [2, 0, 3],
            "cam": [20]}  # fmt: skip
    ins = [g.input(n, sh) for n, sh in dims.items()]
    loss = g.sum(g.gaussian_splat_render(*ins, cfg=cfg))
    with pytest.raises(NotDifferentiableError, match=r"gaussian_splat_render .*camera"):
        grad(g, loss, [ins[6]])


# ------------------------------------------------------------ rotary
@pytest.mark.parametrize("seq,repeat", [(12, 1), (16, 2)])
def test_axial_rope2d(seq: int, repeat: int) -> None:
    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        return g.axial_rope2d(n["x"], end_x=4, end_y=2 if repeat > 1 else 3, head_dim=8,
                              num_heads=2, theta=100.0, repeat_factor=repeat)  # fmt: skip

    check(build, {"x": [2, seq, 16]}, ["x"])


@pytest.mark.parametrize("kind,n_rot", [("interleaved", 4), ("interleaved", 6), ("neox", 4)])
def test_partial_rope(kind: str, n_rot: int) -> None:
    """n_rot < head_dim: the rotated dims and the pass-through dims."""
    ang = _rng().uniform(0, 3, (5, n_rot // 2))
    extra = {"cos": np.cos(ang).astype(np.float32), "sin": np.sin(ang).astype(np.float32)}

    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        return g.rope(n["x"], n["cos"], n["sin"], head_dim=8, n_rot=n_rot, kind=kind)

    check(build, {"x": [2, 5, 16]}, ["x"], feeds_extra=extra)


def test_partial_interleaved_rope_per_token() -> None:
    ang = _rng().uniform(0, 3, (6, 2))
    extra = {"cos": np.cos(ang).astype(np.float32), "sin": np.sin(ang).astype(np.float32)}

    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        return g.rope(n["x"], n["cos"], n["sin"], head_dim=8, n_rot=4, kind="interleaved",
                      per_token=True)  # fmt: skip

    check(build, {"x": [2, 3, 8]}, ["x"], feeds_extra=extra)


# ------------------------------------------------------------ attention
def _attn_shapes(layout: str, b: int, s: int, kv: int, h: int, kvh: int, d: int) -> dict:
    if layout == "bhsd":
        return {"q": [b, h, s, d], "k": [b, kvh, kv, d], "v": [b, kvh, kv, d]}
    return {"q": [b, s, h * d], "k": [b, kv, kvh * d], "v": [b, kv, kvh * d]}


MASKS = {
    # [s, kv] visibility (every row keeps a key) and a [b, 1, s, kv] bias
    "custom": (np.random.default_rng(4).random((4, 5)) > 0.4) | np.eye(4, 5, 1, dtype=bool),
    "bias": np.random.default_rng(5).standard_normal((2, 1, 4, 5)),
}


ATTN = [
    # layout, mask, kv_heads, softcap, score_scale
    ("bshd", "custom", 2, None, None),
    ("bshd", "bias", 4, None, 0.4),
    ("bhsd", "causal", 2, None, None),
    ("bhsd", "bias", 2, None, None),
    ("bshd", "causal", 2, 2.0, None),
    ("bshd", "none", 4, 1.5, 0.7),
    ("bhsd", "sliding_window", 2, 3.0, None),
    ("bshd", "custom", 4, 2.5, None),
    ("bhsd", "bias", 2, 1.0, None),
]


@pytest.mark.parametrize("layout,mask,kvh,softcap,scale", ATTN)
def test_attention(layout: str, mask: str, kvh: int, softcap: float | None,
                   scale: float | None) -> None:  # fmt: skip
    heads, d, s, kv = 4, 3, 4, 5
    extra = {}
    if mask in MASKS:
        extra["m"] = MASKS[mask].astype(np.float32)

    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        return g.attention(n["q"], n["k"], n["v"], heads=heads, kv_heads=kvh, head_dim=d,
                           mask=mask, window=2 if mask == "sliding_window" else 0,
                           layout=layout, score_scale=scale, softcap=softcap,
                           mask_input=n.get("m"))  # fmt: skip

    check(build, _attn_shapes(layout, 2, s, kv, heads, kvh, d), ["q", "k", "v"],
          feeds_extra=extra)  # fmt: skip


def test_fused_residual_rms_norm() -> None:
    def build(g: rlx.Graph, n: dict) -> rlx.Node:
        a = g.residual_rms_norm(n["x"], n["res"], n["gm"], eps=1e-5)
        return a + g.residual_rms_norm(n["x"], n["res"], n["gm"], n["bt"], n["bs"])

    shapes = {"x": [2, 3, 6], "res": [2, 3, 6], "gm": [6], "bt": [6], "bs": [6]}
    check(build, shapes, list(shapes))


# ------------------------------------------------------------ quantised matmuls
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "int8"])
@pytest.mark.parametrize("layout", ["per_tensor", "per_row", "block:16"])
def test_scaled_matmul_scales_and_bias(fmt: str, layout: str) -> None:
    rng = np.random.default_rng(11)
    m, n, k = 3, 4, 40
    a, b = rng.standard_normal((m, k)), rng.standard_normal((n, k))
    lay = layout
    nb = -(-k // 16)
    sdims = {"per_tensor": ([1], [1]), "per_row": ([m], [n])}.get(layout, ([m, nb], [n, nb]))
    # codes: the values over a unit scale, rounded by the format
    g0 = rlx.Graph("codes")
    xa, xb = g0.input("a", [m, k]), g0.input("b", [n, k])
    ones_a, ones_b = g0.input("sa", sdims[0]), g0.input("sb", sdims[1])
    g0.outputs(g0.scaled_quantize(xa * 20.0, ones_a, fmt=fmt, layout=lay),
               g0.scaled_quantize(xb * 20.0, ones_b, fmt=fmt, layout=lay))  # fmt: skip
    codes = list(rlx.compile(g0, device="reference").run(
        a=a.astype(np.float32), b=b.astype(np.float32),
        sa=np.ones(sdims[0], np.float32), sb=np.ones(sdims[1], np.float32)).values())  # fmt: skip
    init = {"sa": rng.uniform(0.02, 0.1, sdims[0]), "sb": rng.uniform(0.02, 0.1, sdims[1])}

    def build(g: rlx.Graph, nd: dict) -> rlx.Node:
        ca, cb = g.constant(codes[0], dtype="u8"), g.constant(codes[1], dtype="u8")
        y = g.scaled_matmul(ca, cb, nd["sa"], nd["sb"], nd["bias"], lhs_fmt=fmt, rhs_fmt=fmt,
                            layout=lay)  # fmt: skip
        return y + g.scaled_dequantize(cb, nd["sb"], fmt=fmt, layout=lay)[0:1, 0:n]

    shapes = {"sa": sdims[0], "sb": sdims[1], "bias": [n]}
    check(build, shapes, ["sa", "sb", "bias"], init=init)


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2", "int8"])
@pytest.mark.parametrize("layout", ["per_tensor", "per_row", "block:16"])
def test_scaled_quant_scale_amax_gradient(fmt: str, layout: str) -> None:
    # random x: one entry reaches each group's max, so the scale is smooth there
    def build(g: rlx.Graph, nd: dict) -> rlx.Node:
        return g.scaled_quant_scale(nd["x"] * 3.0, fmt=fmt, layout=layout)

    check(build, {"x": [3, 40]}, ["x"])


def test_scaled_quant_scale_ties_and_zero_groups() -> None:
    """Ties share the amax gradient evenly with their sign (torch.amax's
    rule); an all-zero group (scale 1.0) passes no gradient."""
    g = rlx.Graph("qs")
    x = g.input("x", [2, 4])
    s = g.scaled_quant_scale(x, fmt="int8", layout="per_row")
    (dx,) = grad(g, g.sum(s * g.constant(np.array([2.0, 5.0], np.float32))), [x])
    g.outputs(s, dx)
    xv = np.array([[1.0, -3.0, 3.0, 2.0], [0.0, 0.0, 0.0, 0.0]], np.float32)
    for dev in ("reference", "host"):
        got_s, got_dx = rlx.compile(g, device=dev).run(x=xv).values()
        np.testing.assert_allclose(got_s, [3.0 / 127.0, 1.0], rtol=1e-6)
        want = np.zeros((2, 4))
        want[0, 1], want[0, 2] = -2.0 / 127.0 / 2, 2.0 / 127.0 / 2
        np.testing.assert_allclose(got_dx, want, rtol=1e-6, atol=0)


def test_quantised_codes_are_not_differentiable() -> None:
    g = rlx.Graph("q")
    w, s = g.input("w", [2, 8]), g.input("s", [1])
    codes = g.scaled_quantize(w, s)
    loss = g.sum(g.scaled_dequantize(codes, s))
    (ds,) = grad(g, loss, [s])  # the scale: a float path
    assert ds.shape == (1,)
    with pytest.raises(NotDifferentiableError, match=r"\[grad\] scaled_quantize \(node %2"):
        grad(g, loss, [w])


@pytest.mark.parametrize("scheme", ["q8_0", "q4_0"])
def test_dequant_grouped_matmul_input_gradient(scheme: str) -> None:
    e, n, k = 3, 5, 32
    w = np.random.default_rng(3).standard_normal((e * n, k)).astype(np.float32)
    wq = rlx.quantize(w, scheme).w_q.reshape(e, n, -1)
    idx = np.array([2, 0, 1, 2, 1, 0], np.int32)

    def build(g: rlx.Graph, nd: dict) -> rlx.Node:
        return g.dequant_grouped_matmul(nd["x"], g.constant(wq, dtype="u8"), nd["idx"],
                                        scheme=scheme)  # fmt: skip

    check(build, {"x": [6, k]}, ["x"], feeds_extra={"idx": idx})
    g = rlx.Graph("frozen")
    x = g.input("x", [6, k])
    wp = g.input("wq", list(wq.shape), "u8")
    loss = g.sum(g.dequant_grouped_matmul(x, wp, g.input("i", [6], "i32"), scheme=scheme))
    (dx,) = grad(g, loss, [x])
    assert dx.shape == (6, k)
