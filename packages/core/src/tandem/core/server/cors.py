"""Cross-origin requests from browsers, allowed only for the origins ``--allowed-origins``
names (off by default: a page of another origin can then neither read an answer nor get
a preflight through; a "simple" request it may still send is refused by the 415 of
:mod:`~tandem.core.server.body`).

Starlette's CORS middleware, with a refused preflight answered in the OpenAI error shape
like every other refusal of this server.
"""

from __future__ import annotations

from typing import Any

from fastapi.middleware.cors import CORSMiddleware
from starlette.datastructures import Headers
from starlette.responses import Response

from tandem.core.server.config import ServerConfig
from tandem.core.server.errors import error_response


class Cors(CORSMiddleware):
    """CORS for ``config.allowed_origins``; a refused preflight is an OpenAI-style 400."""

    def __init__(self, app: Any, config: ServerConfig) -> None:
        super().__init__(
            app,
            allow_origins=list(config.allowed_origins),
            allow_methods=list(config.allowed_methods),
            allow_headers=list(config.allowed_headers),
            allow_credentials=config.allow_credentials,
        )

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code < 400:
            return response
        refused = bytes(response.body).decode("utf-8", "replace")  # "Disallowed CORS origin"
        what = refused.removeprefix("Disallowed CORS ") or "request"
        message = f"the cross-origin preflight is refused: its {what} is not allowed"
        return error_response(response.status_code, message)
