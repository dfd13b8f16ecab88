"""Every error the server sends, in the OpenAI error shape.

Routes raise :class:`ApiError`; malformed bodies, unknown routes (404) and wrong methods
(405) go through the handlers :func:`install` registers. A body never carries a
traceback or a file path: an unexpected failure is one line naming the exception's type
(the log has the rest).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tandem.core.outputs.request_output import error_text, mask_paths
from tandem.core.validate import ContextLengthExceeded, RequestError

LOGGER = logging.getLogger("tandem")

CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"  # the OpenAI API's code
# the OpenAI error ``type`` of each status this server sends
KINDS = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    499: "invalid_request_error",
    500: "server_error",
    503: "service_unavailable",
}


def error_body(
    message: str, param: str | None, kind: str = "invalid_request_error", code: str | None = None
) -> dict[str, Any]:
    """An OpenAI-style error object."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def kind_of(status: int) -> str:
    return KINDS.get(status, "invalid_request_error" if status < 500 else "server_error")


def error_response(
    status: int,
    message: str,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
    code: str | None = None,
) -> JSONResponse:
    if status >= 500:
        message = scrub(message)
    return JSONResponse(
        error_body(message, param, kind_of(status), code), status_code=status, headers=headers
    )


class ApiError(Exception):
    """A request the server refuses: its status, one line for the client, the field."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.headers = dict(headers or {})
        self.code = code

    @classmethod
    def refused(cls, exc: Exception, fallback: str | None = None) -> ApiError:
        """A 400 for a refused input: ``param`` is the ``RequestError``'s root field;
        ``code`` is ``context_length_exceeded`` for a request too long for the model."""
        param = exc.root if isinstance(exc, RequestError) and exc.root else fallback
        code = CONTEXT_LENGTH_EXCEEDED if isinstance(exc, ContextLengthExceeded) else None
        return cls(400, str(exc), param, code=code)

    def response(self) -> JSONResponse:
        return error_response(self.status, self.message, self.param, self.headers, self.code)


scrub = mask_paths  # ``/home/x/model.py`` -> ``<path>``


def failure_line(exc: BaseException) -> str:
    """One line for the client about an unexpected failure (the log has the rest)."""
    return f"the request failed: {error_text(exc)}"


def validation_message(errors: list[Any]) -> tuple[str, str | None]:
    """The first pydantic error as (message, field): ``messages[0].role`` and its rule."""
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        ctx = first.get("ctx") or {}
        return f"the body is not valid JSON: {ctx.get('error', 'cannot parse it')}", None
    parts: list[str] = []
    for x in first.get("loc", ()):
        if x == "body":
            continue
        parts.append(f"[{x}]" if isinstance(x, int) else f".{x}" if parts else str(x))
    field = "".join(parts) or None
    if field is None and first.get("type") == "model_type":
        return "the body must be a JSON object", None
    return f"{field or 'body'}: {first.get('msg', 'invalid value')}", field


def install(app: FastAPI, on_error: Any) -> None:
    """The handlers that turn FastAPI's and Starlette's own errors into the OpenAI shape;
    ``on_error(status)`` counts each one."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        on_error(exc.status)
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, field = validation_message(list(exc.errors()))
        on_error(400)
        root = field.split("[", 1)[0].split(".", 1)[0] if field else None
        return error_response(400, message, root)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            message = f"no route {request.url.path}: see /openapi.json for the routes served"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        return error_response(exc.status_code, message, None, exc.headers)
