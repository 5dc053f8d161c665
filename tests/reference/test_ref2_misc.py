"""Registry coverage, rng (SplitMix64 of the sampler, Philox fills), vq_assign, SPD ops,
custom ops."""

from __future__ import annotations

import numpy as np
import pytest
import rlx.reference as ref
from _mem2 import Arena
from rlx.reference import run_thunk
from rlx.reference.misc import spd_backward, spd_forward
from rlx.reference.rng import philox_normal, philox_uniform, splitmix64, uniform_at

PART2 = """nop dequant_matmul_gguf dequant_grouped_matmul_gguf dequant_matmul_int8
dequant_matmul_int4
dequant_matmul_fp8 dequant_matmul_nvfp4 fused_mlp_gate_up_swiglu fused_mlp_gate_up_gelu
fused_mlp_down_residual scaled_matmul scaled_quantize scaled_dequantize scaled_quant_scale
gated_delta_net selective_scan lstm gru rnn mamba2 scan_host host_op fft1d log_mel log_mel_backward
welch_peaks rng_normal rng_uniform vq_assign spd_host gaussian_splat_render
gaussian_splat_render_backward gaussian_splat_prepare gaussian_splat_rasterize custom_op
custom_gpu_op attention_bwd rms_norm_backward_input rms_norm_backward_gamma rms_norm_backward_beta
rope_backward cumsum_backward gather_backward maxpool2d_backward conv2d_backward_input
conv2d_backward_weight ada_layer_norm_backward gated_residual_backward
softmax_cross_entropy_backward""".split()


def test_every_part2_thunk_registered_once() -> None:
    assert len(PART2) == len(set(PART2)) == 49
    missing = [n for n in PART2 if n not in ref.REGISTRY]
    assert not missing, missing
    with pytest.raises(ValueError):
        ref.reference("nop")(lambda t, mem: None)
    a = Arena()
    a.put(np.zeros(4, np.float32))
    run_thunk({"name": "nop"}, a.build())


# ---------------------------------------------------------------- rng
M64 = (1 << 64) - 1


def sm64_int(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def test_splitmix64_vectors() -> None:
    # first output of the SplitMix64 generator seeded with 0 (Vigna's reference)
    assert int(splitmix64(0)) == 0xE220A8397B1DCDAF
    xs = [0, 1, 12345, M64, 0x9E3779B97F4A7C15]
    np.testing.assert_array_equal(
        splitmix64(np.array(xs, np.uint64)), np.array([sm64_int(x) for x in xs], np.uint64)
    )


def test_uniform_bit_exact_with_rust_formula() -> None:
    key = 0xDEADBEEF12345678
    u = uniform_at(key, np.arange(200, dtype=np.uint64))
    for j in range(200):
        bits = sm64_int(key ^ ((j * 0xD1B54A32D192ED03) & M64)) >> 40
        assert u[j] == np.float32(bits) * np.float32(1.0 / 16777216.0)


def _philox_int(ctr: list[int], key: list[int]) -> list[int]:
    """Philox4x32-10 in Python integers (Salmon et al. 2011), an independent check of
    the vectorised numpy version."""
    c, (k0, k1) = list(ctr), key
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & 0xFFFFFFFF, (k1 + 0xBB67AE85) & 0xFFFFFFFF
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & 0xFFFFFFFF, (p0 >> 32) ^ c[3] ^ k1, p0 & 0xFFFFFFFF]
    return c


@pytest.mark.parametrize("op_seed", [None, 42.0])
def test_rng_thunks(op_seed: float | None) -> None:
    n = 20000
    a = Arena()
    no, uo = a.out(n), a.out(n)
    mem = a.build()
    common = dict(len=n, key=7, offset=3, op_seed=op_seed)
    run_thunk(dict(name="rng_normal", dst=no, mean=2.0, scale=0.5, **common), mem)
    run_thunk(dict(name="rng_uniform", dst=uo, low=-1.0, high=3.0, **common), mem)
    key = 7 if op_seed is None else 42
    z, u = a.read(no, n), a.read(uo, n)
    np.testing.assert_array_equal(z, np.float32(2.0) + np.float32(0.5) * philox_normal(key, 3, n))
    np.testing.assert_array_equal(u, np.float32(-1.0) + np.float32(4.0) * philox_uniform(key, 3, n))
    # element 5 of the uniform fill: lane 1 of block 1, counter [1, 0, offset, 0]
    w = _philox_int([1, 0, 3, 0], [key, 0])[1]
    assert u[5] == np.float32(-1.0) + np.float32(4.0) * np.float32((w >> 8) / 2.0**24)
    assert abs(z.mean() - 2.0) < 0.02 and abs(z.std() - 0.5) < 0.02
    assert u.min() >= -1.0 and u.max() < 3.0 and abs(u.mean() - 1.0) < 0.05


# ---------------------------------------------------------------- vq
@pytest.mark.parametrize("metric", [0, 1, 2])
def test_vq_assign(metric: int) -> None:
    rng = np.random.default_rng(metric)
    n, d, k = 13, 5, 7
    x = rng.standard_normal((n, d)).astype(np.float32)
    cb = rng.standard_normal((k, d)).astype(np.float32)
    cb[3] = cb[1]  # duplicate row: the tie resolves to the lower index
    a = Arena()
    t = dict(
        name="vq_assign",
        x=a.put(x),
        cb=a.put(cb),
        out=a.out(n, np.int32),
        n=n,
        d=d,
        k=k,
        metric=metric,
    )
    run_thunk(t, a.build())
    got = a.read(t["out"], n, np.int32)
    for i in range(n):
        xi = x[i].astype(np.float64)
        scores = []
        for j in range(k):
            c = cb[j].astype(np.float64)
            if metric == 0:
                scores.append(-np.sum((xi - c) ** 2))
            elif metric == 1:
                scores.append(xi @ c)
            else:
                scores.append(xi @ c / np.linalg.norm(xi) / np.linalg.norm(c))
        assert got[i] == int(np.argmax(scores)) and got[i] != 3


# ---------------------------------------------------------------- SPD
def _spd(rng: np.random.Generator, b: int, n: int) -> np.ndarray:
    m = rng.standard_normal((b, n, n))
    return m @ np.swapaxes(m, 1, 2) + n * np.eye(n)


def _spd_thunk(
    op: dict, args: list[np.ndarray], out_shape: tuple[int, ...], dtype: str = "f64"
) -> np.ndarray:
    npdt = np.float64 if dtype == "f64" else np.float32
    a = Arena()
    ins = [[a.put(x.astype(npdt)), x.size, {"dims": list(x.shape), "dtype": dtype}] for x in args]
    oo = a.out(out_shape, npdt)
    run_thunk(
        dict(
            name="spd_host",
            op=op,
            inputs=ins,
            output=[oo, int(np.prod(out_shape)), {"dims": list(out_shape), "dtype": dtype}],
        ),
        a.build(),
    )
    return a.read(oo, out_shape, npdt)


def test_spd_forward_ops() -> None:
    rng = np.random.default_rng(0)
    b, n, m = 3, 4, 2
    x = _spd(rng, b, n)
    w = rng.standard_normal((n, m))
    got = _spd_thunk({"op": "spd", "kind": "bi_map", "eps": 0.0}, [x, w], (b, m, m))
    for i in range(b):
        np.testing.assert_allclose(got[i], w.T @ x[i] @ w, rtol=1e-12)
    # log_eig: the eigenvectors are shared and the eigenvalues are logged
    lg = _spd_thunk({"op": "spd", "kind": "log_eig", "eps": 0.0}, [x], (b, n, n))
    for i in range(b):
        lam = np.linalg.eigvalsh(x[i])
        np.testing.assert_allclose(np.sort(np.linalg.eigvalsh(lg[i])), np.log(lam), rtol=1e-10)
        np.testing.assert_allclose(lg[i] @ x[i], x[i] @ lg[i], atol=1e-9)  # commutes with x
    # re_eig: eigenvalues floored at eps
    eps = float(np.median(np.linalg.eigvalsh(x[0])))
    re = _spd_thunk({"op": "spd", "kind": "re_eig", "eps": eps}, [x], (b, n, n))
    np.testing.assert_allclose(
        np.linalg.eigvalsh(re[0]), np.maximum(np.linalg.eigvalsh(x[0]), eps), rtol=1e-10
    )


def _logm(a: np.ndarray) -> np.ndarray:
    lam, u = np.linalg.eigh(a)
    return u @ np.diag(np.log(lam)) @ u.T


def _powm(a: np.ndarray, p: float) -> np.ndarray:
    lam, u = np.linalg.eigh(a)
    return u @ np.diag(lam**p) @ u.T


def test_karcher_mean_and_batch_norm() -> None:
    rng = np.random.default_rng(1)
    b, n = 5, 3
    x = _spd(rng, b, n)
    g = _spd_thunk({"op": "spd", "kind": "karcher_mean", "eps": 1e-12}, [x], (n, n))
    gih = _powm(g, -0.5)
    # first-order optimality of the Fréchet mean: Σ log(G^-½ X G^-½) = 0
    np.testing.assert_allclose(sum(_logm(gih @ xi @ gih) for xi in x), 0, atol=1e-9)
    # commuting inputs: the mean is exp(mean(log X))
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    xc = np.stack([q @ np.diag(rng.uniform(0.5, 3, n)) @ q.T for _ in range(b)])
    gc = _spd_thunk({"op": "spd", "kind": "karcher_mean", "eps": 1e-12}, [xc], (n, n))
    lam_mean = np.mean([np.log(np.diag(q.T @ xi @ q)) for xi in xc], 0)
    np.testing.assert_allclose(gc, q @ np.diag(np.exp(lam_mean)) @ q.T, rtol=1e-9, atol=1e-10)
    # batch norm transports the batch's mean onto the bias
    bias = _spd(rng, 1, n)[0]
    y = _spd_thunk({"op": "spd", "kind": "batch_norm", "eps": 1e-12}, [x, bias], (b, n, n))
    gy = spd_forward("karcher_mean", 1e-12, [y])
    np.testing.assert_allclose(gy, bias, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("kind", ["bi_map", "re_eig", "log_eig"])
def test_spd_backward_fd(kind: str) -> None:
    rng = np.random.default_rng(2)
    n = 3
    x = _spd(rng, 2, n)
    w = rng.standard_normal((n, 2))
    lam0 = np.linalg.eigvalsh(x[0])  # floor between two eigenvalues (not on the kink)
    eps = float(0.5 * (lam0[0] + lam0[1])) if kind == "re_eig" else 0.0
    extra = [w] if kind == "bi_map" else []
    out_shape = (2, 2, 2) if kind == "bi_map" else (2, n, n)
    dy = rng.standard_normal(out_shape)
    got = _spd_thunk({"op": "spd_backward", "kind": kind, "eps": eps}, [x, *extra, dy], x.shape)
    # symmetric perturbations: d/dX_ij along E_ij + E_ji
    for bi in range(2):
        for i in range(n):
            for j in range(i, n):
                e = np.zeros_like(x)
                e[bi, i, j] = e[bi, j, i] = 1.0
                h = 1e-6
                fp = np.sum(spd_forward(kind, eps, [x + h * e, *extra]) * dy)
                fm = np.sum(spd_forward(kind, eps, [x - h * e, *extra]) * dy)
                want = (fp - fm) / (2 * h)
                have = (
                    got[bi, i, j] * (1 if i == j else 2)
                    if kind != "bi_map"
                    else got[bi, i, j] + (got[bi, j, i] if i != j else 0)
                )
                assert abs(have - want) < 1e-5 * max(1, abs(want)), (bi, i, j, have, want)
    with pytest.raises(KeyError, match="no_such_spd"):
        spd_backward("no_such_spd", 0.0, [x], dy)


# Central differences of the float64 forward, h = 1e-5: truncation O(h²)·|f'''| ≈ 1e-10 and
# round-off ≈ 1e-16·|f|/h ≈ 1e-10 relative; the Karcher fixed point stops at
# ‖step‖_F < 1e-12 (then takes that step), so its residual is well below 1e-12 and
# contributes < 1e-12/h = 1e-7. Bound: |have − want| ≤ 1e-6 · max(|want|, 1).
SPD_FD_RTOL = 1e-6


def _spd_mean_fd(kind: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(analytic, central-difference) gradients of ⟨dY, f(X)⟩ along E_ij + E_ji."""
    rng = np.random.default_rng(seed)
    b = 3
    x = _spd(rng, b, n)
    extra = [_spd(rng, 1, n)[0]] if kind == "batch_norm" else []
    dy = rng.standard_normal((n, n) if kind == "karcher_mean" else (b, n, n))
    got = _spd_thunk({"op": "spd_backward", "kind": kind, "eps": 0.0}, [x, *extra, dy], x.shape)
    have = np.zeros_like(x)
    want = np.zeros_like(x)
    h = 1e-5
    for bi in range(b):
        for i in range(n):
            for j in range(i, n):
                e = np.zeros_like(x)
                e[bi, i, j] = e[bi, j, i] = 1.0
                fp = np.sum(spd_forward(kind, 0.0, [x + h * e, *extra]) * dy)
                fm = np.sum(spd_forward(kind, 0.0, [x - h * e, *extra]) * dy)
                want[bi, i, j] = (fp - fm) / (2 * h)
                have[bi, i, j] = got[bi, i, j] * (1 if i == j else 2)
    return have, want


@pytest.mark.parametrize("n", [3, 4])
@pytest.mark.parametrize("kind", ["karcher_mean", "batch_norm"])
def test_spd_mean_backward_fd(kind: str, n: int) -> None:
    have, want = _spd_mean_fd(kind, n, seed=10 + n)
    assert np.abs(want).max() > 1e-2  # a non-trivial gradient
    err = np.abs(have - want) / np.maximum(np.abs(want), 1.0)
    assert err.max() < SPD_FD_RTOL, (kind, n, err.max())


def test_spd_mean_backward_fd_can_fail() -> None:
    """The FD check detects a wrong gradient: the explicit-X_i term of batch norm
    alone (dropping the path through the Karcher mean) is off by far more than the
    bound, and so is a perturbed Karcher-mean gradient."""
    rng = np.random.default_rng(7)
    n, b = 3, 3
    x = _spd(rng, b, n)
    bias = _spd(rng, 1, n)[0]
    dy = rng.standard_normal((b, n, n))
    g = spd_forward("karcher_mean", 0.0, [x])
    s = _powm(g, -0.5)
    bh = _powm(bias, 0.5)
    direct_only = np.stack([s @ bh @ (0.5 * (d + d.T)) @ bh @ s for d in dy])
    full = spd_backward("batch_norm", 0.0, [x, bias], dy)
    assert np.abs(full - direct_only).max() > 1e3 * SPD_FD_RTOL * max(1, np.abs(full).max())
    have, want = _spd_mean_fd("karcher_mean", n, seed=13)
    bad = have * (1 + 1e-4)
    err = np.abs(bad - want) / np.maximum(np.abs(want), 1.0)
    assert err.max() > SPD_FD_RTOL


def test_spd_f32_buffers() -> None:
    rng = np.random.default_rng(3)
    x = _spd(rng, 2, 3)
    got = _spd_thunk({"op": "spd", "kind": "log_eig", "eps": 0.0}, [x], (2, 3, 3), dtype="f32")
    np.testing.assert_allclose(
        got, spd_forward("log_eig", 0.0, [x.astype(np.float32)]), rtol=1e-6, atol=1e-6
    )


# ---------------------------------------------------------------- custom ops
@pytest.mark.parametrize("name", ["custom_op", "custom_gpu_op"])
def test_custom_op(name: str) -> None:
    seen = {}

    def axpy(inputs: list[np.ndarray], out: np.ndarray, attrs: bytes) -> None:
        seen["attrs"] = attrs
        out[...] = 2.0 * inputs[0] + inputs[1]

    ref.CUSTOM_OPS["test.axpy"] = axpy
    try:
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        y = np.ones((2, 3), np.float32)
        a = Arena()
        shp = {"dims": [2, 3], "dtype": "f32"}
        oo = a.out((2, 3))
        t = dict(
            name=name,
            kernel="test.axpy",
            inputs=[[a.put(x), 6, shp], [a.put(y), 6, shp]],
            output=[oo, 6, shp],
            attrs=[1, 2],
        )
        run_thunk(t, a.build())
        np.testing.assert_array_equal(a.read(oo, (2, 3)), 2 * x + y)
        assert seen["attrs"] == b"\x01\x02"
        with pytest.raises(KeyError, match="nope"):
            run_thunk(dict(t, kernel="nope"), a.mem)
    finally:
        del ref.CUSTOM_OPS["test.axpy"]
