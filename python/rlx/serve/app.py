"""The Starlette application: OpenAI-compatible routes over the served models.

Routes: ``GET /health``, ``GET /v1/models``, ``GET /v1/models/{id}``,
``POST /v1/chat/completions``, ``POST /v1/completions`` (both streaming over
server-sent events with ``"stream": true``), ``POST /v1/embeddings``
(encoder models). Every error is an OpenAI-style JSON body (see
:mod:`rlx.serve.errors`); an unexpected exception is logged on the server
and answered with a JSON 500 that names its type, never a traceback.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Optional, TypeVar

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rlx.errors import RlxError
from rlx.serve import protocol
from rlx.serve.engine import Done, Embedder, Engine, Job, Piece
from rlx.serve.errors import APIError, context_overflow, invalid, not_found

log = logging.getLogger("rlx.serve")
T = TypeVar("T")

#: used when a chat model carries no chat template (ChatML, as llama-server does)
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass
class Served:
    """One served model: its id, the loaded model and its engine."""

    id: str
    model: Any
    engine: Optional[Engine] = None
    embedder: Optional[Embedder] = None
    #: chat template override (else the model's own, else :data:`CHATML`)
    chat_template: Optional[str] = None
    #: completion budget of a request that gives no max_tokens (None: the rest of the context)
    default_max_tokens: Optional[int] = None
    created: int = 0

    @property
    def ctx(self) -> int:
        return int(self.model.config.ctx)


class SSEResponse(StreamingResponse):
    """A streaming response that always closes its body iterator, also when
    the client went away mid-stream (the iterator's ``finally`` then cancels
    the generation at once instead of whenever it is garbage-collected)."""

    async def stream_response(self, send: Any) -> None:
        try:
            await super().stream_response(send)
        finally:
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await asyncio.shield(close())


class ClientGone(Exception):
    """The client disconnected while its request waited or ran."""


async def _until_disconnect(request: Request) -> None:
    while True:
        msg = await request.receive()
        if msg["type"] == "http.disconnect":
            return


async def race_disconnect(request: Request, work: Awaitable[T]) -> T:
    """Await ``work`` unless the client disconnects first (then ``work`` is
    cancelled and :class:`ClientGone` raised). The body must be read before."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_until_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        watch.cancel()
        raise
    if task in done:
        watch.cancel()
        return task.result()
    task.cancel()
    try:
        await task
    except (asyncio.CancelledError, Exception):  # noqa: S110 - nobody is listening
        pass
    raise ClientGone()


def _error(e: APIError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


def _as_api_error(e: BaseException) -> APIError:
    """An error raised while serving, as the response to send."""
    if isinstance(e, APIError):
        return e
    if isinstance(e, RlxError):  # the model refused (e.g. the cache is full): the request's fault
        return APIError(400, str(e), code="model_error")
    log.exception("unexpected error while serving a request", exc_info=e)
    return APIError(
        500, f"internal error ({type(e).__name__}): {e}", "server_error", code="internal_error"
    )


class Server:
    """The served models and the handlers."""

    def __init__(self, models: list[Served]) -> None:
        self.models = {m.id: m for m in models}
        self.started = int(time.time())

    # ------------------------------------------------------------ helpers
    def _model(self, name: str, kind: str) -> Served:
        m = self.models.get(name)
        if m is None:
            raise not_found(name, sorted(self.models))
        if kind == "generate" and m.engine is None:
            raise invalid(
                f"'{name}' is an embedding model; use /v1/embeddings", "model", "wrong_model_kind"
            )
        if kind == "embed" and m.embedder is None:
            raise invalid(
                f"'{name}' is not an embedding model (a decoder LLM: use "
                "/v1/completions or /v1/chat/completions)",
                "model",
                "wrong_model_kind",
            )
        return m

    @staticmethod
    async def _body(request: Request) -> dict[str, Any]:
        return protocol.parse_json(await request.body())

    def _prompt_ids(self, m: Served, req: protocol.GenRequest) -> list[int]:
        tok = m.model.tokenizer
        if req.messages is not None:
            template = m.chat_template or tok.chat_template or CHATML
            try:
                text = tok.apply_chat_template(req.messages, template=template)
            except Exception as e:  # jinja errors and raise_exception() of the template
                raise invalid(
                    f"the chat template rejected the messages: {e}",
                    "messages",
                    "chat_template_error",
                ) from None
            return list(tok.encode(text, add_special=False))
        if isinstance(req.prompt, str):
            return list(tok.encode(req.prompt))
        vocab = int(m.model.config.vocab)
        bad = [t for t in req.prompt or [] if not 0 <= t < vocab]
        if bad:
            raise invalid(
                f"prompt token id {bad[0]} is outside the vocabulary of {vocab}", "prompt"
            )
        return list(req.prompt or [])

    def _job(self, m: Served, req: protocol.GenRequest, ids: list[int]) -> Job:
        ctx = m.ctx
        if not ids:
            raise invalid("the prompt is empty (no tokens)", "prompt")
        if req.max_tokens is not None:
            if len(ids) + req.max_tokens > ctx:
                raise context_overflow(ctx, len(ids), req.max_tokens)
            budget = req.max_tokens
        else:
            if len(ids) >= ctx:
                raise context_overflow(ctx, len(ids), 0)
            budget = ctx - len(ids)
            if m.default_max_tokens is not None:
                budget = min(budget, m.default_max_tokens)
        return Job(ids, budget, req.params, req.seed, req.stop, req.ignore_eos)

    # ----------------------------------------------------------- routes
    async def health(self, request: Request) -> JSONResponse:
        slots = {m.id: m.engine.stats() for m in self.models.values() if m.engine is not None}
        return JSONResponse({"status": "ok", "models": sorted(self.models), "engines": slots})

    def _model_card(self, m: Served) -> dict[str, Any]:
        return {
            "id": m.id,
            "object": "model",
            "created": m.created or self.started,
            "owned_by": "rlx",
        }

    async def list_models(self, request: Request) -> JSONResponse:
        data = [self._model_card(m) for m in self.models.values()]
        return JSONResponse({"object": "list", "data": data})

    async def get_model(self, request: Request) -> JSONResponse:
        name = request.path_params["model"]
        m = self.models.get(name)
        if m is None:
            raise not_found(name, sorted(self.models))
        return JSONResponse(self._model_card(m))

    async def chat(self, request: Request) -> Response:
        req = protocol.parse_chat(await self._body(request))
        return await self._generate(request, req, chat=True)

    async def completions(self, request: Request) -> Response:
        req = protocol.parse_completion(await self._body(request))
        return await self._generate(request, req, chat=False)

    async def _generate(self, request: Request, req: protocol.GenRequest, chat: bool) -> Response:
        m = self._model(req.model, "generate")
        ids = await asyncio.to_thread(self._prompt_ids, m, req)
        job = self._job(m, req, ids)
        assert m.engine is not None
        gen = m.engine.generate(job)
        rid = ("chatcmpl-" if chat else "cmpl-") + secrets.token_hex(12)
        meta = {"id": rid, "created": int(time.time()), "model": m.id}
        try:
            # the first event comes after the slot was granted and the prompt
            # prefilled: errors up to here still get a proper status
            first = await race_disconnect(request, gen.__anext__())
        except ClientGone:
            return Response(status_code=499)
        except StopAsyncIteration:  # pragma: no cover - the engine always ends with Done
            first = Done("stop", 0)
        except BaseException as e:
            await gen.aclose()
            if isinstance(e, asyncio.CancelledError):
                raise
            return _error(_as_api_error(e))
        if req.stream:
            body = _sse(gen, first, meta, chat, len(ids), req.include_usage)
            return SSEResponse(
                body, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
            )
        try:
            text, done = await race_disconnect(request, _collect(gen, first))
        except ClientGone:
            return Response(status_code=499)
        except Exception as e:
            return _error(_as_api_error(e))
        usage = _usage(len(ids), done.tokens)
        if chat:
            choice: dict[str, Any] = {
                "index": 0,
                "logprobs": None,
                "finish_reason": done.reason,
                "message": {"role": "assistant", "content": text},
            }
            return JSONResponse(
                {**meta, "object": "chat.completion", "choices": [choice], "usage": usage}
            )
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": done.reason}
        return JSONResponse(
            {**meta, "object": "text_completion", "choices": [choice], "usage": usage}
        )

    async def embeddings(self, request: Request) -> JSONResponse:
        name, texts, fmt = protocol.parse_embeddings(await self._body(request))
        m = self._model(name, "embed")
        assert m.embedder is not None
        try:
            vecs, used = await race_disconnect(request, m.embedder.embed(texts))
        except ClientGone:
            return JSONResponse({}, status_code=499)
        data = []
        for i, v in enumerate(vecs):
            emb: Any = (
                base64.b64encode(v.astype("<f4").tobytes()).decode("ascii")
                if fmt == "base64"
                else [float(x) for x in v]
            )
            data.append({"object": "embedding", "index": i, "embedding": emb})
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "model": m.id,
                "usage": {"prompt_tokens": used, "total_tokens": used},
            }
        )


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


async def _collect(gen: AsyncIterator[Any], first: Any) -> tuple[str, Done]:
    parts: list[str] = []
    ev = first
    try:
        while True:
            if isinstance(ev, Piece):
                parts.append(ev.text)
            elif isinstance(ev, Done):
                return "".join(parts), ev
            ev = await gen.__anext__()
    finally:
        await gen.aclose()  # type: ignore[attr-defined]


def _chunk(
    meta: dict[str, Any], chat: bool, text: Optional[str], reason: Optional[str], role: bool = False
) -> dict[str, Any]:
    if chat:
        delta: dict[str, Any] = {}
        if role:
            delta["role"] = "assistant"
        if text is not None:
            delta["content"] = text
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        return {**meta, "object": "chat.completion.chunk", "choices": [choice]}
    choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": reason}
    return {**meta, "object": "text_completion", "choices": [choice]}


def _sse_line(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


async def _sse(
    gen: AsyncIterator[Any],
    first: Any,
    meta: dict[str, Any],
    chat: bool,
    prompt_tokens: int,
    include_usage: bool,
) -> AsyncIterator[str]:
    """Server-sent events: chunks, a final chunk with the finish reason, the
    usage chunk when asked, then ``data: [DONE]``. An error after the stream
    started is sent as one ``data: {"error": ...}`` event."""
    try:
        if chat:
            yield _sse_line(_chunk(meta, chat, "", None, role=True))
        ev = first
        while True:
            if isinstance(ev, Piece):
                yield _sse_line(_chunk(meta, chat, ev.text, None))
            elif isinstance(ev, Done):
                yield _sse_line(_chunk(meta, chat, None if chat else "", ev.reason))
                if include_usage:
                    usage = {
                        **meta,
                        "object": "chat.completion.chunk" if chat else "text_completion",
                        "choices": [],
                        "usage": _usage(prompt_tokens, ev.tokens),
                    }
                    yield _sse_line(usage)
                break
            try:
                ev = await gen.__anext__()
            except StopAsyncIteration:  # pragma: no cover - Done always comes
                break
            except Exception as e:
                yield _sse_line(_as_api_error(e).body())
                break
        yield "data: [DONE]\n\n"
    finally:
        await gen.aclose()  # type: ignore[attr-defined]


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, APIError)
    return _error(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    kind = "not_found" if exc.status_code == 404 else "invalid_request_error"
    msg = f"{request.method} {request.url.path}: {exc.detail}"
    return _error(APIError(exc.status_code, msg, kind, code=kind))


async def _internal_error(request: Request, exc: Exception) -> Response:
    return _error(_as_api_error(exc))


def create_app(models: list[Served]) -> Starlette:
    """The ASGI application serving ``models``."""
    srv = Server(models)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        for m in srv.models.values():
            if m.engine is not None:
                m.engine.close()
            if m.embedder is not None:
                m.embedder.close()

    routes = [
        Route("/health", srv.health, methods=["GET"]),
        Route("/v1/models", srv.list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", srv.get_model, methods=["GET"]),
        Route("/v1/chat/completions", srv.chat, methods=["POST"]),
        Route("/v1/completions", srv.completions, methods=["POST"]),
        Route("/v1/embeddings", srv.embeddings, methods=["POST"]),
    ]
    handlers: Any = {APIError: _api_error, HTTPException: _http_error, Exception: _internal_error}
    app = Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)
    app.state.server = srv
    return app
