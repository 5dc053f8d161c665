"""Request parsing and validation for the OpenAI-compatible endpoints.

Every check raises :class:`rlx.serve.errors.APIError` (HTTP 400) naming the
parameter, so a bad request never reaches the model. Accepted extensions
beyond the OpenAI schema (as llama-server accepts them): ``top_k`` and
``ignore_eos``. Parameters OpenAI defines but rlx does not implement
(``n`` > 1, ``logprobs``, penalties, ``logit_bias``, tools, JSON response
formats) are refused with ``code = "unsupported_parameter"`` rather than
silently ignored; unknown fields are ignored.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from rlx.sampling import SamplingParams
from rlx.serve.errors import APIError, invalid, unsupported

#: most stop strings per request (OpenAI allows 4; llama-server more)
MAX_STOP = 16
_ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass
class GenRequest:
    """A validated completion or chat-completion request."""

    model: str
    #: chat: the messages (content flattened to text); completion: None
    messages: Optional[list[dict[str, Any]]] = None
    #: completion: the prompt as text or token ids
    prompt: Union[str, list[int], None] = None
    max_tokens: Optional[int] = None
    params: SamplingParams = field(default_factory=SamplingParams)
    seed: Optional[int] = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    ignore_eos: bool = False


def _utf8(v: Any, where: str) -> None:
    """Strings must be valid Unicode (JSON can carry lone surrogates)."""
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:
            raise invalid(f"{where}: not valid Unicode at character {e.start}", where) from None
    elif isinstance(v, list):
        for x in v:
            _utf8(x, where)
    elif isinstance(v, dict):
        for x in v.values():
            _utf8(x, where)


def parse_json(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, else a 400."""
    if not raw:
        raise APIError(
            400, "The request body is empty; expected a JSON object", code="invalid_json"
        )
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise APIError(
            400, f"The request body is not valid JSON: {e}", code="invalid_json"
        ) from None
    if not isinstance(body, dict):
        raise APIError(
            400,
            f"The request body must be a JSON object, got {type(body).__name__}",
            code="invalid_json",
        )
    for key, v in body.items():
        _utf8(v, key)
    return body


def _number(
    body: dict[str, Any], key: str, default: float, lo: float, hi: float, lo_open: bool = False
) -> float:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise invalid(f"{key} must be a number, got {v!r}", key, "invalid_type")
    if v < lo or v > hi or (lo_open and v == lo):
        lo_s = f"({lo}" if lo_open else f"[{lo}"
        raise invalid(f"{key} must be in {lo_s}, {hi}], got {v}", key)
    return float(v)


def _int(body: dict[str, Any], key: str, lo: int, hi: Optional[int] = None) -> Optional[int]:
    v = body.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise invalid(f"{key} must be an integer, got {v!r}", key, "invalid_type")
    if v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise invalid(f"{key} must be {rng}, got {v}", key)
    return v


def _bool(body: dict[str, Any], key: str) -> bool:
    v = body.get(key)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise invalid(f"{key} must be a boolean, got {v!r}", key, "invalid_type")
    return v


def _stop(body: dict[str, Any]) -> list[str]:
    v = body.get("stop")
    if v is None:
        return []
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or not all(isinstance(s, str) for s in items):
        raise invalid("stop must be a string or a list of strings", "stop", "invalid_type")
    if len(items) > MAX_STOP:
        raise invalid(f"stop has {len(items)} strings; at most {MAX_STOP}", "stop")
    return [s for s in items if s]


def _refuse_unsupported(body: dict[str, Any]) -> None:
    n = _int(body, "n", 1)
    if n not in (None, 1):
        raise unsupported("n", f"n={n} (several choices per request)")
    best_of = _int(body, "best_of", 1)
    if best_of not in (None, 1):
        raise unsupported("best_of", f"best_of={best_of}")
    for key in ("presence_penalty", "frequency_penalty"):
        if _number(body, key, 0.0, -2.0, 2.0) != 0.0:
            raise unsupported(key, "a non-zero penalty")
    lp = body.get("logprobs")
    if lp not in (None, False, 0):
        raise unsupported("logprobs", "returning log-probabilities")
    if body.get("logit_bias"):
        raise unsupported("logit_bias", "a logit bias")
    if body.get("tools") or body.get("functions"):
        raise unsupported("tools", "tool / function calling")
    rf = body.get("response_format")
    if rf is not None and not (isinstance(rf, dict) and rf.get("type") == "text"):
        raise unsupported("response_format", "a response format other than text")
    if body.get("echo"):
        raise unsupported("echo", "echoing the prompt")
    if body.get("suffix"):
        raise unsupported("suffix", "a suffix (fill-in-the-middle)")


def _common(body: dict[str, Any], req: GenRequest, max_keys: tuple[str, ...]) -> None:
    _refuse_unsupported(body)
    req.max_tokens = None
    for key in max_keys:
        v = _int(body, key, 1)
        if v is not None:
            req.max_tokens = v
    temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    top_p = _number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True)
    top_k = _int(body, "top_k", 0) or 0
    req.params = SamplingParams(temperature, top_k, top_p)
    req.seed = _int(body, "seed", -(2**63), 2**64 - 1)
    if req.seed is not None and req.seed < 0:
        req.seed &= 2**64 - 1  # numpy seeds are non-negative; keep negative seeds distinct
    req.stop = _stop(body)
    req.stream = _bool(body, "stream")
    so = body.get("stream_options")
    if so is not None:
        if not isinstance(so, dict):
            raise invalid("stream_options must be an object", "stream_options", "invalid_type")
        req.include_usage = _bool(so, "include_usage")
    req.ignore_eos = _bool(body, "ignore_eos")


def _model(body: dict[str, Any]) -> str:
    m = body.get("model")
    if not isinstance(m, str) or not m:
        raise invalid(
            "model is required (a string naming a served model)",
            "model",
            "missing_required_parameter" if m is None else "invalid_type",
        )
    return m


def _content(v: Any, where: str) -> str:
    """A message's content as text (a string, null, or a list of text parts)."""
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        out = []
        for part in v:
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise unsupported(where, f"a content part of type {kind!r} (only text)")
            text = part.get("text")
            if not isinstance(text, str):
                raise invalid(f"{where}: a text part needs a string 'text'", where, "invalid_type")
            out.append(text)
        return "".join(out)
    raise invalid(f"{where} must be a string or a list of text parts", where, "invalid_type")


def parse_chat(body: dict[str, Any]) -> GenRequest:
    """A ``/v1/chat/completions`` body → :class:`GenRequest`."""
    req = GenRequest(model=_model(body))
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise invalid(
            "messages must be a non-empty list of {role, content} objects",
            "messages",
            "invalid_type" if msgs is not None else "missing_required_parameter",
        )
    out = []
    for i, m in enumerate(msgs):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise invalid(f"{where} must be an object", where, "invalid_type")
        role = m.get("role")
        if role not in _ROLES:
            raise invalid(
                f"{where}.role must be one of {', '.join(_ROLES)}, got {role!r}", f"{where}.role"
            )
        out.append({"role": role, "content": _content(m.get("content"), f"{where}.content")})
    req.messages = out
    _common(body, req, ("max_tokens", "max_completion_tokens"))
    return req


def parse_completion(body: dict[str, Any]) -> GenRequest:
    """A ``/v1/completions`` body → :class:`GenRequest` (one prompt: a
    string, a list of token ids, or a one-element list of either)."""
    req = GenRequest(model=_model(body))
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]
    if isinstance(p, str):
        req.prompt = p
    elif (
        isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p)
    ):
        req.prompt = [int(t) for t in p]
    elif isinstance(p, list) and len(p) > 1 and all(isinstance(t, (str, list)) for t in p):
        raise unsupported("prompt", "a batch of several prompts")
    else:
        raise invalid(
            "prompt must be a string or a non-empty list of token ids",
            "prompt",
            "invalid_type" if p is not None else "missing_required_parameter",
        )
    _common(body, req, ("max_tokens",))
    if req.max_tokens is None:
        req.max_tokens = 16  # OpenAI's default for completions
    return req


def parse_embeddings(body: dict[str, Any]) -> tuple[str, list[str], str]:
    """A ``/v1/embeddings`` body → (model, texts, encoding format: ``float``
    or ``base64``, little-endian float32 bytes as the OpenAI client asks by
    default)."""
    model = _model(body)
    v = body.get("input")
    texts = [v] if isinstance(v, str) else v
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        if isinstance(texts, list) and texts and all(isinstance(t, (int, list)) for t in texts):
            raise unsupported("input", "token-id input to embeddings (give text)")
        raise invalid(
            "input must be a string or a non-empty list of strings",
            "input",
            "invalid_type" if v is not None else "missing_required_parameter",
        )
    if any(not t for t in texts):
        raise invalid("input must not contain empty strings", "input")
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise invalid(
            f"encoding_format must be 'float' or 'base64', got {fmt!r}", "encoding_format"
        )
    if body.get("dimensions") is not None:
        raise unsupported("dimensions", "truncating embeddings")
    return model, list(texts), fmt
