"""What the image classifiers (:mod:`rlx.models.resnet`, :mod:`rlx.models.vit`)
share: reading ``config.json`` with its ``model_type`` check, the one
safetensors file of a directory, the ``pixel_values`` checks and compiling a
graph with its params bound from a dict of arrays."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlx.errors import DTypeError, ShapeError, WeightFormatError
from rlx.executable import Executable
from rlx.executable import compile as rlx_compile
from rlx.graph import Graph
from rlx.io.safetensors import SafetensorsFile


def read_config(path: Path, tag: str, model_types: Sequence[str]) -> dict[str, Any]:
    """The JSON object of ``config.json`` (WeightFormatError if unreadable or of
    another ``model_type``); ``tag`` names the model in messages."""
    try:
        c = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise WeightFormatError(f"[{tag}] {path}: cannot read config ({e})") from e
    if not isinstance(c, dict) or c.get("model_type") not in model_types:
        mt = c.get("model_type") if isinstance(c, dict) else None
        raise WeightFormatError(
            f"[{tag}] {path}: model_type {mt!r} is not supported "
            f"(supported: {', '.join(model_types)})"
        )
    return c


def single_safetensors(root: Path, tag: str) -> SafetensorsFile:
    """The one ``*.safetensors`` file of ``root`` (WeightFormatError otherwise)."""
    files = sorted(root.glob("*.safetensors"))
    if len(files) != 1:
        raise WeightFormatError(
            f"[{tag}] {root}: expected one .safetensors file, found {len(files)}"
        )
    return SafetensorsFile(files[0])


def pixel_batch(pixel_values: Any, channels: int, tag: str) -> np.ndarray:
    """``pixel_values`` ``[n, channels, h, w]`` (or one image ``[channels, h, w]``)
    as contiguous float32 ``[n, channels, h, w]``; ShapeError / DTypeError
    naming the parameter."""
    x = np.asarray(pixel_values)
    if x.ndim == 3:
        x = x[None]
    if x.ndim != 4:
        raise ShapeError(
            f"[{tag}] pixel_values must be [n, channels, h, w] or [channels, h, w], "
            f"got shape {list(x.shape)}"
        )
    if x.shape[1] != channels:
        raise ShapeError(
            f"[{tag}] pixel_values has {x.shape[1]} channels (dim 1); the model takes {channels}"
        )
    if not np.issubdtype(x.dtype, np.floating):
        raise DTypeError(f"[{tag}] pixel_values must be floating point, got {x.dtype}")
    return np.ascontiguousarray(x, np.float32)


def compile_bound(graph: Graph, device: str, values: dict[str, np.ndarray]) -> Executable:
    """``graph`` compiled for ``device`` with every param bound from ``values``."""
    exe = rlx_compile(graph, device=device)
    for name in exe.params:
        exe.bind_param(name, values[name])
    return exe
