"""``vq_assign`` and ``axial_rope2d`` through the graph API on host (native
kernels, no numpy fallback), reference and metal-sim (vq.metal /
rope.metal, no host command), against numpy formulas written here:

* vq_assign: argmin of float64 ``‖x − c‖²`` (L2), argmax ``x·c`` (dot),
  argmax of ``x·c / (‖x‖‖c‖)`` (cosine); duplicated codebook rows check
  that ties go to the lowest index. Exact equality of the indices (random
  data keeps the best and second-best scores far apart relative to f32
  rounding).
* axial_rope2d: SAM 2's ``compute_axial_cis`` (Ravi et al.,
  arXiv:2408.00714): ``freqs = 1 / θ^(arange(0, d, 4)[: d/4] / d)``, token
  position ``p = s mod (end_x·end_y)``, ``x = p mod end_x``,
  ``y = p div end_x``, complex rotation of interleaved pairs by
  ``[x·freqs, y·freqs]``. Tolerance 1e-5 abs + 1e-5 rel (float64 formula vs
  f32 angles).
* The VQ-VAE-style example (``examples/vqvae_encode.py``) encodes with the
  same codes on host and metal-sim as its numpy encoder.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import rlx

DEVICES = ("host", "reference", "metal-sim")


def _run(
    build: Callable[[rlx.Graph], None], feeds: dict[str, np.ndarray], device: str
) -> np.ndarray:
    g = rlx.Graph("t")
    build(g)
    exe = rlx.compile(g, device=device)
    if device == "host":
        assert not exe.stats["fallback_by_thunk"], exe.stats["fallback_by_thunk"]
    if device == "metal-sim":
        assert exe.stats["metal_host"] == 0, exe.report()
    return np.asarray(next(iter(exe.run(**feeds).values())))


def _vq_numpy(x: np.ndarray, cb: np.ndarray, metric: str) -> np.ndarray:
    x64, c64 = x.astype(np.float64), cb.astype(np.float64)
    if metric == "l2":
        return np.argmin(((x64[:, None] - c64[None]) ** 2).sum(-1), axis=1)
    dot = x64 @ c64.T
    if metric == "dot":
        return np.argmax(dot, axis=1)
    nx = np.linalg.norm(x64, axis=1)[:, None]
    nc = np.linalg.norm(c64, axis=1)[None]
    return np.argmax(dot / nx / nc, axis=1)


@pytest.mark.parametrize("metric", ["l2", "dot", "cosine"])
@pytest.mark.parametrize("device", DEVICES)
def test_vq_assign(metric: str, device: str) -> None:
    rng = np.random.default_rng(len(metric))
    n, d, k = 37, 9, 70
    x = rng.standard_normal((n, d)).astype(np.float32)
    cb = rng.standard_normal((k, d)).astype(np.float32)
    want0 = _vq_numpy(x, cb, metric)
    # duplicate every chosen row at a higher index: the tie keeps the lower one
    for j in np.unique(want0):
        cb[(j + 1) % k if (j + 1) % k > j else j] = cb[j]
    want = _vq_numpy(x, cb, metric)

    def build(g: rlx.Graph) -> None:
        g.outputs(g.vq_assign(g.input("x", [n, d]), g.input("cb", [k, d]), metric=metric))

    got = _run(build, {"x": x, "cb": cb}, device)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def _axial_numpy(
    x: np.ndarray, heads: int, hd: int, end_x: int, end_y: int, theta: float
) -> np.ndarray:
    b, s, _ = x.shape
    freqs = 1.0 / (theta ** (np.arange(0, hd, 4)[: hd // 4] / hd))
    pos = np.arange(s) % (end_x * end_y)
    ang = np.concatenate([np.outer(pos % end_x, freqs), np.outer(pos // end_x, freqs)], axis=1)
    xc = x.astype(np.float64).reshape(b, s, heads, hd // 2, 2)
    z = (xc[..., 0] + 1j * xc[..., 1]) * np.exp(1j * ang)[None, :, None, :]
    return np.stack([z.real, z.imag], axis=-1).reshape(b, s, heads * hd)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "b,s,heads,hd,ex,ey,rep", [(2, 16, 2, 8, 4, 4, 1), (1, 30, 3, 12, 5, 3, 2)]
)
def test_axial_rope2d(
    device: str, b: int, s: int, heads: int, hd: int, ex: int, ey: int, rep: int
) -> None:
    x = np.random.default_rng(s).standard_normal((b, s, heads * hd)).astype(np.float32)

    def build(g: rlx.Graph) -> None:
        xi = g.input("x", [b, s, heads * hd])
        g.outputs(
            g.axial_rope2d(
                xi,
                end_x=ex,
                end_y=ey,
                head_dim=hd,
                num_heads=heads,
                theta=100.0,
                repeat_factor=rep,
            )
        )

    got = _run(build, {"x": x}, device)
    np.testing.assert_allclose(got, _axial_numpy(x, heads, hd, ex, ey, 100.0), atol=1e-5, rtol=1e-5)


def test_vqvae_example() -> None:
    path = Path(__file__).resolve().parent.parent / "examples" / "vqvae_encode.py"
    spec = importlib.util.spec_from_file_location("vqvae_encode", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    outs = {d: mod.encode(d) for d in ("host", "metal-sim")}
    for out in outs.values():
        np.testing.assert_array_equal(
            out["codes"], mod.numpy_codes(out["latents"], out["codebook"])
        )
        np.testing.assert_array_equal(out["quantised"], out["codebook"][out["codes"]])
    np.testing.assert_array_equal(outs["host"]["codes"], outs["metal-sim"]["codes"])
