"""``gaussian_splat_prepare``'s gradient (the forward rebuilt from ordinary ops
in ``rlx.autodiff.composite.splat_prepare_forward``, then differentiated)
against central finite differences in float64 (``_gradcheck.check``: ≤ 1e-6
relative, and the compiled f32 gradients ≤ 1e-4), for SH degree 0 (plain
colours) and degrees 1 and 3, w.r.t. every float operand including the
camera; the rebuilt forward equals the op's own output. Likewise
``gaussian_splat_rasterize`` (``splat_rasterize_forward``: a dense blend in depth
order with the forward's decisions as masks) w.r.t. the prepared records, and
prepare → rasterize w.r.t. the raw parameters, whose gradient must also equal
the fused ``gaussian_splat_render`` op's (its render_backward)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import rlx
from rlx.autodiff import NotDifferentiableError
from rlx.autodiff.composite import splat_prepare_forward, splat_rasterize_forward
from rlx.ops.misc import SplatConfig

sys.path.insert(0, str(Path(__file__).parent))
from _gradcheck import check, evaluate  # noqa: E402
from _splat_scene import splat_scene  # noqa: E402

CFG = SplatConfig(width=11, height=9, tile_size=4, radius_scale=3.0)


def _scene(g: int, k: int, culled: bool = False) -> dict:
    """Splats in front of the camera and inside the view, SH colours away
    from the clamp (when ``culled``: the last splat behind the near plane and
    the first one's red channel well below the clamp at 0); the camera as
    f32 values."""
    scene = splat_scene(g, k, 5, width=CFG.width, height=CFG.height, spread=0.4, culled=culled,
                        clamped=culled)  # fmt: skip
    scene["cam"] = scene["cam"].astype(np.float32)
    return scene


def _build(g: rlx.Graph, n: dict) -> rlx.Node:
    return g.gaussian_splat_prepare(n["pos"], n["scl"], n["rot"], n["opa"], n["col"], n["sh"],
                                    n["cam"], cfg=CFG)  # fmt: skip


@pytest.mark.parametrize("k,culled", [(0, False), (4, False), (16, True)])
def test_gaussian_splat_prepare(k: int, culled: bool) -> None:
    scene = _scene(4, k, culled)
    shapes = {n: list(v.shape) for n, v in scene.items()}
    wrt = ["pos", "scl", "rot", "opa", "col"] + (["sh"] if k else []) + ["cam"]
    err = check(_build, shapes, wrt, init=scene)
    print(f"k={k} culled={culled}: worst relative error {err:.2e}")


@pytest.mark.parametrize("k,culled", [(0, False), (9, True), (16, True)])
def test_rebuilt_forward_is_the_op(k: int, culled: bool) -> None:
    scene = _scene(5, k, culled)
    g = rlx.Graph("prep")
    nodes = {n: g.input(n, list(v.shape)) for n, v in scene.items()}
    prep = _build(g, nodes)
    g.outputs(prep, splat_prepare_forward(g, prep))
    want, got = evaluate(g, scene)
    assert want[:, 15].sum() == (4 if culled else 5)  # the scene culls what it means to
    smooth = [0, 1, 2, 4, 5, 6, 7, 8, 9, 10]
    np.testing.assert_allclose(got[:, smooth], want[:, smooth], rtol=1e-12, atol=1e-12)
    assert not got[:, [3, 11, 12, 13, 14, 15]].any()
    if k and culled:
        assert want[0, 8] == 0.0  # the clamped channel


# ------------------------------------------------------------ rasterize
#: 8 × 6 pixels in 2 × 2 tiles; a high transmittance threshold so pixels stop early
RCFG = SplatConfig(width=8, height=6, tile_size=4, transmittance_threshold=0.3)
#: the prep columns the image depends on smoothly (mean, conic, opacity, colour)
SMOOTH = [0, 1, 4, 5, 6, 7, 8, 9, 10]
STEP = [2, 3, 11, 12, 13, 14, 15]  # depth, radius, tiles, valid: piecewise constant


def _prep() -> np.ndarray:
    """Five prepared splats: overlapping, two at the same depth (the tie goes
    to the lower index), one (index 3) below the alpha cut-off everywhere,
    radii that leave some tiles uncovered, and one culled row (all zero)."""
    rows = [  # u, v, depth, radius, A, B, C, opacity, r, g, b
        (3.2, 2.7, 1.0, 4, 0.30, 0.05, 0.25, 0.80, 0.9, 0.2, 0.1),
        (4.6, 3.1, 1.5, 3, 0.20, -0.04, 0.30, 0.70, 0.1, 0.8, 0.3),
        (2.5, 3.8, 1.5, 3, 0.25, 0.02, 0.20, 0.60, 0.2, 0.3, 0.9),
        (5.3, 2.2, 0.8, 4, 0.20, 0.00, 0.20, 0.003, 0.5, 0.5, 0.5),
        (6.1, 4.4, 2.0, 2, 0.15, 0.01, 0.15, 0.50, 0.7, 0.6, 0.2),
    ]
    ts, tx, ty = 4, 2, 2
    prep = np.zeros((len(rows) + 1, 16))
    for i, r in enumerate(rows):
        u, v, rad = r[0], r[1], r[3]
        x0 = np.clip(np.floor((u - rad) / ts), 0, tx)
        x1 = np.clip(np.floor((u + rad + ts - 1) / ts), 0, tx)
        y0 = np.clip(np.floor((v - rad) / ts), 0, ty)
        y1 = np.clip(np.floor((v + rad + ts - 1) / ts), 0, ty)
        prep[i] = [*r, x0, y0, x1, y1, 1.0]
    return prep


def _raster(g: rlx.Graph, n: dict) -> rlx.Node:
    """The smooth columns from ``s``, the piecewise-constant ones fixed."""
    fixed = g.constant(_prep()[:, STEP].astype(np.float32), dtype=n["s"].dtype)
    cols = {c: g.narrow(n["s"], 1, j, 1) for j, c in enumerate(SMOOTH)}
    cols.update({c: g.narrow(fixed, 1, j, 1) for j, c in enumerate(STEP)})
    prep = g.concat([cols[c] for c in range(16)], 1)
    return g.gaussian_splat_rasterize(prep, n["cam"], cfg=RCFG)


def _render(scene: dict, cfg: SplatConfig) -> np.ndarray:
    from rlx.reference.splat import render_fn

    return render_fn(*scene.values(), cfg.to_json())


def test_rasterize_steps_and_list_cap() -> None:
    """``max_splat_steps`` in the rebuilt forward; a list capacity that could
    truncate is refused with NotDifferentiableError naming the op."""
    prep = _prep()
    for steps in (1, 2):
        cfg = dataclasses.replace(RCFG, transmittance_threshold=1e-4, max_splat_steps=steps)
        g = rlx.Graph("steps")
        p, cam = g.input("prep", [6, 16]), g.input("cam", [20])
        img = g.gaussian_splat_rasterize(p, cam, cfg=cfg)
        g.outputs(img, splat_rasterize_forward(g, img))
        want, got = evaluate(g, {"prep": prep, "cam": _cam()})
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    g = rlx.Graph("cap")
    p, cam = g.input("prep", [6, 16]), g.input("cam", [20])
    img = g.gaussian_splat_rasterize(p, cam, cfg=dataclasses.replace(RCFG, max_list_entries=8))
    with pytest.raises(NotDifferentiableError, match="gaussian_splat_rasterize"):
        rlx.grad(g, g.sum(img), [p])


def _cam() -> np.ndarray:
    return np.concatenate([np.eye(4).ravel(), [9.0, 8.0, 4.0, 3.0]])


def test_rasterize_rebuilt_forward_is_the_op() -> None:
    from rlx.reference.splat import rasterize_fn

    prep = _prep()
    g = rlx.Graph("rast")
    p, cam = g.input("prep", [6, 16]), g.input("cam", [20])
    img = g.gaussian_splat_rasterize(p, cam, cfg=RCFG)
    g.outputs(img, splat_rasterize_forward(g, img), *rlx.grad(g, g.sum(img * img), [p, cam]))
    want, got, dprep, dcam = evaluate(g, {"prep": prep, "cam": _cam()})
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    cfg = RCFG.to_json()
    assert np.abs(want - rasterize_fn(prep, {**cfg, "transmittance_threshold": 1e-4})).max() > 0.01
    skip = prep.copy()
    skip[3] = 0.0
    np.testing.assert_array_equal(rasterize_fn(skip, cfg), want)  # splat 3 is never blended
    swap = prep.copy()
    swap[1, 2] += 1e-3  # the tie resolved the other way
    assert np.abs(rasterize_fn(swap, cfg) - want).max() > 1e-3
    assert prep[4, 11] == 1.0 and prep[1, 12] == 0.0  # splat 4 is binned out of tile column 0
    assert not dprep[:, STEP].any() and not dcam.any()
    assert np.abs(dprep[[0, 1, 2, 4]][:, SMOOTH]).min() > 0
    assert not dprep[[3, 5]].any()  # the skipped and the culled splat


def test_gaussian_splat_rasterize() -> None:
    s = _prep()[:, SMOOTH]
    err = check(_raster, {"s": list(s.shape), "cam": [20]}, ["s", "cam"],
                init={"s": s, "cam": _cam()})  # fmt: skip
    print(f"rasterize: worst relative error {err:.2e}")


#: early stops: a high threshold, then at most two blended splats per pixel
STOPS = {"thr": {"transmittance_threshold": 0.3}, "steps": {"max_splat_steps": 2}}


@pytest.mark.parametrize("k,stop", [(0, None), (4, None), (0, "thr"), (4, "steps")])
def test_prepare_rasterize_chain(k: int, stop: str | None) -> None:
    """prepare → rasterize w.r.t. the raw splat parameters: finite differences,
    and the same gradient as the fused render op's (its render_backward)."""
    cfg = dataclasses.replace(CFG, **STOPS.get(stop, {}))

    def _chain(g: rlx.Graph, n: dict) -> rlx.Node:
        prep = g.gaussian_splat_prepare(*(n[key] for key in _scene(1, 0)), cfg=cfg)
        return g.gaussian_splat_rasterize(prep, n["cam"], cfg=cfg)

    scene = _scene(4, k)
    if stop:
        scene["opa"] = np.full(4, 0.9)
        assert np.abs(_render(scene, cfg) - _render(scene, CFG)).max() > 0.01  # it stops
    shapes = {n: list(v.shape) for n, v in scene.items()}
    wrt = ["pos", "scl", "rot", "opa"] + (["sh"] if k else ["col"])
    err = check(_chain, shapes, wrt, init=scene)
    print(f"chain k={k} stop={stop}: worst relative error {err:.2e}")
    # the same gradient as the render op's own (render_backward)
    g = rlx.Graph("chain")
    nodes = {n: g.input(n, s) for n, s in shapes.items()}
    r = g.input("r", [CFG.height, CFG.width, 3])
    a = g.sum(_chain(g, nodes) * r)
    b = g.sum(g.gaussian_splat_render(*(nodes[n] for n in scene), cfg=cfg) * r)
    xs = [nodes[n] for n in wrt]
    g.outputs(a, b, *rlx.grad(g, a, xs), *rlx.grad(g, b, xs))
    feeds = {**scene, "r": np.random.default_rng(1).standard_normal([CFG.height, CFG.width, 3])}
    va, vb, *gs = evaluate(g, feeds)
    assert abs(va - vb) <= 1e-10 * abs(vb)
    for name, x, y in zip(wrt, gs[: len(wrt)], gs[len(wrt) :]):
        rel = np.abs(x - y).max() / np.abs(y).max()
        print(f"chain k={k} stop={stop} {name}: vs render {rel:.2e}")
        assert np.abs(y).max() > 0 and rel <= 1e-5, name
