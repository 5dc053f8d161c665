"""Host-vs-reference parity harness.

:func:`check` compiles one graph for ``device="host"`` and
``device="reference"``, binds the same params, runs the same inputs,
verifies both schedules, asserts that the thunks under test ran natively on
the host (``stats["fallback_by_thunk"]``), compares host against reference
with a per-dtype tolerance and, when given, both against an independent
numpy formula.

Tolerances (``|host − ref| ≤ tol·(1 + |ref|)``): f32 1e-5 — the reference
accumulates in float64 and rounds once, the host accumulates in f32, whose
error over the short reductions used here (≤ ~100 terms of unit-size values)
stays near 1e-6 relative; f16 1e-2 — one f16 rounding is ~5e-4 relative,
and f16 intermediates (scores, probabilities) add a few more.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import rlx

TOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float16): 1e-2}


def rand(rng: np.random.Generator, shape: Sequence[int], dtype: Any = np.float32,
         scale: float = 1.0) -> np.ndarray:
    """Normal values of ``shape`` in ``dtype``."""
    return (rng.standard_normal(tuple(shape)) * scale).astype(dtype)


def close(got: np.ndarray, want: np.ndarray, tol: float, what: str) -> None:
    """Assert ``|got − want| ≤ tol·(1 + |want|)`` elementwise (NaN only where NaN)."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    g = np.asarray(got, np.float64)
    w = np.asarray(want, np.float64)
    nan_g, nan_w = np.isnan(g), np.isnan(w)
    assert (nan_g == nan_w).all(), f"{what}: NaN pattern differs"
    err = np.abs(g - w)[~nan_w]
    bound = (tol * (1.0 + np.abs(w)))[~nan_w]
    if err.size and not (err <= bound).all():
        i = int(np.argmax(err - bound))
        raise AssertionError(
            f"{what}: max excess error {float((err - bound)[i]):.3g} "
            f"(err {float(err[i]):.3g}, value {float(w[~nan_w][i]):.6g}, tol {tol})"
        )


def compile_both(g: rlx.Graph, params: Optional[dict[str, np.ndarray]] = None,
                 dims: Optional[dict[str, int]] = None) -> tuple[rlx.Executable, rlx.Executable]:
    """Host and reference executables of ``g`` with ``params`` bound, both verified."""
    exes = []
    for device in ("host", "reference"):
        exe = rlx.compile(g, device=device, dims=dims)
        exe.verify()
        for name, value in (params or {}).items():
            exe.set_param(name, value)
        exes.append(exe)
    return exes[0], exes[1]


def assert_native(exe: rlx.Executable, names: Sequence[str]) -> None:
    """Every thunk named in ``names`` is in the schedule and has a native kernel."""
    stats = exe.stats
    for name in names:
        assert stats["by_thunk"].get(name, 0) > 0, (
            f"thunk '{name}' not in the schedule:\n{exe.schedule}"
        )
        fb = stats["fallback_by_thunk"].get(name, 0)
        assert fb == 0, f"{fb} '{name}' thunk(s) run through the numpy fallback on host"


def check(
    g: rlx.Graph,
    inputs: dict[str, np.ndarray],
    params: Optional[dict[str, np.ndarray]] = None,
    *,
    native: Sequence[str] = (),
    expect: Optional[dict[str, np.ndarray] | np.ndarray] = None,
    expect_tol: Optional[float] = None,
    tol: Optional[float] = None,
    dims: Optional[dict[str, int]] = None,
) -> dict[str, np.ndarray]:
    """Run ``g`` on host and reference and compare (see the module doc).

    ``expect`` is a numpy result computed independently (a dict by output
    name, or one array for a single-output graph); ``expect_tol`` its
    tolerance (default: the dtype tolerance). Returns the host outputs."""
    host, ref = compile_both(g, params, dims)
    assert_native(host, native)
    h_out = host.run(**inputs)
    r_out = ref.run(**inputs)
    assert h_out.keys() == r_out.keys()
    for name, h in h_out.items():
        t = tol if tol is not None else TOL.get(h.dtype, 1e-5)
        close(h, r_out[name], t, f"{name} host vs reference")
    if expect is not None:
        if not isinstance(expect, dict):
            assert len(h_out) == 1
            expect = {next(iter(h_out)): expect}
        for name, want in expect.items():
            t = expect_tol if expect_tol is not None else TOL.get(h_out[name].dtype, 1e-5)
            close(h_out[name], np.asarray(want), t, f"{name} host vs numpy")
            close(r_out[name], np.asarray(want), t, f"{name} reference vs numpy")
    return h_out


def one(out: dict[str, np.ndarray]) -> np.ndarray:
    """The single output of a run."""
    assert len(out) == 1
    return next(iter(out.values()))
