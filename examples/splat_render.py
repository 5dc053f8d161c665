"""Render a small 3-D Gaussian-splat scene with rlx and save it as a PNG.

The scene has a few hundred splats: a ring of coloured, elongated
Gaussians (rotated along the ring by their quaternions) around a sphere of
small splats whose colour is view-dependent (degree-1 spherical harmonics),
above a flat, wide "floor" of splats. ``gaussian_splat_render`` projects
them (EWA), bins them into 16-pixel tiles, sorts by depth and composites
front to back (Kerbl et al., SIGGRAPH 2023).

Run: ``python examples/splat_render.py [--device host|reference|metal-sim]
[--out splats.png] [--width 320 --height 240]``. It also evaluates the
render's gradient for a photometric loss against a flat grey target and
prints its size per operand.
"""

from __future__ import annotations

import argparse

import numpy as np
import rlx
from PIL import Image
from rlx.ops.misc import SplatConfig

NAMES = ("positions", "scales", "rotations", "opacities", "colors", "sh")


def quat_about(axis: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """Quaternions ``w, x, y, z`` rotating by ``angle`` about unit ``axis``."""
    h = 0.5 * angle
    return np.column_stack([np.cos(h), np.sin(h)[:, None] * axis])


def scene(seed: int = 0) -> dict[str, np.ndarray]:
    """Per-splat operands (f32), SH with 4 coefficients (degree 1)."""
    rng = np.random.default_rng(seed)
    parts = []
    # ring: 160 elongated splats along a circle of radius 1 in the x-z plane
    n = 160
    a = np.linspace(0, 2 * np.pi, n, endpoint=False)
    pos = np.column_stack([np.cos(a), 0.1 * np.sin(3 * a), np.sin(a)])
    rot = quat_about(np.tile([0.0, 1.0, 0.0], (n, 1)), -a)
    hue = a / (2 * np.pi)
    col = np.column_stack([0.5 + 0.5 * np.cos(2 * np.pi * (hue + k / 3)) for k in range(3)])
    parts.append((pos, np.tile([0.03, 0.03, 0.09], (n, 1)), rot, np.full(n, 0.9), col))
    # sphere: 120 round splats on a sphere of radius 0.45
    n = 120
    v = rng.standard_normal((n, 3))
    v = 0.45 * v / np.linalg.norm(v, axis=1, keepdims=True)
    parts.append((v, np.full((n, 3), 0.06), np.tile([1.0, 0, 0, 0], (n, 1)), np.full(n, 0.8),
                  np.tile([0.9, 0.9, 0.95], (n, 1))))
    # floor: 64 wide flat splats on a grid at y = 0.6 (y points down)
    gx, gz = np.meshgrid(np.linspace(-1.6, 1.6, 8), np.linspace(-1.6, 1.6, 8))
    n = gx.size
    pos = np.column_stack([gx.ravel(), np.full(n, 0.6), gz.ravel()])
    checker = ((np.arange(n) + np.arange(n) // 8) % 2).astype(float)
    col = np.column_stack([0.25 + 0.35 * checker] * 2 + [0.3 + 0.2 * checker])
    parts.append((pos, np.tile([0.2, 0.005, 0.2], (n, 1)), np.tile([1.0, 0, 0, 0], (n, 1)),
                  np.full(n, 0.7), col))
    pos, scales, rots, opac, colors = (np.concatenate(x) for x in zip(*parts))
    g = len(pos)
    # SH: DC term from the colour (C0 · sh0 + 0.5 = colour), degree 1 tints the
    # sphere by viewing direction
    sh = np.zeros((g, 4, 3))
    sh[:, 0] = (colors - 0.5) / 0.28209479177387814
    sphere = slice(160, 280)
    sh[sphere, 1] = [0.6, -0.3, 0.0]
    sh[sphere, 3] = [0.0, 0.3, -0.6]
    ops = dict(positions=pos, scales=scales, rotations=rots, opacities=opac, colors=colors, sh=sh)
    return {k: v.astype(np.float32) for k, v in ops.items()}


def look_at(eye: np.ndarray, target: np.ndarray, width: int, height: int) -> np.ndarray:
    """The 20-float camera block: world→camera (OpenCV axes) then fx fy cx cy."""
    fwd = target - eye
    fwd /= np.linalg.norm(fwd)
    right = np.cross([0.0, 1.0, 0.0], fwd)
    right /= np.linalg.norm(right)
    down = np.cross(fwd, right)
    r = np.stack([right, down, fwd])
    view = np.eye(4)
    view[:3, :3] = r
    view[:3, 3] = -r @ eye
    f = 0.9 * width
    return np.concatenate([view.ravel(), [f, f, width / 2, height / 2]]).astype(np.float32)


def build(g_count: int, k: int, cfg: SplatConfig) -> rlx.Graph:
    """image [H, W, 3] and the gradient of ½‖image − target‖² per splat."""
    g = rlx.Graph("splat_render")
    dims = dict(positions=[g_count, 3], scales=[g_count, 3], rotations=[g_count, 4],
                opacities=[g_count], colors=[g_count, 3], sh=[g_count, k, 3])
    ins = [g.input(n, dims[n]) for n in NAMES]
    cam = g.input("camera", [20])
    img = g.gaussian_splat_render(*ins, cam, cfg=cfg, name="image")
    target = g.input("target", [cfg.height, cfg.width, 3])
    grad = g.gaussian_splat_render_backward(*ins, cam, g.sub(img, target), cfg=cfg, sh_band=1,
                                            name="grad")
    g.outputs(img, grad)
    return g


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="host")
    ap.add_argument("--out", default="splats.png")
    ap.add_argument("--width", type=int, default=320)
    ap.add_argument("--height", type=int, default=240)
    args = ap.parse_args(argv)
    ops = scene()
    g_count, k = ops["sh"].shape[:2]
    cfg = SplatConfig(width=args.width, height=args.height, tile_size=16)
    cam = look_at(np.array([0.4, -1.1, -2.6]), np.array([0.0, 0.1, 0.0]), args.width,
                  args.height)
    exe = rlx.compile(build(g_count, k, cfg), device=args.device)
    target = np.full((args.height, args.width, 3), 0.5, np.float32)
    out = exe.run(**ops, camera=cam, target=target)
    img, grad = np.asarray(out["image"]), np.asarray(out["grad"])
    Image.fromarray((np.clip(img, 0, 1) * 255 + 0.5).astype(np.uint8)).save(args.out)
    print(f"{g_count} splats -> {args.out} ({args.width}x{args.height}, device {args.device})")
    print(f"mean colour {img.reshape(-1, 3).mean(0).round(3)}, covered "
          f"{(img.sum(-1) > 0.01).mean():.0%} of the pixels")
    cols = np.cumsum([0, 3, 3, 4, 1, 3, 3 * k])
    for name, a, b in zip(NAMES, cols[:-1], cols[1:]):
        print(f"  |d loss / d {name}| max {np.abs(grad[:, a:b]).max():.4g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
