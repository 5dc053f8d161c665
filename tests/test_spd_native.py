"""SPD-manifold ops (``g.spd``) on the native host kernel (f64, nalgebra's
symmetric eigendecomposition) against scipy.linalg: ``log_eig`` = logm,
``re_eig`` = U max(Λ, eps) Uᵀ (eigh), ``bi_map`` = WᵀXW, ``karcher_mean``
(fixed point of Σ logm(G^-½ X_i G^-½) = 0, checked by that residual and
against the closed form for commuting matrices), ``batch_norm`` =
sqrtm(B) G^-½ X_i G^-½ sqrtm(B) with G from scipy's sqrtm / inv. All in
float64 to 1e-10 (abs + rel); no thunk runs through the numpy reference.
Non-symmetric and non-positive-definite inputs fail with a KernelError
naming the op."""

from __future__ import annotations

import numpy as np
import pytest
import rlx
import scipy.linalg as sl
from rlx.report import data as rdata
from rlx.report.html import render

TOL = 1e-10


def _spd(rng: np.random.Generator, b: int, n: int) -> np.ndarray:
    m = rng.standard_normal((b, n, n))
    return m @ np.swapaxes(m, 1, 2) + 0.5 * np.eye(n)


def _run(kind: str, *arrays: np.ndarray, eps: float = 1e-4, dtype: str = "f64") -> np.ndarray:
    g = rlx.Graph("spd")
    ins = [g.input(f"a{i}", list(a.shape), dtype) for i, a in enumerate(arrays)]
    g.outputs(g.spd(kind, *ins, eps=eps))
    exe = rlx.compile(g, device="host")
    assert not exe.stats["fallback_by_thunk"], exe.stats["fallback_by_thunk"]
    feeds = {f"a{i}": a for i, a in enumerate(arrays)}
    return np.asarray(next(iter(exe.run(**feeds).values())), np.float64)


def _close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, atol=TOL, rtol=TOL)


def test_log_eig_is_logm() -> None:
    x = _spd(np.random.default_rng(0), 3, 5)
    _close(_run("log_eig", x), np.stack([sl.logm(m).real for m in x]))


def test_re_eig_rectifies_eigenvalues() -> None:
    rng = np.random.default_rng(1)
    q, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    lam = np.array([-1.0, 0.01, 0.3, 2.0])  # eps 0.125: exact in the op's f32
    x = (q * lam) @ q.T
    got = _run("re_eig", x[None], eps=0.125)
    _close(got[0], (q * np.maximum(lam, 0.125)) @ q.T)


def test_bi_map() -> None:
    rng = np.random.default_rng(2)
    x = _spd(rng, 2, 5)
    w = rng.standard_normal((5, 3))
    _close(_run("bi_map", x, w), np.swapaxes(w, 0, 1)[None] @ x @ w)


def test_karcher_mean() -> None:
    rng = np.random.default_rng(3)
    x = _spd(rng, 4, 3)
    g = _run("karcher_mean", x, eps=1e-13)
    gih = np.linalg.inv(sl.sqrtm(g).real)
    resid = sum(sl.logm(gih @ m @ gih).real for m in x)
    assert np.abs(resid).max() < 1e-10
    _close(g, g.T)
    # commuting matrices: the mean is expm of the mean of logm
    q, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    xs = np.stack([(q * lam) @ q.T for lam in ([1.0, 2.0, 3.0], [4.0, 0.5, 1.0])])
    want = sl.expm(sum(sl.logm(m).real for m in xs) / 2)
    _close(_run("karcher_mean", xs, eps=1e-13), want)


def test_batch_norm() -> None:
    rng = np.random.default_rng(4)
    x = _spd(rng, 3, 4)
    bias = _spd(rng, 1, 4)[0]
    got = _run("batch_norm", x, bias, eps=1e-13)
    g = _run("karcher_mean", x, eps=1e-13)
    gih = np.linalg.inv(sl.sqrtm(g).real)
    bh = sl.sqrtm(bias).real
    _close(got, bh @ gih @ x @ gih @ bh)


def test_f32_operands_are_widened() -> None:
    x = _spd(np.random.default_rng(5), 2, 4).astype(np.float32)
    got = _run("log_eig", x, dtype="f32")
    want = np.stack([sl.logm(m.astype(np.float64)).real for m in x])
    np.testing.assert_allclose(got, want, atol=2e-6, rtol=2e-6)


@pytest.mark.parametrize("kind", ["log_eig", "karcher_mean", "re_eig"])
def test_non_symmetric_input_is_an_error(kind: str) -> None:
    x = _spd(np.random.default_rng(6), 2, 3)
    x[1, 0, 2] += 0.5
    with pytest.raises(rlx.KernelError, match=rf"{kind}: x\[1\] is not symmetric"):
        _run(kind, x)


@pytest.mark.parametrize("kind", ["log_eig", "karcher_mean"])
def test_indefinite_input_is_an_error(kind: str) -> None:
    x = np.stack([np.eye(3), np.diag([1.0, -2.0, 3.0])])
    with pytest.raises(rlx.KernelError, match=rf"{kind}: x\[1\] is not positive definite"):
        _run(kind, x)


def test_indefinite_bias_is_an_error() -> None:
    x = _spd(np.random.default_rng(7), 2, 3)
    with pytest.raises(rlx.KernelError, match=r"batch_norm: bias\[0\] is not positive definite"):
        _run("batch_norm", x, -np.eye(3))


def _run_backward(kind: str, *arrays: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    g = rlx.Graph("spd_bwd")
    ins = [g.input(f"a{i}", list(a.shape), "f64") for i, a in enumerate(arrays)]
    g.outputs(g.spd_backward(kind, *ins, eps=eps))
    exe = rlx.compile(g, device="host")
    assert not exe.stats["fallback_by_thunk"], exe.stats["fallback_by_thunk"]
    feeds = {f"a{i}": a for i, a in enumerate(arrays)}
    return np.asarray(next(iter(exe.run(**feeds).values())), np.float64)


@pytest.mark.parametrize("kind", ["log_eig", "re_eig", "bi_map"])
def test_backward_matches_central_differences(kind: str) -> None:
    """⟨dY, f(X + hE) − f(X − hE)⟩ / 2h = ⟨G, E⟩ for symmetric E (relative 1e-6:
    the difference quotient's own error)."""
    rng = np.random.default_rng(8)
    x = _spd(rng, 2, 4)
    if kind == "re_eig":  # some eigenvalues below eps, none within 1e-3 of it
        lam, u = np.linalg.eigh(x)
        x = (u * np.where(np.arange(4) < 2, 0.5, lam)[:, None, :]) @ np.swapaxes(u, 1, 2)
        x = 0.5 * (x + np.swapaxes(x, 1, 2))
        assert np.all(np.abs(np.linalg.eigvalsh(x) - 1.0) > 1e-3)
    extra = [rng.standard_normal((4, 3))] if kind == "bi_map" else []
    m = 3 if kind == "bi_map" else 4
    dy = rng.standard_normal((2, m, m))
    grad = _run_backward(kind, x, *extra, dy, eps=1.0)
    e = rng.standard_normal((2, 4, 4))
    e = e + np.swapaxes(e, 1, 2)
    h = 1e-5
    fp = _run(kind, x + h * e, *extra, eps=1.0)
    fm = _run(kind, x - h * e, *extra, eps=1.0)
    fd = float(np.sum(dy * (fp - fm)) / (2 * h))
    assert abs(float(np.sum(grad * e)) - fd) <= 1e-6 * max(1.0, abs(fd))


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("kind", ["karcher_mean", "batch_norm"])
def test_mean_backward_matches_reference_and_differences(kind: str, n: int) -> None:
    """The Karcher-mean / batch-norm gradients run natively (no fallback) and
    equal the numpy reference (implicit differentiation, an independent
    implementation) to 1e-9 and central differences of the native forward
    (h = 1e-5, Karcher tolerance 1e-12) to 1e-6 along symmetric directions."""
    from rlx.reference.misc import spd_backward as ref_backward

    rng = np.random.default_rng(20 + n)
    b = 3
    x = _spd(rng, b, n)
    extra = [_spd(rng, 1, n)[0]] if kind == "batch_norm" else []
    dy = rng.standard_normal((n, n) if kind == "karcher_mean" else (b, n, n))
    got = _run_backward(kind, x, *extra, dy, eps=1e-12)
    want = ref_backward(kind, 1e-12, [x, *extra], dy)
    np.testing.assert_allclose(got, want, atol=1e-9, rtol=1e-9)
    assert np.abs(want).max() > 1e-2
    e = rng.standard_normal((b, n, n))
    e = e + np.swapaxes(e, 1, 2)
    h = 1e-5
    fp = _run(kind, x + h * e, *extra, eps=1e-12)
    fm = _run(kind, x - h * e, *extra, eps=1e-12)
    fd = float(np.sum(dy * (fp - fm)) / (2 * h))
    assert abs(float(np.sum(got * e)) - fd) <= 1e-6 * max(1.0, abs(fd))


@pytest.mark.parametrize("kind", ["log_eig", "re_eig"])
def test_eig_backward_runs_on_metal_sim_without_host_commands(kind: str) -> None:
    """f32 re_eig / log_eig gradients lower to spd.metal (f32 Jacobi per matrix)
    and agree with the host's f64 eigendecomposition within 1e-4 of the largest
    |gradient| (eps 1.3 lies ≥ 0.2 from every eigenvalue, off the kink)."""
    rng = np.random.default_rng(31)
    lam = np.array([0.4, 0.9, 1.6, 2.2, 3.0])
    q = np.stack([np.linalg.qr(rng.standard_normal((5, 5)))[0] for _ in range(3)])
    x = ((q * lam[None, None, :]) @ np.swapaxes(q, 1, 2)).astype(np.float32)
    x = 0.5 * (x + np.swapaxes(x, 1, 2))
    dy = rng.standard_normal((3, 5, 5)).astype(np.float32)
    out = {}
    for device in ("host", "metal-sim"):
        g = rlx.Graph("spd_bwd")
        g.outputs(g.spd_backward(kind, g.input("x", [3, 5, 5]), g.input("dy", [3, 5, 5]), eps=1.3))
        exe = rlx.compile(g, device=device)
        if device == "metal-sim":
            assert not exe.stats["metal_host_by_thunk"], exe.stats["metal_host_by_thunk"]
        out[device] = np.asarray(next(iter(exe.run(x=x, dy=dy).values())), np.float64)
    big = np.abs(out["host"]).max()
    assert big > 0.1
    assert np.abs(out["metal-sim"] - out["host"]).max() <= 1e-4 * big


def _conditioned(rng: np.random.Generator, b: int, n: int) -> np.ndarray:
    """f32 SPD matrices Q diag(λ) Qᵀ, λ in [0.4, 3], exactly symmetric."""
    lam = rng.uniform(0.4, 3.0, (b, n))
    q = np.stack([np.linalg.qr(rng.standard_normal((n, n)))[0] for _ in range(b)])
    x = ((q * lam[:, None, :]) @ np.swapaxes(q, 1, 2)).astype(np.float32)
    return 0.5 * (x + np.swapaxes(x, 1, 2))


def _backward_on(
    device: str, kind: str, feeds: dict[str, np.ndarray], eps: float
) -> rlx.Executable:
    g = rlx.Graph("spd_bwd")
    ins = [g.input(k, list(v.shape)) for k, v in feeds.items()]
    g.outputs(g.spd_backward(kind, *ins, eps=eps))
    return rlx.compile(g, device=device)


def _operands(kind: str, rng: np.random.Generator, b: int, n: int) -> dict[str, np.ndarray]:
    x = _conditioned(rng, b, n)
    if kind == "bi_map":
        return {
            "x": x,
            "w": rng.standard_normal((n, 3)).astype(np.float32),
            "dy": rng.standard_normal((b, 3, 3)).astype(np.float32),
        }
    if kind == "batch_norm":
        return {
            "x": x,
            "bias": _conditioned(rng, 1, n)[0],
            "dy": rng.standard_normal((b, n, n)).astype(np.float32),
        }
    if kind == "karcher_mean":
        return {"x": x, "dy": rng.standard_normal((n, n)).astype(np.float32)}
    return {"x": x, "dy": rng.standard_normal((b, n, n)).astype(np.float32)}


@pytest.mark.parametrize("kind", ["bi_map", "karcher_mean", "batch_norm"])
def test_backward_runs_on_metal_sim_without_host_commands(kind: str) -> None:
    """f32 bi_map (W dY Wᵀ) and Karcher-mean / batch-norm gradients (f32 Karcher
    iteration + implicit-function solve, n ≤ 8) lower to spd.metal, each dispatch
    followed by its status check, and agree with the host's f64 gradients within
    1e-4 of the largest |gradient|."""
    feeds = _operands(kind, np.random.default_rng(33), 3, 5)
    out = {}
    for device in ("host", "metal-sim"):
        exe = _backward_on(device, kind, feeds, 1e-6)
        if device == "metal-sim":
            assert not exe.stats["metal_host_by_thunk"], exe.stats["metal_host_by_thunk"]
            assert "check #" in exe.metal_plan, exe.metal_plan
            kinds = [c.kind for c in rdata.collect(exe, "").commands]
            assert kinds[kinds.index("dispatch") + 1] == "check", kinds
            page = render("spd", "", [("g", rdata.collect(exe, "spd"))])
            assert 'class="cmd check"' in page and "<title>check #" in page
        out[device] = np.asarray(next(iter(exe.run(**feeds).values())), np.float64)
    big = np.abs(out["host"]).max()
    assert big > 0.1
    assert np.abs(out["metal-sim"] - out["host"]).max() <= 1e-4 * big


@pytest.mark.parametrize("kind", ["log_eig", "re_eig", "bi_map", "karcher_mean", "batch_norm"])
def test_non_symmetric_input_on_metal_sim_is_a_kernel_error(kind: str) -> None:
    """The Metal kernels validate like the host: the plan's status check fails
    the run with a KernelError naming the op and the matrix."""
    feeds = _operands(kind, np.random.default_rng(34), 3, 4)
    feeds["x"][1, 0, 2] += 0.5
    exe = _backward_on("metal-sim", kind, feeds, 0.5)
    assert not exe.stats["metal_host_by_thunk"], exe.stats["metal_host_by_thunk"]
    with pytest.raises(rlx.KernelError, match=rf"\[spd\] {kind} backward: x\[1\] is not symmetric"):
        exe.run(**feeds)


@pytest.mark.parametrize("kind", ["log_eig", "karcher_mean", "batch_norm"])
def test_indefinite_input_on_metal_sim_is_a_kernel_error(kind: str) -> None:
    feeds = _operands(kind, np.random.default_rng(35), 3, 4)
    feeds["x"][1] = np.diag([1.0, -2.0, 3.0, 0.5]).astype(np.float32)
    exe = _backward_on("metal-sim", kind, feeds, 1e-4)
    with pytest.raises(
        rlx.KernelError,
        match=rf"{kind} backward: x\[1\] is not positive definite \(smallest eigenvalue -2",
    ):
        exe.run(**feeds)
    # re_eig needs no definiteness: host and metal-sim agree
    if kind == "log_eig":
        out = [
            np.asarray(next(iter(_backward_on(d, "re_eig", feeds, 0.7).run(**feeds).values())))
            for d in ("host", "metal-sim")
        ]
        assert np.abs(out[1] - out[0]).max() <= 1e-4 * np.abs(out[0]).max()
