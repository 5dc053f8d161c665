"""User-defined ops: ``rlx.register_op(name, shape_fn, host_fn)``.

A registered op is added to a graph with ``g.custom_op(name, *inputs,
**attrs)``. Its shape function gives the result shape at build time; its
host function runs when the schedule reaches the op (as a
``custom_op`` thunk), on the host and reference devices alike, through the
same callback bridge as the numpy reference.

``shape_fn(*input_shapes, **attrs)`` receives one ``(dims, dtype)`` pair per
input and returns ``(dims, dtype)`` (or just ``dims`` to keep the first
input's dtype). ``host_fn(inputs, out, **attrs)`` receives numpy views of
the inputs and of the output, and writes the output in place.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import numpy as np

from rlx.reference import CUSTOM_OPS

ShapeFn = Callable[..., Any]
HostFn = Callable[..., None]

_SHAPE_FNS: dict[str, ShapeFn] = {}


def register_op(name: str, shape_fn: ShapeFn, host_fn: HostFn) -> None:
    """Register a user op under ``name`` (replacing an earlier registration)."""
    if not name or not isinstance(name, str):
        raise ValueError("[register_op] the op needs a non-empty string name")

    def bridge(inputs: list[np.ndarray], out: np.ndarray, attrs: bytes) -> None:
        kwargs = json.loads(attrs.decode() or "{}") if attrs else {}
        host_fn(inputs, out, **kwargs)

    _SHAPE_FNS[name] = shape_fn
    CUSTOM_OPS[name] = bridge


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
