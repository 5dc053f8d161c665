"""Fuzz targets: one function per input format, each taking raw bytes.

A target returns normally or raises :class:`rlx.RlxError`; anything else
(a raw ``ValueError``, ``IndexError``, ``RecursionError``, ``MemoryError``,
a ``pyo3_runtime.PanicException`` from the Rust side, …) is a finding.
Both engines drive these: ``fuzz/mutate.py`` (a seeded, dependency-free
mutation fuzzer: the bounded CI run and the recorded campaign) and the
atheris harnesses ``fuzz/fuzz_*.py`` (coverage-guided, libFuzzer).

The readers memory-map a file, so each input is written to one scratch
file per process (under ``/dev/shm`` when it exists) and opened from there.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np
import rlx
from rlx.errors import RlxError
from rlx.io.gguf import GGUFFile
from rlx.io.safetensors import SafetensorsFile

_DIR = Path(
    tempfile.mkdtemp(prefix="rlx-fuzz-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
)


atexit.register(shutil.rmtree, _DIR, True)


def scratch(data: bytes, name: str) -> Path:
    """``data`` written to the per-process scratch file ``name`` (a new
    inode each time: a map of the previous input stays valid)."""
    p = _DIR / name
    p.unlink(missing_ok=True)
    p.write_bytes(data)
    return p


def _touch(a: np.ndarray) -> None:
    """Read the first and last byte of a view (a view past the end of the
    map would fault here, not silently later)."""
    if a.size:
        b = a.reshape(-1).view(np.uint8)
        int(b[0]) + int(b[-1])


def gguf_target(data: bytes) -> None:
    """Open a GGUF file and use every accessor on every key and tensor."""
    f = GGUFFile(scratch(data, "in.gguf"))
    for k in f.keys():
        types = f.value_types(k)
        if types[0] == "ARRAY":
            if types[-1] == "STRING":
                f.get_str_list(k)
            elif types[-1] != "ARRAY":
                _touch(f.get_array(k))
        f.get(k)
    f.get_str("general.architecture", None)
    for t in f.tensors:
        _touch(f.tensor_bytes(t.name))
        _touch(f.tensor_rows(t.name))
        if t.ggml_type in ("F32", "F16", "BF16"):
            _touch(f.tensor_array(t.name))
        assert t.row_bytes >= 0
    f.check_unchanged()


def safetensors_target(data: bytes) -> None:
    """Open a safetensors file and view every tensor (typed and as rows)."""
    f = SafetensorsFile(scratch(data, "in.safetensors"))
    for name in f.keys():
        _touch(f.tensor(name))
        if len(f.info(name).shape) == 2:
            _touch(f.raw(name))
    f.check_unchanged()


def model_target(data: bytes) -> None:
    """Load a GGUF model (config, tokenizer, every weight, the decode graph)
    and run one token through it."""
    from rlx.models.decoder import DecoderModel

    m = DecoderModel(scratch(data, "model.gguf"), inplace=False)
    m.next_logits([0])


_HF = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "hf"
_MODEL_TYPE = re.compile(rb'"model_type"\s*:\s*"([^"]{1,40})"')
_FIXTURES: dict[str, Path] = {}


def _fixture(data: bytes) -> Path:
    """The fixture directory (weights, tokenizer) of the config's
    ``model_type`` (the tiny llama when it names none we have)."""
    if not _FIXTURES:
        for d in sorted(_HF.iterdir()):
            mt = _MODEL_TYPE.search((d / "config.json").read_bytes())
            if mt is not None:
                _FIXTURES.setdefault(mt.group(1).decode(), d)
    m = _MODEL_TYPE.search(data)
    key = m.group(1).decode("utf-8", "replace") if m else ""
    return _FIXTURES.get(key, _HF / "llama")


def hf_config_target(data: bytes) -> None:
    """Load an HF directory whose ``config.json`` is the input (weights and
    tokenizer: the tiny fixture of its ``model_type``, symlinked) and run
    one token: the ``config.json`` reader, hyper-parameter validation and
    the family's builder."""
    from rlx.models.decoder import DecoderModel

    src = _fixture(data)
    d = _DIR / f"hf-{src.name}"
    if not d.exists():
        d.mkdir()
        for f in src.iterdir():
            if f.name not in ("config.json", "expected.npz", "meta.json"):
                (d / f.name).symlink_to(f)
    scratch(data, f"{d.name}/config.json")
    DecoderModel(d).next_logits([0])


def graph_json_target(data: bytes) -> None:
    """``Graph.from_json`` (Rust: serde + the IR verifier) on the input,
    then compile it (Rust: shape inference, lowering, planning)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return
    g = rlx.Graph.from_json(text)
    g.verify()
    rlx.Graph.from_json(g.to_json())
    # compile only graphs whose every value is small (the arena is real memory)
    sizes = [n.shape for n in g.nodes]
    if all(all(isinstance(d, int) for d in s) for s in sizes):
        if sum(int(np.prod(s, dtype=np.float64)) for s in sizes) <= 1 << 16:
            rlx.compile(g)


def gguf_rows_target(data: bytes) -> None:
    """The native embedding decoder ``gguf_dequantize_rows`` (Rust, through
    the binding) on arbitrary type id / k / row ids / packed bytes. Input
    layout: u32 type id, u32 k, u8 row count, u8 rows per id, then int16
    row ids, then the packed bytes (shaped ``[n_rows, len // n_rows]``)."""
    from rlx._rlx import gguf_dequantize_rows

    if len(data) < 10:
        return
    type_id, k, n_ids, n_rows = struct.unpack_from("<IIBB", data)
    k %= 1 << 14
    ids = list(struct.unpack_from(f"<{n_ids}h", data, 10)) if len(data) >= 10 + 2 * n_ids else []
    raw = np.frombuffer(data[10 + 2 * n_ids :], np.uint8)
    n_rows = max(n_rows, 1)
    raw = raw[: len(raw) // n_rows * n_rows].reshape(n_rows, -1)
    out = np.zeros((len(ids), k), np.float32)
    gguf_dequantize_rows(type_id, raw, ids, k, out)


TARGETS: dict[str, Callable[[bytes], None]] = {
    "gguf": gguf_target,
    "safetensors": safetensors_target,
    "model": model_target,
    "graph_json": graph_json_target,
    "gguf_rows": gguf_rows_target,
    "hf_config": hf_config_target,
}
#: exceptions a target may raise (everything rlx raises on bad input)
ALLOWED = (RlxError,)
