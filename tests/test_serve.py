"""``rlx serve`` end to end: the official ``openai`` client against a server
started here on a loopback port (uvicorn in a thread), serving the tiny
llama GGUF fixture (ctx 256) and the tiny BERT fixture.

References the server is checked against: the in-process
:meth:`rlx.DecoderModel.generate_ids` (same tokens; the server must add
nothing and lose nothing), the same request served alone (concurrency
isolation, bit-exact), a chat template rendered here with plain jinja2, and
transformers' BERT embeddings (``tests/fixtures/bert_tiny/expected.json``,
|Δ| ≤ 1e-5 per component).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

import httpx  # noqa: E402
import jinja2  # noqa: E402
import rlx  # noqa: E402
from rlx.sampling import SamplingParams  # noqa: E402
from rlx.serve import load_models  # noqa: E402
from serve_util import BERT, FIXTURES, LLAMA, ServerThread  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent / "models"))  # tiny_gguf

MODEL = "llama-q8_0"
#: the server's chat template for this test (the fixture GGUF carries none)
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}[assistant] {% endif %}"
)
PROMPTS = ["hello world", "the cat sat", "one two three", "zebra fish"]


@pytest.fixture(scope="module")
def srv() -> Iterator[ServerThread]:
    # continuous batching on: every stream must still equal its request alone
    models = load_models([str(LLAMA), str(BERT)], slots=4, chat_template=TEMPLATE, batch=True)
    s = ServerThread(models)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def ref() -> rlx.DecoderModel:
    return rlx.load(str(LLAMA))


def _ref_tokens(ref: Any, ids: list[int], n: int, temp: float = 0.0, seed: Any = None) -> list[int]:
    params = SamplingParams(temp, 0, 1.0)
    return list(ref.generate_ids(ids, n, params, seed, ignore_eos=True))


def _decode(tok: Any, ids: list[int]) -> str:
    """Text of generated ids as ``rlx generate`` prints it (special tokens skipped)."""
    dec = tok.stream()
    return "".join(dec.push(t) for t in ids) + dec.flush()


def _complete(client: Any, prompt: Any, **kw: Any) -> Any:
    kw.setdefault("temperature", 0)
    extra = {"ignore_eos": kw.pop("ignore_eos", True)}
    return client.completions.create(model=MODEL, prompt=prompt, extra_body=extra, **kw)


def _stream_text(client: Any, **kw: Any) -> tuple[str, Any, Any]:
    """Streamed completion: (text, finish_reason, usage)."""
    kw.setdefault("temperature", 0)
    extra = {"ignore_eos": kw.pop("ignore_eos", True)}
    text, reason, usage = "", None, None
    stream = client.completions.create(
        model=MODEL, stream=True, stream_options={"include_usage": True}, extra_body=extra, **kw
    )
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            text += c.text
            reason = c.finish_reason or reason
    return text, reason, usage


def test_models_and_health(srv: ServerThread) -> None:
    ids = sorted(m.id for m in srv.client().models.list().data)
    assert ids == ["bert_tiny", MODEL]
    assert srv.client().models.retrieve(MODEL).id == MODEL
    h = srv.health()
    assert h["status"] == "ok" and h["engines"][MODEL]["slots"] == 4


def test_completion_matches_generate(srv: ServerThread, ref: Any) -> None:
    """The server's greedy completion is the model's own token stream."""
    client = srv.client()
    for prompt in PROMPTS[:2]:
        r = _complete(client, prompt, max_tokens=24)
        ids = ref.tokenizer.encode(prompt)
        want = _decode(ref.tokenizer, _ref_tokens(ref, ids, 24))
        assert r.choices[0].text == want
        assert r.choices[0].finish_reason == "length"
        assert r.usage.prompt_tokens == len(ids) and r.usage.completion_tokens == 24
    # token-id prompts go in as they are
    ids = ref.tokenizer.encode("zebra fish")
    r = _complete(client, ids, max_tokens=8)
    assert r.choices[0].text == _decode(ref.tokenizer, _ref_tokens(ref, ids, 8))


def test_streaming_equals_non_streaming(srv: ServerThread) -> None:
    client = srv.client()
    full = _complete(client, "hello world", max_tokens=30)
    text, reason, usage = _stream_text(client, prompt="hello world", max_tokens=30)
    assert text == full.choices[0].text and reason == "length"
    assert usage.completion_tokens == 30 and usage.prompt_tokens == full.usage.prompt_tokens


def test_seeded_sampling(srv: ServerThread, ref: Any) -> None:
    """temperature / top_k / top_p / seed reach the sampler: a seeded request
    repeats exactly and equals the in-process draw with the same seed."""
    client = srv.client()
    kw = {"temperature": 0.9, "top_p": 0.95, "seed": 1234, "max_tokens": 40}
    extra = {"ignore_eos": True, "top_k": 50}
    a = client.completions.create(model=MODEL, prompt="hello world", extra_body=extra, **kw)
    b = client.completions.create(model=MODEL, prompt="hello world", extra_body=extra, **kw)
    assert a.choices[0].text == b.choices[0].text
    ids = ref.tokenizer.encode("hello world")
    params = SamplingParams(0.9, 50, 0.95)
    want = list(ref.generate_ids(ids, 40, params, 1234, ignore_eos=True))
    assert a.choices[0].text == _decode(ref.tokenizer, want)
    others = {
        client.completions.create(
            model=MODEL, prompt="hello world", extra_body=extra, **{**kw, "seed": s}
        )
        .choices[0]
        .text
        for s in (1, 2, 3)
    }
    assert len(others | {a.choices[0].text}) > 1  # the seed matters


def test_stop_strings(srv: ServerThread) -> None:
    """The text ends right before the first stop string (never shown),
    streaming or not, with finish_reason "stop"."""
    client = srv.client()
    kw = {"temperature": 1.0, "seed": 7, "max_tokens": 60}
    full = _complete(client, "the cat sat", **kw).choices[0].text
    assert len(full) > 20
    stop = full[10:13]
    cut = full[: full.find(stop)]
    r = _complete(client, "the cat sat", stop=[stop, "\x00never"], **kw)
    assert r.choices[0].text == cut and r.choices[0].finish_reason == "stop"
    text, reason, _ = _stream_text(client, prompt="the cat sat", stop=stop, **kw)
    assert text == cut and reason == "stop"


def test_chat_uses_the_template(srv: ServerThread, ref: Any) -> None:
    """A chat request renders the server's template (here with plain jinja2)
    and generates after it: equal to a completion of the rendered ids."""
    client = srv.client()
    msgs = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello there"},
    ]
    tok = ref.tokenizer
    text = jinja2.Template(TEMPLATE).render(
        messages=msgs, bos_token=tok.token_text(tok.bos_id), add_generation_prompt=True
    )
    ids = tok.encode(text, add_special=False)
    r = client.chat.completions.create(
        model=MODEL, messages=msgs, max_tokens=16, temperature=0, extra_body={"ignore_eos": True}
    )
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == _decode(tok, _ref_tokens(ref, ids, 16))
    assert r.usage.prompt_tokens == len(ids)
    # streamed chat: role first, then content deltas adding up to the same text
    stream = client.chat.completions.create(
        model=MODEL,
        messages=msgs,
        max_tokens=16,
        temperature=0,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    got = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert got == r.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"


Times = list[float]


def _at_once(client: Any, batch: list[dict[str, Any]]) -> tuple[list[str], Times, Times]:
    """Stream every request of ``batch`` from its own thread, all started
    together: texts, and when each got its first and its last chunk."""
    n = len(batch)
    got = [""] * n
    first = [0.0] * n
    last = [0.0] * n
    gate = threading.Barrier(n)

    def run(i: int) -> None:
        gate.wait()
        stream = client.completions.create(
            model=MODEL, stream=True, extra_body={"ignore_eos": True}, **batch[i]
        )
        for chunk in stream:
            if not first[i]:
                first[i] = time.monotonic()
            got[i] += "".join(c.text for c in chunk.choices)
        last[i] = time.monotonic()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return got, first, last


def test_concurrent_streams_are_isolated(srv: ServerThread) -> None:
    """4 simultaneous streams (one per slot) give exactly what each request
    gives served alone, greedy and seeded; they really overlap in time."""
    client = srv.client()
    reqs = [
        {"prompt": p, "max_tokens": 200, "temperature": t, "seed": 11 + i}
        for i, p in enumerate(PROMPTS)
        for t in (0.0, 1.0)
    ]
    alone = [_stream_text(client, **r)[0] for r in reqs]  # also warms every slot
    for batch in (reqs[0::2], reqs[1::2]):  # greedy, then seeded: 4 streams at once
        got, first, last = _at_once(client, batch)
        assert got == [alone[reqs.index(r)] for r in batch]
        assert max(first) < min(last), "the four streams did not overlap"
    assert srv.health()["engines"][MODEL]["batch_steps"] > 0  # they ran batched


def test_more_requests_than_slots_queue(srv: ServerThread) -> None:
    """10 requests at once on 4 slots: all answered, each as served alone."""
    client = srv.client()
    want = _complete(client, "one two three", max_tokens=40).choices[0].text
    out: list[str] = []
    lock = threading.Lock()

    def run() -> None:
        r = _complete(client, "one two three", max_tokens=40)
        with lock:
            out.append(r.choices[0].text)

    threads = [threading.Thread(target=run) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert out == [want] * 10
    h = srv.health()["engines"][MODEL]
    assert h["active"] == 0 and h["queued"] == 0


def test_embeddings_match_transformers(srv: ServerThread) -> None:
    fx = json.loads((FIXTURES / "bert_tiny" / "expected.json").read_text())
    texts = [s["text"] for s in fx["sentences"]]
    client = srv.client()
    r = client.embeddings.create(model="bert_tiny", input=texts)  # base64 on the wire
    f = client.embeddings.create(model="bert_tiny", input=texts, encoding_format="float")
    for got in (r, f):
        assert [d.index for d in got.data] == list(range(len(texts)))
        for d, s in zip(got.data, fx["sentences"]):
            np.testing.assert_allclose(d.embedding, s["embedding"], atol=1e-5, rtol=0)
        assert got.usage.prompt_tokens == sum(len(s["ids"]) for s in fx["sentences"])
    one = client.embeddings.create(model="bert_tiny", input="hello world", encoding_format="float")
    assert len(one.data) == 1 and len(one.data[0].embedding) == 32


# ------------------------------------------------------------------ errors
def _error(e: Any) -> dict[str, Any]:
    body = e.response.json()
    assert set(body) == {"error"} and body["error"]["message"]
    assert "Traceback" not in e.response.text
    return body["error"]


@pytest.mark.parametrize(
    "kw, param",
    [
        ({"temperature": 5}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"n": 2}, "n"),
        ({"extra_body": {"top_k": -1}}, "top_k"),
        ({"extra_body": {"stop": [1, 2]}}, "stop"),
        ({"extra_body": {"seed": "x"}}, "seed"),
        ({"extra_body": {"stream": "yes"}}, "stream"),
        ({"logprobs": 2}, "logprobs"),
    ],
)
def test_invalid_parameters(srv: ServerThread, kw: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        srv.client().completions.create(model=MODEL, prompt="hi", **kw)
    assert e.value.status_code == 400
    assert _error(e.value)["param"] == param


def test_unknown_model_is_404(srv: ServerThread) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        srv.client().chat.completions.create(
            model="gpt-17", messages=[{"role": "user", "content": "hi"}]
        )
    err = _error(e.value)
    assert err["code"] == "model_not_found" and err["param"] == "model"
    with pytest.raises(openai.NotFoundError):
        srv.client().models.retrieve("gpt-17")


def test_context_overflow_is_400(srv: ServerThread, ref: Any) -> None:
    client = srv.client()
    long_prompt = " ".join(["zebra"] * 300)
    assert len(ref.tokenizer.encode(long_prompt)) > 256
    for kw in ({}, {"max_tokens": 10}):
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model=MODEL, prompt=long_prompt, **kw)
        assert _error(e.value)["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:  # prompt fits, prompt + max_tokens does not
        client.completions.create(model=MODEL, prompt="hello", max_tokens=1000)
    assert _error(e.value)["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:  # streaming: the status comes first too
        client.chat.completions.create(
            model=MODEL, stream=True, messages=[{"role": "user", "content": long_prompt}]
        )
    assert _error(e.value)["code"] == "context_length_exceeded"


def test_wrong_kind_of_model_and_bad_messages(srv: ServerThread) -> None:
    client = srv.client()
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=MODEL, input="hi")
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="bert_tiny", prompt="hi")
    for msgs in ([], [{"role": "wizard", "content": "x"}], [{"role": "user", "content": 3}]):
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model=MODEL, messages=msgs)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL, prompt=[100000])  # outside the vocabulary


@pytest.mark.parametrize(
    "body, status",
    [
        (b"{not json", 400),
        (b"", 400),
        (b"[1, 2]", 400),
        (b'{"prompt": "hi"}', 400),
        (b'{"model": "llama-q8_0", "prompt": "\\ud800"}', 400),
    ],
)
def test_malformed_bodies(srv: ServerThread, body: bytes, status: int) -> None:
    r = httpx.post(
        srv.url + "/v1/completions",
        content=body,
        headers={"content-type": "application/json"},
        timeout=30,
    )
    assert r.status_code == status, r.text
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_unknown_routes_are_json(srv: ServerThread) -> None:
    r = httpx.get(srv.url + "/v2/nothing", timeout=10)
    assert r.status_code == 404 and r.json()["error"]["message"]
    r = httpx.get(srv.url + "/v1/completions", timeout=10)
    assert r.status_code == 405 and r.json()["error"]["message"]


def test_rlx_serve_command() -> None:
    """``rlx serve MODEL --port 0`` prints where it listens, answers, and
    stops cleanly (exit 0) on Ctrl-C."""
    import signal
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "rlx.cli", "serve", f"tiny={LLAMA}", "--port", "0", "--batch"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert "rlx serve: tiny on http://127.0.0.1:" in line, line
        url = line.split(" on ", 1)[1].strip()
        assert httpx.get(url + "/health", timeout=10).json()["models"] == ["tiny"]
        c = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        r = c.completions.create(model="tiny", prompt="hi", max_tokens=3, temperature=0)
        assert r.usage.completion_tokens <= 3
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ------------------------------------------------- the model's own template
#: a chat template no default resembles (upper-cased roles in « », a ¶ per turn)
OWN_TEMPLATE = (
    "{% for m in messages %}«{{ m['role'] | upper }}» {{ m['content'] }} ¶\n{% endfor %}"
    "{% if add_generation_prompt %}«ASSISTANT» {% endif %}"
)


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    """A tiny GGUF whose metadata carries :data:`OWN_TEMPLATE`, served with
    no ``chat_template`` override."""
    from tiny_gguf import write_tiny

    path = tmp_path_factory.mktemp("own") / "own.gguf"
    write_tiny(path, "llama", chat_template=OWN_TEMPLATE)
    s = ServerThread(load_models([str(path)], slots=1))
    yield s
    s.stop()


def test_chat_uses_the_models_own_template(own: ServerThread, monkeypatch: Any) -> None:
    """The prompt the engine gets is the GGUF's own template rendered (here
    with plain jinja2, as HF renders templates) and tokenised one token per
    byte (the tiny vocabulary has no merges); an override still wins."""
    from tiny_gguf import byte_token_ids

    served = own.models[0]
    assert served.chat_template is None
    seen: list[list[int]] = []
    generate = served.engine.generate

    def spy(job: Any) -> Any:
        seen.append(list(job.ids))
        return generate(job)

    monkeypatch.setattr(served.engine, "generate", spy)
    msgs = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hello there"},
    ]
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    text = env.from_string(OWN_TEMPLATE).render(messages=msgs, add_generation_prompt=True)
    assert text == "«SYSTEM» be brief ¶\n«USER» hello there ¶\n«ASSISTANT» "
    r = own.client().chat.completions.create(
        model="own", messages=msgs, max_tokens=4, temperature=0, extra_body={"ignore_eos": True}
    )
    assert seen == [byte_token_ids(text)]
    assert r.usage.prompt_tokens == len(text.encode()) and r.usage.completion_tokens == 4
    # a server-side template takes precedence over the model's
    monkeypatch.setattr(served, "chat_template", TEMPLATE.replace("{{ bos_token }}", ""))
    own.client().chat.completions.create(model="own", messages=msgs, max_tokens=1)
    assert seen[1] == byte_token_ids("[system] be brief\n[user] hello there\n[assistant] ")


# ------------------------------------------------------ unexpected failures
class _Faulty:
    """Stands in for a model in an :class:`~rlx.serve.engine.Engine`: its
    session yields ``after`` tokens, then raises (``after=None``: never)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.after: Any = 0

    def session(self) -> _Faulty:
        return self

    def generate_ids(self, ids: list[int], n: int, *_args: Any, **_kw: Any) -> Iterator[int]:
        for i in range(n):
            if self.after is not None and i >= self.after:
                raise RuntimeError("the decode kernel fell over")
            yield ids[i % len(ids)]


@pytest.fixture(scope="module")
def faulty(ref: Any) -> Iterator[tuple[ServerThread, _Faulty]]:
    from rlx.serve.app import Served
    from rlx.serve.engine import Engine

    broken = _Faulty(ref.tokenizer)
    s = ServerThread([Served("faulty", ref, engine=Engine(broken, slots=1))])
    yield s, broken
    s.stop()


def _internal_error(r: httpx.Response) -> None:
    """A 500 with OpenAI's error body naming the exception, and no traceback."""
    assert r.status_code == 500, r.text
    assert r.headers["content-type"] == "application/json"
    err = r.json()["error"]
    assert set(r.json()) == {"error"} and set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "server_error" and err["code"] == "internal_error"
    assert "RuntimeError" in err["message"], err
    for trace in ("Traceback", 'File "', ".py"):
        assert trace not in r.text, r.text


@pytest.mark.parametrize("after", [0, 3])  # in the prefill / after three tokens
@pytest.mark.parametrize("route", ["completions", "chat/completions"])
def test_engine_failure_is_a_json_500(
    faulty: tuple[ServerThread, _Faulty], after: int, route: str
) -> None:
    srv, broken = faulty
    broken.after = after
    body: dict[str, Any] = {"model": "faulty", "max_tokens": 8}
    if route == "completions":
        body["prompt"] = "hello"
    else:
        body["messages"] = [{"role": "user", "content": "hello"}]
    _internal_error(httpx.post(f"{srv.url}/v1/{route}", json=body, timeout=30))
    if after == 0:  # streaming: nothing was sent yet, so the status is the error's
        r = httpx.post(f"{srv.url}/v1/{route}", json={**body, "stream": True}, timeout=30)
        _internal_error(r)
    with pytest.raises(openai.InternalServerError) as e:  # what the official client sees
        srv.client().completions.create(model="faulty", prompt="hello", max_tokens=8)
    assert e.value.status_code == 500 and "Traceback" not in e.value.response.text
    # the slot came back: the next request is served
    broken.after = None
    r = httpx.post(f"{srv.url}/v1/{route}", json=body, timeout=30)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8
    assert srv.health()["engines"]["faulty"]["active"] == 0


def test_failure_mid_stream_is_an_error_event(faulty: tuple[ServerThread, _Faulty]) -> None:
    """Once a stream has started (status 200 sent) a failure arrives as one
    ``data: {"error": ...}`` event in OpenAI's format, then ``[DONE]``."""
    srv, broken = faulty
    broken.after = 3
    body = {"model": "faulty", "prompt": "hello", "max_tokens": 8, "stream": True}
    r = httpx.post(f"{srv.url}/v1/completions", json=body, timeout=30)
    assert r.status_code == 200
    events = [ln[len("data: ") :] for ln in r.text.splitlines() if ln.startswith("data: ")]
    assert events[-1] == "[DONE]"
    err = json.loads(events[-2])["error"]
    assert err["type"] == "server_error" and err["code"] == "internal_error"
    assert "RuntimeError" in err["message"]
    assert "Traceback" not in r.text and 'File "' not in r.text
    assert sum("choices" in json.loads(e) for e in events[:-2]) >= 1  # text came first


def test_failure_outside_the_engine_is_a_json_500(
    faulty: tuple[ServerThread, _Faulty], monkeypatch: Any
) -> None:
    """An exception raised in a handler itself (here the prompt encoding)
    goes through the app's exception handler: the same JSON 500."""
    srv, _ = faulty

    def boom(*_a: Any) -> list[int]:
        raise RuntimeError("the tokenizer fell over")

    monkeypatch.setattr(srv.app.state.server, "_prompt_ids", boom)
    body = {"model": "faulty", "prompt": "hello", "max_tokens": 2}
    _internal_error(httpx.post(f"{srv.url}/v1/completions", json=body, timeout=30))
