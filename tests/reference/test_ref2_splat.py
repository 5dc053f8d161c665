"""Gaussian splats: projection against closed forms, blending against a per-pixel
loop, prepare + rasterize == render, and the analytic backward against finite
differences of the forward (float64, smooth regime: radius_scale 8, no cutoffs).
The backward is packed one row per splat ``[g, 14 + 3k]``."""

from __future__ import annotations

import numpy as np
import pytest
from _mem2 import Arena
from rlx.reference import run_thunk
from rlx.reference.splat import C0, prepare_fn, quat_to_rot, render_backward_fn, render_fn

W, H = 11, 9
CFG = dict(
    width=W,
    height=H,
    tile_size=4,
    radius_scale=8.0,
    alpha_cutoff=0.0,
    max_splat_steps=0,
    transmittance_threshold=0.0,
    max_list_entries=0,
)


def camera(fx: float = 9.0, fy: float = 8.0) -> np.ndarray:
    view = np.eye(4)
    c, s = np.cos(0.1), np.sin(0.1)
    view[:3, :3] = [[c, 0, s], [0, 1, 0], [-s, 0, c]]
    view[:3, 3] = [0.1, -0.2, 0.3]
    return np.concatenate([view.ravel(), [fx, fy, W / 2, H / 2]])


def scene(g: int = 3, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    pos = np.column_stack(
        [rng.uniform(-0.4, 0.4, g), rng.uniform(-0.4, 0.4, g), rng.uniform(2.5, 4, g)]
    )
    scales = rng.uniform(0.15, 0.4, (g, 3))
    rots = rng.standard_normal((g, 4))
    opac = rng.uniform(0.3, 0.8, g)
    colors = rng.uniform(0, 1, (g, 3))
    sh = rng.standard_normal((g, 2, 3)) * 0.5
    return pos, scales, rots, opac, colors, sh


def test_quaternion_rotation() -> None:
    q = np.random.default_rng(1).standard_normal((4, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    r = quat_to_rot(q)
    for m in r:
        np.testing.assert_allclose(m @ m.T, np.eye(3), atol=1e-12)
        assert np.isclose(np.linalg.det(m), 1.0)
    # 90 degrees about z maps x to y
    np.testing.assert_allclose(
        quat_to_rot(np.array([[np.cos(np.pi / 4), 0, 0, np.sin(np.pi / 4)]]))[0] @ [1, 0, 0],
        [0, 1, 0],
        atol=1e-12,
    )


def test_prepare_isotropic_closed_form() -> None:
    meta = np.concatenate([np.eye(4).ravel(), [10.0, 10.0, 5.5, 4.5]])
    pos = np.array([[0.2, -0.1, 2.0]])
    sigma = 0.3
    prep = prepare_fn(
        pos,
        np.full((1, 3), sigma),
        np.array([[1.0, 0, 0, 0]]),
        np.array([0.5]),
        np.array([[0.1, 0.2, 0.3]]),
        np.zeros((1, 0, 3)),
        meta,
        CFG,
    )[0]
    x, y, z = pos[0]
    assert (
        np.isclose(prep[0], 10 * x / z + 5.5)
        and np.isclose(prep[1], 10 * y / z + 4.5)
        and prep[2] == z
    )
    J = np.array([[10 / z, 0, -10 * x / z**2], [0, 10 / z, -10 * y / z**2]])
    cov = J @ (sigma**2 * np.eye(3)) @ J.T + 0.3 * np.eye(2)
    inv = np.linalg.inv(cov)
    np.testing.assert_allclose(prep[4:7], [inv[0, 0], inv[0, 1], inv[1, 1]])
    # 3DGS's bound: λ_max ≈ mid + √max(0.1, mid² − det) (≥ the true largest eigenvalue)
    mid, det = 0.5 * np.trace(cov), np.linalg.det(cov)
    lam = mid + np.sqrt(max(0.1, mid * mid - det))
    assert lam >= np.linalg.eigvalsh(cov).max()
    assert prep[3] == np.ceil(8.0 * np.sqrt(lam))
    np.testing.assert_allclose(prep[7:11], [0.5, 0.1, 0.2, 0.3])
    assert prep[15] == 1.0
    behind = prepare_fn(
        pos * [1, 1, -1],
        np.full((1, 3), sigma),
        np.array([[1.0, 0, 0, 0]]),
        np.array([0.5]),
        np.array([[0.1, 0.2, 0.3]]),
        np.zeros((1, 0, 3)),
        meta,
        CFG,
    )
    assert np.all(behind == 0)


@pytest.mark.parametrize(
    "cfg_over",
    [
        {},
        dict(
            alpha_cutoff=0.05,
            transmittance_threshold=0.3,
            max_splat_steps=2,
            radius_scale=3.0,
            tile_size=3,
        ),
    ],
)
def test_render_matches_pixel_loop(cfg_over: dict) -> None:
    cfg = dict(CFG, **cfg_over)
    pos, scales, rots, opac, colors, sh = scene(4)
    meta = camera()
    prep = prepare_fn(pos, scales, rots, opac, colors, sh, meta, cfg)
    img = render_fn(pos, scales, rots, opac, colors, sh, meta, cfg)
    order = np.argsort(prep[:, 2], kind="stable")
    ts = cfg["tile_size"]
    want = np.zeros((H, W, 3))
    for y in range(H):
        for x in range(W):
            T, C, count = 1.0, np.zeros(3), 0
            for i in order:
                if prep[i, 15] == 0:
                    continue
                if not (
                    prep[i, 11] <= x // ts < prep[i, 13] and prep[i, 12] <= y // ts < prep[i, 14]
                ):
                    continue
                dx, dy = prep[i, 0] - (x + 0.5), prep[i, 1] - (y + 0.5)
                pw = -0.5 * (prep[i, 4] * dx * dx + prep[i, 6] * dy * dy) - prep[i, 5] * dx * dy
                if pw > 0:
                    continue
                al = min(0.99, prep[i, 7] * np.exp(pw))
                if al < cfg["alpha_cutoff"]:
                    continue
                if T * (1 - al) < cfg["transmittance_threshold"]:
                    break
                C += al * T * prep[i, 8:11]
                T *= 1 - al
                count += 1
                if cfg["max_splat_steps"] and count >= cfg["max_splat_steps"]:
                    break
            want[y, x] = C
    np.testing.assert_allclose(img, want, rtol=1e-12, atol=1e-12)
    assert img.max() > 0.05  # the scene is visible
    # SH DC colour when sh is present
    np.testing.assert_allclose(
        prep[:, 8:11][prep[:, 15] > 0], np.maximum(0.5 + C0 * sh[:, 0], 0)[prep[:, 15] > 0]
    )


def test_max_list_entries_truncates() -> None:
    pos, scales, rots, opac, colors, sh = scene(3)
    full = render_fn(pos, scales, rots, opac, colors, sh, camera(), CFG)
    cut = render_fn(pos, scales, rots, opac, colors, sh, camera(), dict(CFG, max_list_entries=2))
    assert not np.allclose(full, cut)


@pytest.mark.parametrize("use_sh", [True, False])
def test_backward_finite_differences(use_sh: bool) -> None:
    pos, scales, rots, opac, colors, sh = scene(3, seed=2)
    if not use_sh:
        sh = np.zeros((3, 0, 3))
    meta = camera()
    d_img = np.random.default_rng(5).standard_normal((H, W, 3))
    params = [pos, scales, rots, opac, colors, sh]
    packed = render_backward_fn(*params, meta, CFG, d_img)
    widths = [p.size // 3 for p in params]  # columns per splat (g = 3)
    assert packed.shape == (3, sum(widths))
    parts = [c.ravel() for c in np.split(packed, np.cumsum(widths)[:-1], axis=1)]
    for pi, p in enumerate(params):
        for j in range(p.size):
            h = 1e-6
            pp = [q.copy() for q in params]
            pp[pi].reshape(-1)[j] += h
            fp = np.sum(render_fn(*pp, meta, CFG) * d_img)
            pp[pi].reshape(-1)[j] -= 2 * h
            fm = np.sum(render_fn(*pp, meta, CFG) * d_img)
            fd = (fp - fm) / (2 * h)
            assert abs(parts[pi][j] - fd) < 1e-5 * max(1.0, abs(fd)), (pi, j, parts[pi][j], fd)
    assert np.abs(parts[0]).max() > 1e-3  # positions do get a gradient


def _thunk_fields(a: Arena, params: list[np.ndarray], meta: np.ndarray) -> dict:
    t = dict(CFG)
    for name, p in zip(
        ["positions", "scales", "rotations", "opacities", "colors", "sh_coeffs"], params
    ):
        t[f"{name}_off"] = a.put(p.astype(np.float32))
        t[f"{name}_len"] = p.size
    t["meta_off"], t["meta_len"] = a.put(meta.astype(np.float32)), 20
    return t


def test_splat_thunks() -> None:
    params = [p.astype(np.float32).astype(np.float64) for p in scene(3, seed=4)]
    meta = camera().astype(np.float32).astype(np.float64)
    g = params[0].shape[0]
    a = Arena()
    t = _thunk_fields(a, params, meta)
    dl = np.random.default_rng(0).standard_normal((H, W, 3)).astype(np.float32)
    img_o, img2_o, prep_o = a.out((H, W, 3)), a.out((H, W, 3)), a.out((g, 16))
    dlo, pko = a.put(dl), a.out(sum(p.size for p in params))
    mem = a.build()
    run_thunk(dict(t, name="gaussian_splat_render", dst_off=img_o, dst_len=H * W * 3), mem)
    run_thunk(dict(t, name="gaussian_splat_prepare", prep_off=prep_o, prep_len=g * 16), mem)
    run_thunk(
        dict(
            name="gaussian_splat_rasterize",
            prep_off=prep_o,
            prep_len=g * 16,
            meta_off=t["meta_off"],
            meta_len=20,
            dst_off=img2_o,
            dst_len=H * W * 3,
            count=g,
            **CFG,
        ),
        mem,
    )
    run_thunk(
        dict(
            t,
            name="gaussian_splat_render_backward",
            d_loss_off=dlo,
            d_loss_len=dl.size,
            packed_off=pko,
            packed_len=sum(p.size for p in params),
            loss_grad_clip=0.5,
            sh_band=0,
            max_anisotropy=0.0,
        ),
        mem,
    )
    want = render_fn(*params, meta, CFG)
    np.testing.assert_allclose(a.read(img_o, (H, W, 3)), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(a.read(img2_o, (H, W, 3)), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        a.read(prep_o, (g, 16)), prepare_fn(*params, meta, CFG), rtol=1e-6, atol=1e-6
    )
    clipped = np.clip(dl.astype(np.float64), -0.5, 0.5)
    np.testing.assert_allclose(
        a.read(pko, sum(p.size for p in params)),
        render_backward_fn(*params, meta, CFG, clipped).ravel(),
        rtol=1e-5,
        atol=1e-6,
    )
