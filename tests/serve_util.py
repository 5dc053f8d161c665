"""Helpers of the ``rlx serve`` tests: a server on a loopback port in a
background thread (uvicorn, the real stack) and an ``openai`` client for it."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LLAMA = FIXTURES / "gguf" / "llama-q8_0.gguf"
BERT = FIXTURES / "bert_tiny" / "model.safetensors"


class ServerThread:
    """``rlx.serve`` serving ``models`` on 127.0.0.1 (a free port) until :meth:`stop`."""

    def __init__(self, models: list[Any]) -> None:
        import uvicorn
        from rlx.serve import bind, create_app

        self.models = models
        self.app = create_app(models)
        self.sock = bind("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(self.app, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)

    def client(self, **kw: Any) -> Any:
        """An ``openai.OpenAI`` client for this server (no retries)."""
        import openai

        return openai.OpenAI(
            base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=60, **kw
        )

    def health(self) -> dict[str, Any]:
        import httpx

        return httpx.get(self.url + "/health", timeout=10).json()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)
        self.sock.close()
