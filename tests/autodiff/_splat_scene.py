"""The Gaussian-splat test scene, one definition shared by
``test_grad_splat.py`` (rlx's gradients against finite differences) and
``scripts/op_grad_cases_splat.py`` (torch's, for ``tests/fixtures/grad/ops.npz``).
Plain numpy, no torch: the tests import it, never the torch script.
"""

from __future__ import annotations

import numpy as np


def splat_scene(
    g: int,
    k: int,
    seed: int,
    *,
    width: int,
    height: int,
    spread: float = 0.5,
    culled: bool = False,
    clamped: bool = False,
    opa: float = 0.0,
) -> dict[str, np.ndarray]:
    """``g`` splats with ``k`` SH coefficients each (float64, from
    ``default_rng(seed)``): centres ``x, y`` in ``[-spread, spread)`` and depths
    in ``[2.5, 4)`` in front of a camera turned 0.1 rad about y (focal
    lengths 9 and 8, the principal point at the centre of a ``width`` ×
    ``height`` image), SH DC terms well above the clamp at 0. When ``culled``
    the last splat sits behind the near plane; when ``clamped`` (and ``k``)
    the first one's red DC term is −4 (its colour clamped at 0); ``opa`` > 0
    sets every opacity (to make pixels stop early)."""
    rng = np.random.default_rng(seed)
    pos = np.column_stack([rng.uniform(-spread, spread, g), rng.uniform(-spread, spread, g),
                           rng.uniform(2.5, 4, g)])  # fmt: skip
    if culled:
        pos[-1, 2] = -1.0
    view = np.eye(4)
    cs, sn = np.cos(0.1), np.sin(0.1)
    view[:3, :3] = [[cs, 0, sn], [0, 1, 0], [-sn, 0, cs]]
    view[:3, 3] = [0.1, -0.2, 0.3]
    sh = rng.standard_normal((g, k, 3)) * 0.1
    if k:
        sh[:, 0] = rng.uniform(0.5, 1.5, (g, 3))  # 0.5 + C0·sh₀ well above the clamp
        if clamped:
            sh[0, 0, 0] = -4.0
    return {
        "pos": pos,
        "scl": rng.uniform(0.15, 0.4, (g, 3)),
        "rot": rng.standard_normal((g, 4)),
        "opa": np.full(g, opa) if opa else rng.uniform(0.3, 0.8, g),
        "col": rng.uniform(0, 1, (g, 3)),
        "sh": sh,
        "cam": np.concatenate([view.ravel(), [9.0, 8.0, width / 2, height / 2]]),
    }
