"""The door: the API key and the body size, checked before a route reads anything.

A pure ASGI middleware, so that a refused body is never read: a ``Content-Length`` over
the limit is a 413 at once; a body sent without one (chunked) is counted as it arrives
and refused as soon as it passes the limit. A client that stalls in the middle of a
body gets a 408 after ``body_timeout`` seconds. With API keys set, ``/v1/*``,
``/tokenize``, ``/detokenize`` and ``/metrics`` ask for ``Authorization: Bearer KEY``;
``/health`` and the API's description stay open.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from typing import Any

from tandem.core.server.config import ServerConfig
from tandem.core.server.errors import error_body, kind_of

PROTECTED_PREFIXES = ("/v1/", "/tokenize", "/detokenize", "/metrics")

Scope = dict[str, Any]


class BodyRefused(Exception):
    """Raised inside the app's ``receive`` when a body passes the limit or stalls."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def protected(path: str) -> bool:
    return path == "/v1" or any(path.startswith(p) for p in PROTECTED_PREFIXES)


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value
    return None


async def send_error(
    send: Any, status: int, message: str, param: str | None = None, extra: Any = ()
) -> None:
    """An OpenAI-style error straight on the ASGI ``send`` (no app behind it)."""
    body = json.dumps(error_body(message, param, kind_of(status))).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *extra,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """API keys, body size and body timeout in front of ``app``."""

    def __init__(self, app: Any, config: ServerConfig) -> None:
        self.app = app
        self.keys = [k.encode() for k in config.api_keys]
        self.limit = config.max_body_bytes
        self.timeout = config.body_timeout

    def _client(self, scope: Scope) -> str | None:
        """The key's label (``key1``...) when the bearer token is one of the keys."""
        raw = header(scope, b"authorization") or b""
        scheme, _, token = raw.partition(b" ")
        if scheme.lower() != b"bearer":
            return None
        token = token.strip()
        found = None
        for i, key in enumerate(self.keys):  # every key compared: no early exit to time
            if hmac.compare_digest(token, key):
                found = f"key{i + 1}"
        return found

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        if self.keys and protected(scope["path"]):
            label = self._client(scope)
            if label is None:
                message = "a valid API key is required: send 'Authorization: Bearer KEY'"
                extra = [(b"www-authenticate", b"Bearer")]
                await send_error(send, 401, message, None, extra)
                return
            record = state.get("record")
            if record is not None:
                record.client = label
        length = header(scope, b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            await send_error(send, 413, self._too_large(int(length)), None, _close())
            return
        await self._guarded(scope, receive, send)

    def _too_large(self, size: int | None) -> str:
        told = f"{size} bytes" if size is not None else "more"
        return f"the request body is too large: {told}, this server takes at most {self.limit}"

    async def _guarded(self, scope: Scope, receive: Any, send: Any) -> None:
        seen = 0
        done = False
        started = False

        async def limited() -> Any:
            nonlocal seen, done
            if done:  # the body is in: the app now waits for a disconnect, however long
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), self.timeout)
            except TimeoutError:
                raise BodyRefused(
                    408, f"the request body did not arrive within {self.timeout:g} s"
                ) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                done = not message.get("more_body", False)
                if seen > self.limit:
                    raise BodyRefused(413, self._too_large(None))
            else:
                done = True
            return message

        async def watched(message: Any) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited, watched)
        except BodyRefused as exc:
            if started:
                raise
            await send_error(send, exc.status, exc.message, None, _close())


def _close() -> list[tuple[bytes, bytes]]:
    """A refused body is left unread: the connection cannot carry another request."""
    return [(b"connection", b"close")]
