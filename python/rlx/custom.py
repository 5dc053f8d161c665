"""User-defined ops: ``rlx.register_op(name, shape_fn, host_fn)`` and
``rlx.register_gpu_op(name, msl_source, ...)``.

A registered op is added to a graph with ``g.custom_op(name, *inputs,
**attrs)``. Its shape function gives the result shape at build time; its
host function runs when the schedule reaches the op (as a
``custom_op`` thunk), on the host and reference devices alike, through the
same callback bridge as the numpy reference.

``shape_fn(*input_shapes, **attrs)`` receives one ``(dims, dtype)`` pair per
input and returns ``(dims, dtype)`` (or just ``dims`` to keep the first
input's dtype). ``host_fn(inputs, out, **attrs)`` receives numpy views of
the inputs and of the output, and writes the output in place.

A GPU op (:func:`register_gpu_op`) is added the same way; it lowers to a
``custom_gpu_op`` thunk that carries the user's Metal source. On
``metal-sim`` the source is compiled and run by msl-sim (with its checks:
writes past a buffer's end, divergent barriers, deadlocks), on Metal by the
encoder, and on the host / reference devices the Python ``fallback`` runs.
Binding convention of the kernel: input ``i`` at ``[[buffer(i)]]``, the
output at ``[[buffer(n_inputs)]]``, the output's element count as a
``constant uint&`` at ``[[buffer(n_inputs + 1)]]``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Optional

import numpy as np

from rlx.errors import RlxError
from rlx.reference import CUSTOM_OPS


class CustomOpError(RlxError, ValueError):
    """A bad user-op registration or use (also a ``ValueError``)."""


ShapeFn = Callable[..., Any]
HostFn = Callable[..., None]

_SHAPE_FNS: dict[str, ShapeFn] = {}

# attribute key of the kernel spec (``GPU_KERNEL_KEY`` in the Rust thunk)
GPU_KERNEL_KEY = "__msl__"


@dataclasses.dataclass(frozen=True)
class _GpuKernel:
    source: str
    kernel: str
    grid: Any  # (x, y, z) threadgroups, a callable of the output size, or None
    threadgroup: tuple[int, int, int]


_GPU_KERNELS: dict[str, _GpuKernel] = {}


def _same_as_first(*shapes: tuple[tuple[Any, ...], str], **_attrs: Any) -> Any:
    if not shapes:
        raise CustomOpError("[register_gpu_op] an op without inputs needs outputs=")
    return shapes[0]


def _triple(name: str, what: str, v: Any) -> tuple[int, int, int]:
    t = tuple(int(x) for x in (v if isinstance(v, (tuple, list)) else (v,)))
    if not 1 <= len(t) <= 3 or any(x < 1 or x >= 2**32 for x in t):
        raise CustomOpError(f"[{name}] {what} must be 1 to 3 positive sizes, got {v!r}")
    return (t + (1, 1))[:3]  # type: ignore[return-value]


def register_gpu_op(
    name: str,
    msl_source: str,
    *,
    kernel: Optional[str] = None,
    grid: Any = None,
    threadgroup: Any = (64, 1, 1),
    outputs: Optional[ShapeFn] = None,
    fallback: HostFn,
) -> None:
    """Register a user op with a Metal kernel under ``name``.

    ``msl_source`` is a Metal library holding the ``kernel`` function
    (default: ``name``). ``threadgroup`` is threads per threadgroup;
    ``grid`` threadgroups per grid, as a tuple or a callable of the output
    element count (default: one thread per output element, rounded up).
    ``outputs(*input_shapes, **attrs)`` gives the result shape as
    :func:`register_op`'s shape function does (default: the first input's).
    ``fallback(inputs, out, **attrs)`` computes the op with numpy where no
    GPU runs it (host and reference devices). Add the op to a graph with
    ``g.custom_op(name, *inputs, **attrs)``.
    """
    if not name or not isinstance(name, str):
        raise CustomOpError("[register_gpu_op] the op needs a non-empty string name")
    if not isinstance(msl_source, str) or not msl_source.strip():
        raise CustomOpError(f"[{name}] msl_source must be non-empty Metal source text")
    if not callable(fallback):
        raise CustomOpError(f"[{name}] fallback must be a callable(inputs, out, **attrs)")
    tg = _triple(name, "threadgroup", threadgroup)
    if grid is not None and not callable(grid):
        _triple(name, "grid", grid)
    register_op(name, outputs or _same_as_first, fallback)
    _GPU_KERNELS[name] = _GpuKernel(msl_source, kernel or name, grid, tg)


def kernel_attrs(name: str, out_elements: int) -> Optional[dict[str, Any]]:
    """The kernel spec a GPU op stores in its attributes (``None`` for a
    host op): source, function, grid and threadgroup for this output size."""
    k = _GPU_KERNELS.get(name)
    if k is None:
        return None
    if k.grid is None:
        grid: Any = (max(1, -(-out_elements // k.threadgroup[0])), 1, 1)
    elif callable(k.grid):
        grid = k.grid(out_elements)
    else:
        grid = k.grid
    return {
        "source": k.source,
        "kernel": k.kernel,
        "grid": list(_triple(name, "grid", grid)),
        "threadgroup": list(k.threadgroup),
    }


def register_op(name: str, shape_fn: ShapeFn, host_fn: HostFn) -> None:
    """Register a user op under ``name`` (replacing an earlier registration)."""
    if not name or not isinstance(name, str):
        raise CustomOpError("[register_op] the op needs a non-empty string name")

    def bridge(inputs: list[np.ndarray], out: np.ndarray, attrs: bytes) -> None:
        kwargs = json.loads(attrs.decode() or "{}") if attrs else {}
        kwargs.pop(GPU_KERNEL_KEY, None)
        host_fn(inputs, out, **kwargs)

    _SHAPE_FNS[name] = shape_fn
    CUSTOM_OPS[name] = bridge
    _GPU_KERNELS.pop(name, None)


def registered_ops() -> list[str]:
    """Names of the registered user ops."""
    return sorted(_SHAPE_FNS)


def infer(
    name: str, shapes: list[tuple[tuple[Any, ...], str]], attrs: dict[str, Any]
) -> tuple[list[Any], str]:
    """Run the shape function of ``name``."""
    fn = _SHAPE_FNS.get(name)
    if fn is None:
        raise KeyError(f"[custom] no op registered under '{name}'; see rlx.register_op")
    res = fn(*shapes, **attrs)
    if isinstance(res, tuple) and len(res) == 2 and isinstance(res[1], str):
        dims, dtype = res
    else:
        dims, dtype = res, shapes[0][1] if shapes else "f32"
    return list(dims), str(dtype)


def registered_gpu_ops() -> list[str]:
    """Names of the registered GPU ops."""
    return sorted(_GPU_KERNELS)
