"""OpenAI-style API errors: every failure the server reports is a JSON body
``{"error": {"message", "type", "param", "code"}}`` with the matching HTTP
status, never an HTML page or a traceback."""

from __future__ import annotations

from typing import Any, Optional

from rlx.errors import RlxError


class APIError(RlxError):
    """A request the server refuses or could not serve (status, OpenAI error
    ``type``, the offending ``param`` and a machine-readable ``code``)."""

    def __init__(
        self,
        status: int,
        message: str,
        type: str = "invalid_request_error",
        param: Optional[str] = None,
        code: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """The JSON body of the error response."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def invalid(message: str, param: Optional[str] = None, code: Optional[str] = None) -> APIError:
    """400: a parameter has a wrong type or value."""
    return APIError(400, message, "invalid_request_error", param, code or "invalid_value")


def unsupported(param: str, what: str) -> APIError:
    """400: a valid OpenAI parameter that this server does not implement."""
    return APIError(
        400,
        f"{param}: {what} is not supported by rlx serve",
        param=param,
        code="unsupported_parameter",
    )


def not_found(model: str, known: list[str]) -> APIError:
    """404: the request names a model this server does not serve."""
    return APIError(
        404,
        f"The model '{model}' does not exist (this server serves: {', '.join(known)})",
        param="model",
        code="model_not_found",
    )


def context_overflow(ctx: int, prompt: int, completion: int) -> APIError:
    """400: prompt (+ requested completion) beyond the model's context."""
    want = f"{prompt} in the prompt" + (f" + {completion} for the completion" if completion else "")
    return APIError(
        400,
        f"This model's maximum context length is {ctx} tokens; the request needs "
        f"{prompt + completion} ({want}). Shorten the prompt or lower max_tokens.",
        param="messages",
        code="context_length_exceeded",
    )
