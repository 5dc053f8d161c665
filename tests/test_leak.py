"""No leak: models and executables loaded, run and dropped hundreds of times
keep the process's resident memory flat (read from /proc/self/statm).

What a leak would cost here: the tiny model's in-place KV cache at the
1024-slot capacity a 300-token ``logits`` call sizes is 3 layers x 1024 x 32
x 2 x 4 bytes = 786 KiB, so keeping one per cycle adds ~47 MiB over the 60
model cycles; the executable's arena + state + weights are ~1.2 MiB, ~360 MiB
over its 300 cycles. The bounds below leave room for allocator noise (a few
MiB measured) and nothing near that."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import rlx

sys.path.insert(0, str(Path(__file__).parent / "models"))

if not Path("/proc/self/statm").exists():  # pragma: no cover - Linux only
    pytest.skip("needs /proc/self/statm", allow_module_level=True)


def _rss_mib() -> float:
    gc.collect()
    resident_pages = int(Path("/proc/self/statm").read_text().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_model_load_generate_logits_drop_does_not_leak(tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    from tiny_gguf import write_tiny

    path = str(write_tiny(tmp_path / "llama_q8.gguf", "llama", "Q8_0"))
    prompt = [256] + [(7 * i) % 250 for i in range(299)]

    def cycle() -> None:
        m = rlx.load(path)
        assert m.inplace  # the in-place cache shared by several executables
        list(m.generate("hello", max_tokens=6, ignore_eos=True))
        m.logits(prompt)  # a second, larger cache (1024 slots)
        m.next_logits([3])
        half = m.generate("abandoned", max_tokens=20, ignore_eos=True)
        next(half)  # a generator dropped half-way, with its model
        del m, half

    for _ in range(5):  # warm-up: allocator pools, lazily built tables
        cycle()
    before = _rss_mib()
    cycles = 60
    for _ in range(cycles):
        cycle()
    after = _rss_mib()
    # a leaked KV cache per cycle would add ~47 MiB
    assert after - before < 12.0, f"RSS {before:.1f} → {after:.1f} MiB over {cycles} cycles"


def test_executable_compile_run_drop_does_not_leak() -> None:
    g = rlx.Graph("leak")
    x = g.input("x", [64, 256])
    s = g.state("s", [256, 256])
    w = g.param("w", [256, 256])
    g.outputs(g.add(g.matmul(x, w), g.matmul(x, s)))
    rng = np.random.default_rng(0)
    wv = rng.standard_normal((256, 256)).astype(np.float32)
    xv = rng.standard_normal((64, 256)).astype(np.float32)

    def cycle(bind: bool) -> None:
        a, b = rlx.compile(g), rlx.compile(g)
        b.share_state(a)
        for e in (a, b):
            (e.bind_param if bind else e.set_param)("w", wv)
        a.set_state("s", wv)
        b.run(x=xv)
        del a, b

    for i in range(10):
        cycle(i % 2 == 0)
    before = _rss_mib()
    cycles = 300
    for i in range(cycles):
        cycle(i % 2 == 0)
    after = _rss_mib()
    # one leaked pair per cycle would add ~360 MiB
    assert after - before < 12.0, f"RSS {before:.1f} → {after:.1f} MiB over {cycles} cycles"
