"""The serving engine without HTTP timing luck: a fake model whose tokens are
released one by one by the test makes queueing and cancellation
deterministic; stop-string cutting against ``str.find``; and
:meth:`rlx.DecoderModel.session` isolation on the tiny llama fixture (two
sessions stepped alternately give each one's tokens alone, bit-exact)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import rlx
from rlx.sampling import SamplingParams
from serve_util import LLAMA, ServerThread

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
from rlx.serve.app import Served  # noqa: E402
from rlx.serve.engine import Done, Engine, Job, Piece, StopText  # noqa: E402
from rlx.serve.errors import APIError  # noqa: E402


class _Dec:
    def __init__(self) -> None:
        self.done = False

    def push(self, t: int) -> str:
        return chr(ord("a") + t % 26)

    def flush(self) -> str:
        return ""


class FakeTokenizer:
    eos_ids = frozenset({999})
    chat_template = None
    bos_id = None

    def stream(self) -> _Dec:
        return _Dec()

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        return [ord(c) % 26 for c in text]


class FakeSession:
    """Yields token i when the test allows it (``gate``), counting what it made."""

    def __init__(self, owner: FakeModel) -> None:
        self.owner = owner
        self.tokenizer = owner.tokenizer

    def generate_ids(self, ids: Any, budget: int, params: Any, seed: Any,
                     ignore_eos: bool = False) -> Iterator[int]:  # fmt: skip
        def gen() -> Iterator[int]:
            for i in range(budget):
                if self.owner.gated:
                    assert self.owner.gate.acquire(timeout=10), "test never released a token"
                else:
                    time.sleep(0.002)
                self.owner.made += 1
                yield i

        return gen()


class FakeModel:
    def __init__(self, gated: bool = True) -> None:
        self.tokenizer = FakeTokenizer()
        self.gate = threading.Semaphore(0)
        self.gated = gated
        self.made = 0
        self.sessions = 0

    def session(self) -> FakeSession:
        self.sessions += 1
        return FakeSession(self)


def _job(budget: int, stop: tuple[str, ...] = ()) -> Job:
    return Job([1, 2, 3], budget, SamplingParams(), None, stop)


async def _drain(agen: Any) -> list[Any]:
    return [ev async for ev in agen]


def test_queue_beyond_capacity_and_fifo() -> None:
    async def main() -> None:
        model = FakeModel()
        eng = Engine(model, slots=2, max_queue=1)
        tasks = [asyncio.ensure_future(_drain(eng.generate(_job(3)))) for _ in range(3)]
        await asyncio.sleep(0.05)
        assert (eng.active, eng.queued) == (2, 1)  # two slots busy, the third waits
        with pytest.raises(APIError) as e:  # the queue (max 1) is full
            await eng.generate(_job(1)).__anext__()
        assert e.value.status == 503
        for _ in range(9):
            model.gate.release()
        done = await asyncio.wait_for(asyncio.gather(*tasks), 10)
        for evs in done:
            assert isinstance(evs[-1], Done) and evs[-1].reason == "length"
            assert "".join(ev.text for ev in evs if isinstance(ev, Piece)) == "abc"
        # a slot is released by the worker future's done-callback, which the
        # loop runs after the stream's Done event: let it catch up
        for _ in range(200):
            if eng.active == 0:
                break
            await asyncio.sleep(0.01)
        assert (eng.active, eng.queued, eng.served) == (0, 0, 3)
        assert model.sessions == 2  # one session per slot, reused
        eng.close()

    asyncio.run(main())


def test_closing_the_stream_cancels_the_generation() -> None:
    async def main() -> None:
        model = FakeModel()
        eng = Engine(model, slots=1)
        agen = eng.generate(_job(1000))
        model.gate.release()
        first = await asyncio.wait_for(agen.__anext__(), 10)
        assert isinstance(first, Piece)
        await agen.aclose()  # what a client disconnect does
        model.gate.release()  # let the worker reach its cancellation check
        for _ in range(200):
            if eng.active == 0:
                break
            await asyncio.sleep(0.01)
        assert (eng.active, eng.cancelled, eng.served) == (0, 1, 0)
        assert model.made <= 2  # stopped at the next step, not after 1000 tokens
        model.gated = False  # the slot is free again and serves the next request
        evs = await asyncio.wait_for(_drain(eng.generate(_job(4))), 10)
        assert isinstance(evs[-1], Done) and evs[-1].tokens == 4
        eng.close()

    asyncio.run(main())


def test_client_disconnect_over_http_cancels() -> None:
    """A streaming client that goes away mid-stream frees its slot and its
    generation stops (the fake model would run 100000 tokens)."""
    import httpx

    model = FakeModel(gated=False)
    served = Served("fake", model, engine=Engine(model, slots=1))
    served.model.config = type("C", (), {"ctx": 10**6, "vocab": 26})()
    srv = ServerThread([served])
    try:
        body = {"model": "fake", "prompt": "abc", "max_tokens": 100000, "stream": True}
        with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=30) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            got = [next(lines) for _ in range(6)]
            assert any(x.startswith("data: ") for x in got)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            h = srv.health()["engines"]["fake"]
            if h["active"] == 0:
                break
            time.sleep(0.02)
        assert h["active"] == 0 and h["cancelled"] == 1, h
        made = model.made
        assert made < 100000
        time.sleep(0.1)
        assert model.made == made  # nothing runs any more
    finally:
        srv.stop()


@pytest.mark.parametrize(
    "text, stop",
    [
        ("hello world, hello there", ["o w"]),
        ("abcabcabd", ["abd", "cab"]),
        ("no stop here", ["xyz"]),
        ("split across pieces", ["s p", "oss"]),
        ("ends with a partial st", ["stop"]),
    ],
)
def test_stop_text_matches_find(text: str, stop: list[str]) -> None:
    """Pieces of 1-3 chars in, the text before the first stop string out."""

    class Tok:
        def stream(self) -> Any:
            class D:
                def push(self, t: str) -> str:  # type: ignore[override]
                    return t

                def flush(self) -> str:
                    return ""

            return D()

    hits = [i for i in (text.find(s) for s in stop) if i >= 0]
    want = text[: min(hits)] if hits else text
    for step in (1, 2, 3):
        st = StopText(Tok(), stop)
        out, hit = "", False
        for i in range(0, len(text), step):
            piece, hit = st.push(text[i : i + step])  # type: ignore[arg-type]
            out += piece
            if hit:
                break
        if not hit:
            out += st.flush()[0]
        assert out == want and hit == bool(hits)


def test_sessions_are_isolated() -> None:
    """Two sessions of one model stepped alternately (and the model itself in
    between) each give exactly their tokens alone — greedy and seeded."""
    m = rlx.load(str(LLAMA))
    prompts = [m.tokenizer.encode(p) for p in ("hello world", "the cat sat on")]
    for params, seeds in ((SamplingParams(), (None, None)), (SamplingParams(1.0), (3, 4))):
        alone = [list(m.generate_ids(p, 48, params, s, ignore_eos=True))
                 for p, s in zip(prompts, seeds)]  # fmt: skip
        s1, s2 = m.session(), m.session()
        g1 = s1.generate_ids(prompts[0], 48, params, seeds[0], ignore_eos=True)
        g2 = s2.generate_ids(prompts[1], 48, params, seeds[1], ignore_eos=True)
        got1, got2 = [], []
        for a, b in zip(g1, g2):
            got1.append(a)
            m.logits(prompts[1][:3])  # the base model runs another sequence meanwhile
            got2.append(b)
        assert got1 == alone[0] and got2 == alone[1]
    assert s1.weights is m.weights  # weights shared, not copied
    assert s1._runners and all(
        r1.exe is not r0.exe for r0, r1 in zip(m._runners.values(), s1._runners.values())
    )


def test_missing_web_stack_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the ``rlx[serve]`` extra: one error line naming the pip command."""
    import rlx.serve
    from rlx.cli import main

    monkeypatch.setattr(rlx.serve, "_importable", lambda name: name != "uvicorn")
    assert main(["serve", str(LLAMA), "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert "uvicorn not installed" in err and "rlx[serve]" in err and "Traceback" not in err
