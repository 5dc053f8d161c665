"""``rlx serve``: an OpenAI-compatible HTTP server (Starlette + uvicorn).

Endpoints: ``/v1/chat/completions`` and ``/v1/completions`` (streaming over
server-sent events or not), ``/v1/embeddings`` (encoder models such as
``minilm``), ``/v1/models``, ``/health``. Several models can be served at
once (``rlx serve smollm2 minilm``); a request names one by id: a packaged
model's name, a file's stem (``model.gguf`` → ``model``), a directory's name,
or the ``ID`` of an ``ID=PATH`` argument.

A decoder model runs ``slots`` generations at once, each on its own
:meth:`rlx.DecoderModel.session` (own KV cache); more requests wait in a
FIFO queue (see :mod:`rlx.serve.engine`). With ``--batch`` (attention-only
models) the running generations decode together, one batched step for all
(continuous batching, :mod:`rlx.serve.batching`). The web stack is an optional extra:
``pip install rlx[serve]`` (starlette, uvicorn).

>>> from rlx.serve import load_models, create_app      # doctest: +SKIP
>>> app = create_app(load_models(["smollm2"]))          # any ASGI server runs it
"""

from __future__ import annotations

import logging
import socket
import sys
import time
from pathlib import Path
from typing import Any, Optional

from rlx.errors import RlxError

__all__ = ["create_app", "load_models", "model_id", "run"]


def _need_web_stack() -> None:
    missing = [m for m in ("starlette", "uvicorn") if not _importable(m)]
    if missing:
        raise RlxError(
            f"[serve] {', '.join(missing)} not installed; install the server extra: "
            "pip install 'rlx[serve]'"
        )


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def model_id(spec: str) -> tuple[str, str]:
    """``(id, what to load)`` for a command-line model argument."""
    from rlx.io.models import MODELS

    if spec in MODELS:
        return spec, spec
    if "=" in spec and not Path(spec).exists():
        name, _, path = spec.partition("=")
        if name and path:
            return name, path
    p = Path(spec)
    if p.suffix == ".gguf":
        return p.stem, spec
    if p.suffix == ".safetensors":  # a BERT file: named after its directory
        return p.resolve().parent.name, spec
    return p.name or spec, spec


def load_models(
    specs: list[str],
    slots: int = 4,
    max_queue: int = 64,
    chat_template: Optional[str] = None,
    default_max_tokens: Optional[int] = None,
    device: str = "host",
    progress: bool = False,
    batch: bool = False,
    batch_ctx: Optional[int] = None,
    kv_dtype: Optional[str] = None,
) -> list[Any]:
    """Load every model in ``specs`` (see :func:`model_id`) and wrap it for
    serving: decoder LLMs get an :class:`~rlx.serve.engine.Engine` with
    ``slots`` slots (a :class:`~rlx.serve.batching.BatchEngine` when
    ``batch`` and the model can batch: ``batch_ctx`` positions per slot),
    encoders an :class:`~rlx.serve.engine.Embedder`. ``kv_dtype``: the
    decoders' KV cache element type (:func:`rlx.load`)."""
    _need_web_stack()
    import rlx
    from rlx.models.batch import batchable
    from rlx.models.decoder import DecoderModel
    from rlx.serve.app import Served
    from rlx.serve.batching import BatchEngine
    from rlx.serve.engine import Embedder, Engine

    out = []
    seen: set[str] = set()
    for spec in specs:
        ident, what = model_id(spec)
        if ident in seen:
            raise RlxError(f"[serve] two models are named {ident!r}; name one with ID=PATH")
        seen.add(ident)
        model = rlx.load(what, device=device, progress=progress, kv_dtype=kv_dtype)
        served = Served(
            ident,
            model,
            created=int(time.time()),
            chat_template=chat_template,
            default_max_tokens=default_max_tokens,
        )
        if isinstance(model, DecoderModel) and batch and batchable(model):
            eng = BatchEngine(model, slots=slots, max_queue=max_queue, ctx=batch_ctx)
            eng.warm()
            served.engine = eng
        elif isinstance(model, DecoderModel):
            served.engine = Engine(model, slots=slots, max_queue=max_queue)
        elif hasattr(model, "embed"):
            served.embedder = Embedder(model)
        else:  # pragma: no cover - rlx.load returns one of the two
            raise RlxError(f"[serve] {spec}: neither a decoder nor an encoder model")
        out.append(served)
    return out


def create_app(models: list[Any]) -> Any:
    """The Starlette application serving ``models`` (from :func:`load_models`)."""
    _need_web_stack()
    from rlx.serve.app import create_app as _create

    return _create(models)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise RlxError(f"[serve] cannot listen on {host}:{port}: {e.strerror}") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def run(
    models: list[Any], host: str = "127.0.0.1", port: int = 8080, log_level: str = "warning"
) -> int:
    """Serve ``models`` until Ctrl-C / SIGTERM (then returns 0); prints the
    address it listens on first (useful with ``port=0``)."""
    _need_web_stack()
    import uvicorn

    from rlx import progress

    progress.ENABLED = False  # no bars from the slot threads
    app = create_app(models)
    sock = bind(host, port)
    shown = f"[{host}]" if ":" in host else host
    names = ", ".join(m.id for m in models)
    print(f"rlx serve: {names} on http://{shown}:{sock.getsockname()[1]}", flush=True)
    logging.getLogger("rlx.serve").setLevel(log_level.upper())
    config = uvicorn.Config(app, log_level=log_level, lifespan="on", timeout_graceful_shutdown=2)

    class _Server(uvicorn.Server):
        """Ctrl-C / SIGTERM shut the server down gracefully and ``run`` returns
        (uvicorn would re-raise the signal afterwards: a traceback, exit 130)."""

        def handle_exit(self, sig: int, frame: Any) -> None:
            super().handle_exit(sig, frame)
            captured = getattr(self, "_captured_signals", None)
            if isinstance(captured, list):
                captured.clear()

    server = _Server(config)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    print("rlx serve: stopped", file=sys.stderr)
    return 0
