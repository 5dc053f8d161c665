"""Host-vs-reference parity harness.

``check(graph, inputs)`` compiles ``graph`` for ``device="host"`` and
``device="reference"``, feeds both the same inputs (and params), runs the
schedule verifier on both, runs them, and compares every output. It also
asserts that the host executable really ran the thunks under test natively:
the compile-time ``stats`` must report no fallback thunk, and a spy on the
host executable's fallback callback must see no call at run time (so the
test compares the Rust kernel with the numpy reference, not numpy with
itself). Tests of reference-only thunks pass ``fallback={"name", ...}``: then
exactly those thunk names (and nothing else) must go to the fallback.

Tolerances: callers pass them; the defaults are the per-dtype figures the
parity suite uses (f32 ``atol = rtol = 1e-5``, f16 ``1e-2``); integers and
bools compare exactly. NaN / ±inf positions must match exactly.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Optional

import numpy as np
import rlx

#: Default (atol, rtol) per output dtype.
TOL: dict[str, tuple[float, float]] = {
    "float32": (1e-5, 1e-5),
    "float16": (1e-2, 1e-2),
    "float64": (1e-12, 1e-12),
}


class Result:
    """Outputs of both devices plus the host executable and what fell back."""

    def __init__(
        self,
        host: dict[str, np.ndarray],
        ref: dict[str, np.ndarray],
        exe: Any,
        fallbacks: list[str],
    ) -> None:
        self.host = host
        self.ref = ref
        self.exe = exe
        self.fallbacks = fallbacks

    @property
    def by_thunk(self) -> dict[str, int]:
        """Thunk name → count in the host schedule."""
        return dict(self.exe.stats["by_thunk"])


def rand(
    shape: Iterable[int], dtype: str = "f32", *, lo: float = -3.0, hi: float = 3.0, seed: int = 0
) -> np.ndarray:
    """Random data of an rlx dtype: uniform floats in ``[lo, hi)``, ints in
    ``[lo, hi)``, bools 50/50."""
    rng = np.random.default_rng(seed)
    shp = tuple(int(s) for s in shape)
    np_dt = {
        "f32": np.float32, "f16": np.float16, "f64": np.float64, "i32": np.int32,
        "i64": np.int64, "u8": np.uint8, "bool": np.bool_,
    }[dtype]  # fmt: skip
    if dtype == "bool":
        return rng.random(shp) < 0.5
    if dtype in ("i32", "i64", "u8"):
        return rng.integers(int(lo), int(hi), size=shp).astype(np_dt)
    return rng.uniform(lo, hi, size=shp).astype(np_dt)


def _spy(exe: Any, seen: list[str]) -> None:
    """Record the name of every thunk the executable hands to its fallback."""
    inner = exe._fallback

    def fallback(index: int, thunk_json: str) -> None:
        seen.append(json.loads(thunk_json)["name"])
        inner(index, thunk_json)

    exe._fallback = fallback


def run_both(
    graph: rlx.Graph,
    inputs: Mapping[str, np.ndarray],
    params: Optional[Mapping[str, np.ndarray]] = None,
    *,
    fallback: Iterable[str] = (),
    dims: Optional[dict[str, int]] = None,
) -> Result:
    """Compile on both devices, verify, run, and check the native/fallback split.

    ``fallback`` names the thunks allowed (and required) to run on the numpy
    reference inside the host executable; by default nothing may fall back.
    """
    host = rlx.compile(graph, device="host", dims=dims)
    ref = rlx.compile(graph, device="reference", dims=dims)
    host.verify()
    ref.verify()
    assert host.schedule == ref.schedule, "both devices must run the same schedule"
    for exe in (host, ref):
        for k, v in (params or {}).items():
            exe.set_param(k, v)
    seen: list[str] = []
    _spy(host, seen)
    out_h = host.run(**inputs)
    out_r = ref.run(**inputs)
    allowed = set(fallback)
    stats = host.stats
    if not allowed:
        assert stats["fallback_thunks"] == 0, (
            f"host schedule has fallback thunks:\n{host.schedule}\n{stats}"
        )
        assert not seen, f"thunks ran on the numpy fallback on host: {seen}"
    else:
        assert set(seen) == allowed, f"expected fallbacks {allowed}, saw {seen}"
        assert stats["fallback_thunks"] == len(seen), stats
    return Result(out_h, out_r, host, seen)


def assert_same(
    host: np.ndarray,
    ref: np.ndarray,
    *,
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
    what: str = "",
) -> None:
    """Compare one output: dtype and shape equal; ints/bools exact; floats
    within tolerance with NaN and ±inf at the same places."""
    assert host.dtype == ref.dtype, f"{what}: dtype {host.dtype} vs {ref.dtype}"
    assert host.shape == ref.shape, f"{what}: shape {host.shape} vs {ref.shape}"
    if host.dtype.kind in "biu":
        np.testing.assert_array_equal(host, ref, err_msg=what)
        return
    a0, r0 = TOL.get(host.dtype.name, (1e-5, 1e-5))
    a = a0 if atol is None else atol
    r = r0 if rtol is None else rtol
    hf, rf = host.astype(np.float64), ref.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(hf), np.isnan(rf), err_msg=f"{what}: NaN positions")
    inf = np.isinf(rf)
    np.testing.assert_array_equal(np.isinf(hf), inf, err_msg=f"{what}: inf positions")
    np.testing.assert_array_equal(hf[inf], rf[inf], err_msg=f"{what}: inf signs")
    np.testing.assert_allclose(hf, rf, atol=a, rtol=r, equal_nan=True, err_msg=what)


def check(
    graph: rlx.Graph,
    inputs: Mapping[str, np.ndarray],
    params: Optional[Mapping[str, np.ndarray]] = None,
    *,
    atol: Optional[float] = None,
    rtol: Optional[float] = None,
    fallback: Iterable[str] = (),
    expect: Iterable[str] = (),
    dims: Optional[dict[str, int]] = None,
) -> Result:
    """Run ``graph`` on both devices and compare all outputs.

    ``expect`` lists thunk names that must appear in the schedule (so a
    test cannot silently stop exercising the kernel it is about).
    """
    res = run_both(graph, inputs, params, fallback=fallback, dims=dims)
    for name in expect:
        assert res.by_thunk.get(name, 0) > 0, (
            f"expected a '{name}' thunk in the schedule:\n{res.exe.schedule}"
        )
    assert set(res.host) == set(res.ref)
    for k in res.host:
        assert_same(res.host[k], res.ref[k], atol=atol, rtol=rtol, what=k)
    return res
