"""Random fills, vector-quantiser assignment, SPD-manifold ops, Gaussian
splatting and user custom ops."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Optional

from rlx._types import DTypeLike, ShapeLike, dims_list, dtype_name
from rlx.node import Node
from rlx.ops._base import GraphBase, shape_json


@dataclasses.dataclass(frozen=True)
class SplatConfig:
    """Parameters shared by the Gaussian-splat ops (``rlx_ir::SplatConfig``)."""

    width: int
    height: int
    tile_size: int = 16
    radius_scale: float = 3.0
    alpha_cutoff: float = 1.0 / 255.0
    max_splat_steps: int = 1024
    transmittance_threshold: float = 1e-4
    max_list_entries: int = 1 << 20

    def to_json(self) -> dict[str, Any]:
        """The serde dict."""
        return dataclasses.asdict(self)


class MiscOps(GraphBase):
    """RNG, VQ, SPD, splats, custom ops."""

    def rng_normal(
        self,
        shape: ShapeLike,
        *,
        mean: float = 0.0,
        scale: float = 1.0,
        seed: Optional[int] = None,
        dtype: DTypeLike = "f32",
        name: str = "",
    ) -> Node:
        """Normal fill of ``shape`` (Philox 4x32-10, Box–Muller in f32; a ``dtype`` other
        than f32 casts the draw). ``seed=None`` keys the fill from
        ``rlx.compile(..., rng_seed=)`` and the node id; a seed is the Philox key."""
        op = {"op": "rng_normal", "dims": dims_list(shape), "mean": mean, "scale": scale}
        op["seed"] = seed
        return self._rng_cast(op, dtype, name)

    def _rng_cast(self, op: dict[str, Any], dtype: DTypeLike, name: str) -> Node:
        """The fill ``op`` (f32), cast to ``dtype`` when that differs; ``name``
        goes to the last node."""
        to = dtype_name(dtype)
        if to == "f32":
            return self._add(op, [], name)
        return self._add({"op": "cast", "to": to}, [self._add(op, [], "")], name)

    def rng_uniform(
        self,
        shape: ShapeLike,
        *,
        low: float = 0.0,
        high: float = 1.0,
        seed: Optional[int] = None,
        dtype: DTypeLike = "f32",
        name: str = "",
    ) -> Node:
        """Uniform fill of ``shape`` in ``[low, high)`` (Philox 4x32-10; as
        :meth:`rng_normal` for ``seed`` and ``dtype``)."""
        op = {"op": "rng_uniform", "dims": dims_list(shape), "low": low, "high": high}
        op["seed"] = seed
        return self._rng_cast(op, dtype, name)

    def vq_assign(self, x: Node, codebook: Node, *, metric: str = "l2", name: str = "") -> Node:
        """Nearest codebook row: x ``[n, d]``, codebook ``[k, d]`` → i32 ``[n]``
        (``metric``: ``"l2"``, ``"dot"``, ``"cosine"``)."""
        return self._add({"op": "vq_assign", "metric": metric}, [x, codebook], name)

    def spd(self, kind: str, *operands: Node, eps: float = 1e-4, name: str = "") -> Node:
        """SPD-manifold op ``kind``: ``"bi_map"`` (x ``[b, n, n]``, w ``[n, m]``),
        ``"re_eig"``, ``"log_eig"``, ``"batch_norm"`` (x, bias ``[n, n]``),
        ``"karcher_mean"`` (``[b, n, n]`` → ``[n, n]``)."""
        return self._add({"op": "spd", "kind": kind, "eps": eps}, list(operands), name)

    def gaussian_splat_render(
        self,
        positions: Node,
        scales: Node,
        rotations: Node,
        opacities: Node,
        colors: Node,
        sh: Node,
        camera: Node,
        *,
        cfg: SplatConfig,
        name: str = "",
    ) -> Node:
        """3-D Gaussian splatting forward (Kerbl et al. 2023) → ``[height, width, 3]``.

        Operands: ``positions [g, 3]``, ``scales [g, 3]`` (standard deviations,
        already activated), ``rotations [g, 4]`` (quaternions ``w, x, y, z``, any
        norm), ``opacities [g]`` (in [0, 1]), ``colors [g, 3]`` (used when ``sh``
        has ``k = 0`` coefficients), ``sh [g, k, 3]`` (view-dependent colour of
        degree ``min(3, ⌊√k⌋ − 1)``, ``max(0, 0.5 + Σ Y·sh)``) and ``camera [20]``
        (row-major 4×4 world→camera matrix with OpenCV axes, then ``fx, fy, cx,
        cy`` in pixels). Splats are projected (EWA), binned into ``tile_size``
        tiles, depth sorted and composited front to back over a black
        background; see ``python/rlx/reference/splat.py`` for every rule."""
        ins = [positions, scales, rotations, opacities, colors, sh, camera]
        return self._add({"op": "gaussian_splat_render", "cfg": cfg.to_json()}, ins, name)

    def gaussian_splat_prepare(
        self,
        positions: Node,
        scales: Node,
        rotations: Node,
        opacities: Node,
        colors: Node,
        sh: Node,
        camera: Node,
        *,
        cfg: SplatConfig,
        name: str = "",
    ) -> Node:
        """Per-splat screen-space preparation → ``[g, 16]`` records: ``u, v, depth,
        radius, conic a b c, opacity, r g b, tile x0 y0 x1 y1 (exclusive),
        valid`` (culled splats are all-zero rows). Operands as
        :meth:`gaussian_splat_render`."""
        ins = [positions, scales, rotations, opacities, colors, sh, camera]
        return self._add({"op": "gaussian_splat_prepare", "cfg": cfg.to_json()}, ins, name)

    def gaussian_splat_rasterize(
        self, prep: Node, camera: Node, *, cfg: SplatConfig, name: str = ""
    ) -> Node:
        """Rasterise prepared splats ``[g, 16]`` (from :meth:`gaussian_splat_prepare`)
        → ``[height, width, 3]``; ``rasterize(prepare(x)) == render(x)``."""
        op = {"op": "gaussian_splat_rasterize", "cfg": cfg.to_json()}
        return self._add(op, [prep, camera], name)

    def custom_op(self, op_name: str, *inputs: Node, name: str = "", **attrs: Any) -> Node:
        """A registered user op (:func:`rlx.register_op`): its shape function
        gives the result shape; ``attrs`` reach both functions as keywords."""
        from rlx import custom as _custom

        shapes = [(tuple(n.shape), n.dtype) for n in inputs]
        dims, dtype = _custom.infer(op_name, shapes, attrs)
        key = _custom.GPU_KERNEL_KEY
        if key in attrs:
            raise _custom.CustomOpError(f"[{op_name}] attribute name '{key}' is reserved")
        if op_name in _custom.registered_gpu_ops():
            if not all(isinstance(d, int) for d in dims):
                raise _custom.CustomOpError(
                    f"[{op_name}] a GPU op needs a concrete output shape, got {dims}"
                )
            count = math.prod(dims)
            attrs = {**attrs, _custom.GPU_KERNEL_KEY: _custom.kernel_attrs(op_name, count)}
        return self.custom(op_name, list(inputs), dims, dtype, attrs=attrs, name=name)

    def custom(
        self,
        op_name: str,
        inputs: Sequence[Node],
        out_shape: ShapeLike,
        out_dtype: DTypeLike = "f32",
        *,
        attrs: Optional[dict[str, Any]] = None,
        name: str = "",
    ) -> Node:
        """A user op (``rlx.register_op``) with a declared result shape; ``attrs``
        are free-form JSON handed to its kernel."""
        op = {
            "op": "custom",
            "name": op_name,
            "attrs": {} if attrs is None else attrs,
            "out": shape_json(out_shape, out_dtype),
        }
        return self._add(op, list(inputs), name)
