"""``gaussian_splat_prepare``'s gradient (the forward rebuilt from ordinary ops
in ``rlx.autodiff.composite.splat_prepare_forward``, then differentiated)
against central finite differences in float64 (``_gradcheck.check``: ≤ 1e-6
relative, and the compiled f32 gradients ≤ 1e-4), for SH degree 0 (plain
colours) and degrees 1 and 3, w.r.t. every float operand including the
camera; the rebuilt forward equals the op's own output."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import rlx
from rlx.autodiff.composite import splat_prepare_forward
from rlx.ops.misc import SplatConfig

sys.path.insert(0, str(Path(__file__).parent))
from _gradcheck import check, evaluate  # noqa: E402

CFG = SplatConfig(width=11, height=9, tile_size=4, radius_scale=3.0)


def _scene(g: int, k: int, culled: bool = False) -> dict:
    """Splats in front of the camera and inside the view, SH colours away
    from the clamp (when ``culled``: the last splat behind the near plane and
    the first one's red channel well below the clamp at 0)."""
    rng = np.random.default_rng(5)
    pos = np.column_stack([rng.uniform(-0.4, 0.4, g), rng.uniform(-0.4, 0.4, g),
                           rng.uniform(2.5, 4, g)])  # fmt: skip
    if culled:
        pos[-1, 2] = -1.0
    view = np.eye(4)
    c, s = np.cos(0.1), np.sin(0.1)
    view[:3, :3] = [[c, 0, s], [0, 1, 0], [-s, 0, c]]
    view[:3, 3] = [0.1, -0.2, 0.3]
    sh = rng.standard_normal((g, k, 3)) * 0.1
    if k:
        sh[:, 0] = rng.uniform(0.5, 1.5, (g, 3))  # 0.5 + C0·sh₀ well above the clamp
        if culled:
            sh[0, 0, 0] = -4.0
    return {
        "pos": pos,
        "scl": rng.uniform(0.15, 0.4, (g, 3)),
        "rot": rng.standard_normal((g, 4)),
        "opa": rng.uniform(0.3, 0.8, g),
        "col": rng.uniform(0, 1, (g, 3)),
        "sh": sh,
        "cam": np.concatenate([view.ravel(), [9.0, 8.0, 5.5, 4.5]]).astype(np.float32),
    }


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
