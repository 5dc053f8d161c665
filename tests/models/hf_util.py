"""Helpers for the HF-directory tests: the committed tiny transformers
fixtures (``tests/fixtures/hf/<model_type>/``, made by
scripts/make_hf_fixtures.py on branch wt-fix), copies of them with a changed
config or re-encoded weights, and a safetensors writer."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "hf"
#: the attention-only families (lfm2 has its own tests too)
DENSE = ("llama", "qwen2", "qwen3", "gemma3")


def fixture(name: str) -> Path:
    """The directory of fixture ``name`` (the test is skipped when absent)."""
    import pytest

    d = FIXTURES / name
    if not (d / "expected.npz").exists():
        pytest.skip(f"no HF fixture {d}")
    return d


def expected(d: Path) -> dict[str, np.ndarray]:
    """``expected.npz``: ids24 / logits24, prefill16_decode8, ids80 / logits80."""
    with np.load(d / "expected.npz") as e:
        return {k: e[k] for k in e.files}


def read_tensors(path: Path) -> dict[str, tuple[str, np.ndarray]]:
    """Every tensor of a safetensors file as (dtype name, raw array)."""
    from rlx.io.safetensors import open_safetensors

    f = open_safetensors(path)
    return {k: (f.info(k).dtype, np.array(f.tensor(k))) for k in f.keys()}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, np.ndarray]]) -> None:
    """Write ``{name: (dtype name, array)}`` (BF16 as uint16 bits)."""
    header: dict[str, Any] = {}
    blobs, off = [], 0
    for name, (dt, a) in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(h)))
        fh.write(h)
        for b in blobs:
            fh.write(b)


def copy_fixture(
    src: Path,
    dst: Path,
    config: Optional[Callable[[dict[str, Any]], None]] = None,
    skip: tuple[str, ...] = (),
) -> Path:
    """Copy fixture ``src`` to ``dst`` (weights too), editing config.json
    in place with ``config``; files named in ``skip`` are left out."""
    dst.mkdir(parents=True, exist_ok=True)
    for p in src.iterdir():
        if p.name not in skip and p.name != "expected.npz":
            shutil.copy(p, dst / p.name)
    if config is not None:
        c = json.loads((dst / "config.json").read_text())
        config(c)
        (dst / "config.json").write_text(json.dumps(c))
    return dst


def bf16_bits(a: np.ndarray) -> np.ndarray:
    """f32 → bf16 bits (round to nearest even)."""
    u = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits: np.ndarray) -> np.ndarray:
    """bf16 bits → f32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def rel(a: np.ndarray, b: np.ndarray) -> float:
    """max |a − b| over the largest |b|."""
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))
