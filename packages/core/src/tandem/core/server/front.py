"""The outermost layer: a request id, the access log line, the last-resort 500.

Each HTTP request gets a :class:`Record` in its ASGI state (``request.state.record``);
the routes fill in what they learn (tokens, time to first token, fields ignored) and
this middleware writes one line per request on the ``tandem`` logger when the response
has been sent (a stream: when it ends). An exception that escapes a route becomes a 500
in the OpenAI shape, its traceback in the log only.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from tandem.core.server.guard import send_error

LOGGER = logging.getLogger("tandem")
IGNORED_HEADER = b"x-tandem-ignored-fields"


@dataclass(slots=True)
class Record:
    """What the access log says of one request."""

    id: str
    client: str
    start: float = field(default_factory=time.monotonic)
    status: int = 0
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    first_token: float | None = None  # time.monotonic() of the first token sent
    ignored: tuple[str, ...] = ()  # body fields the server did not read

    def token_seen(self) -> None:
        if self.first_token is None:
            self.first_token = time.monotonic()

    def line(self, method: str, path: str) -> str:
        total = time.monotonic() - self.start

        def count(x: int | None) -> str:
            return "-" if x is None else str(x)

        ttft = "-" if self.first_token is None else f"{self.first_token - self.start:.3f}s"
        return (
            f"{self.id} {self.client} {method} {path} {self.status} "
            f"prompt_tokens={count(self.prompt_tokens)} "
            f"output_tokens={count(self.output_tokens)} ttft={ttft} total={total:.3f}s"
        )


def client_of(scope: dict[str, Any]) -> str:
    peer = scope.get("client")
    return str(peer[0]) if peer else "-"


class Front:
    """Request ids, access log lines (unless ``quiet``) and the last-resort 500."""

    def __init__(self, app: Any, quiet: bool = False) -> None:
        self.app = app
        self.quiet = quiet

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        record = Record(id=uuid.uuid4().hex[:24], client=client_of(scope))
        scope.setdefault("state", {})["record"] = record

        async def stamped(message: Any) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
                headers = list(message.get("headers", ()))
                headers.append((b"x-request-id", record.id.encode()))
                if record.ignored:
                    headers.append((IGNORED_HEADER, ", ".join(record.ignored).encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, stamped)
        except Exception as exc:
            LOGGER.exception("request %s failed", record.id)
            if record.status == 0:
                message = (
                    f"the server failed on this request ({type(exc).__name__}); "
                    f"its log has the details under request id {record.id}"
                )
                await send_error(stamped, 500, message)
        finally:
            if not self.quiet:
                LOGGER.info(record.line(scope.get("method", "-"), scope.get("path", "-")))
