"""Thread safety: one Executable run from 8 threads, executables sharing one
state buffer run from several threads, one DecoderModel generating from 4
threads — every result compared bit-exactly with the same work done serially
first (the executor is deterministic: the same inputs give the same bits).
Also: two generators interleaved in one thread neither deadlock nor compute
on the wrong cache (the displaced one raises)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rlx
from rlx.concurrency import SequenceInterrupted

sys.path.insert(0, str(Path(__file__).parent / "models"))

#: seconds a test waits for its threads before calling it a hang
JOIN_TIMEOUT = 120.0


def _run_threads(n: int, work: Callable[[int], Any]) -> list[Any]:
    """``work(i)`` on ``n`` threads started together; their results (an
    exception a thread raised is re-raised here)."""
    results: list[Any] = [None] * n
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def body(i: int) -> None:
        try:
            start.wait()
            results[i] = work(i)
        except BaseException as e:  # noqa: BLE001 — re-raised by the main thread
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT)
        assert not t.is_alive(), "a thread hung"
    if errors:
        raise errors[0]
    return results


def _mlp_graph() -> rlx.Graph:
    """x [32, 64] → matmul → gelu → matmul → softmax: native kernels with
    arena intermediates (what two overlapping runs would clobber)."""
    g = rlx.Graph("mlp")
    x = g.input("x", [32, 64])
    h = g.gelu(g.matmul(x, g.param("w1", [64, 128])))
    g.outputs(g.softmax(g.matmul(h, g.param("w2", [128, 64])), axis=-1))
    return g


def test_one_executable_from_eight_threads() -> None:
    exe = rlx.compile(_mlp_graph())
    rng = np.random.default_rng(0)
    exe.set_param("w1", (rng.standard_normal((64, 128)) * 0.2).astype(np.float32))
    exe.set_param("w2", (rng.standard_normal((128, 64)) * 0.2).astype(np.float32))
    threads, per_thread = 8, 40
    xs = rng.standard_normal((threads, per_thread, 32, 64)).astype(np.float32)
    serial = [[next(iter(exe.run(x=x).values())) for x in row] for row in xs]

    def work(i: int) -> int:
        for k in range(per_thread):
            out = next(iter(exe.run(x=xs[i, k]).values()))
            # bit-exact: same schedule, same inputs, same bits
            np.testing.assert_array_equal(out, serial[i][k])
            if k % 8 == 0:
                assert exe.stats["thunks"] > 0  # info calls meanwhile: no "Already borrowed"
        return per_thread

    assert sum(_run_threads(threads, work)) == threads * per_thread


def test_executables_sharing_state_from_threads() -> None:
    """Two executables over one state buffer, run from 6 threads: their runs
    never overlap (one lock per shared buffer), so none fails with "state
    buffer in use" and each reads the state intact."""
    g = rlx.Graph("st")
    s = g.state("s", [128, 128])
    h = g.matmul(g.input("x", [128, 128]), s)
    g.outputs(g.add(g.matmul(h, s), s))
    a, b = rlx.compile(g), rlx.compile(g)
    b.share_state(a)
    assert a.shares_state_with(b)
    rng = np.random.default_rng(1)
    a.set_state("s", (rng.standard_normal((128, 128)) * 0.1).astype(np.float32))
    xs = rng.standard_normal((6, 30, 128, 128)).astype(np.float32)
    serial = [[next(iter(a.run(x=x).values())) for x in row] for row in xs]

    def work(i: int) -> None:
        exe = a if i % 2 else b
        for k in range(xs.shape[1]):
            np.testing.assert_array_equal(next(iter(exe.run(x=xs[i, k]).values())), serial[i][k])

    _run_threads(6, work)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("gguf")
    from tiny_gguf import write_tiny

    path = write_tiny(tmp_path_factory.mktemp("threads") / "llama.gguf", "llama", "Q8_0")
    return rlx.load(str(path))


PROMPTS = ["hello", "the cat sat", "a b c d e f", "thread safety", "zz", "rlx runs", "q", "xyz"]


def test_one_model_generating_from_four_threads(tiny_model: Any) -> None:
    m = tiny_model
    kw: dict[str, Any] = {"max_tokens": 12, "ignore_eos": True}
    serial = {p: list(m.generate_ids(m.encode(p), **kw)) for p in PROMPTS}
    serial_logits = {p: m.logits(m.encode(p)) for p in PROMPTS}
    rounds = 3

    def work(i: int) -> int:
        done = 0
        for r in range(rounds):
            for j, p in enumerate(PROMPTS):
                if (i + j + r) % 2:
                    assert list(m.generate_ids(m.encode(p), **kw)) == serial[p], p
                else:
                    np.testing.assert_array_equal(m.logits(m.encode(p)), serial_logits[p])
                done += 1
        return done

    # 4 threads x 3 rounds x 8 prompts = 96 generations / logits calls
    assert sum(_run_threads(4, work)) == 4 * rounds * len(PROMPTS)
    # text generation (detokenized stream) from threads as well
    text = "".join(m.generate("hello", max_tokens=8, ignore_eos=True))
    texts = _run_threads(4, lambda i: "".join(m.generate("hello", max_tokens=8, ignore_eos=True)))
    assert texts == [text] * 4


def test_interleaved_generators_in_one_thread(tiny_model: Any) -> None:
    m = tiny_model
    kw: dict[str, Any] = {"max_tokens": 6, "ignore_eos": True}
    want = list(m.generate_ids(m.encode("second"), **kw))
    g1 = m.generate_ids(m.encode("first"), **kw)
    g2 = m.generate_ids(m.encode("second"), **kw)
    next(g1)
    assert next(g2) == want[0]  # no deadlock: the newer generator takes over
    with pytest.raises(SequenceInterrupted, match="interrupted"):
        next(g1)  # its cache is gone: an error, never wrong tokens
    assert isinstance(SequenceInterrupted("x"), rlx.RlxError)
    assert [*want[:1], *g2] == want
    # a logits call in between displaces a generator the same way
    g3 = m.generate_ids(m.encode("second"), **kw)
    next(g3)
    m.logits([1, 2, 3])
    with pytest.raises(SequenceInterrupted):
        next(g3)


def test_abandoned_generator_releases_the_model(tiny_model: Any) -> None:
    """A generator dropped half-way (in another thread) frees the model for
    other threads."""
    m = tiny_model

    def start_and_drop(_i: int) -> None:
        g = m.generate_ids(m.encode("abandon"), max_tokens=20, ignore_eos=True)
        next(g)
        del g

    _run_threads(1, start_and_drop)
    out = _run_threads(2, lambda _i: m.logits([5, 6, 7]).shape)
    assert out[0] == out[1]
