"""Reading a request body: JSON into its pydantic model, off the loop when it is large.

Only ``application/json`` is read: any other ``Content-Type`` (or none) is a 415 before
the body is read, so that a web page cannot make a browser POST a completion as a
"simple" cross-origin request (``text/plain``, form data), which needs no preflight. A
body over :data:`INLINE_BYTES` is parsed by a worker thread, so that a large one does
not stall the other connections. A malformed body (see
:mod:`~tandem.core.server.json_text`) or a bad field is an
:class:`~tandem.core.server.errors.ApiError` (400) naming the field. Fields the server
does not know are ignored, named once in the log and in the ``X-Tandem-Ignored-Fields``
header, or refused under ``strict``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from pydantic import ValidationError

from tandem.core.server.errors import ApiError, validation_message
from tandem.core.server.json_text import JsonRefused, loads
from tandem.core.server.protocol import _Open
from tandem.core.server.workers import Workers
from tandem.core.validate import RequestError

LOGGER = logging.getLogger("tandem")
INLINE_BYTES = 64 * 1024
JSON_TYPE = "application/json"
SHOWN = 20  # unknown field names told, at most
_PLAIN = re.compile(r"[\w.\-\[\]]+", re.ASCII)


def _printable(name: str) -> str:
    """``name`` as it goes into a header: as is when plain, else quoted as JSON (ASCII,
    control characters and spaces escaped or inside quotes)."""
    if _PLAIN.fullmatch(name):
        return name[:100]
    return json.dumps(name[:100])


M = TypeVar("M", bound=_Open)


def _root(field: str | None) -> str | None:
    return field.split("[", 1)[0].split(".", 1)[0] if field else None


def parse(raw: bytes, model: type[M] | Callable[[Any], type[M]]) -> M:
    """``raw`` as ``model`` (or as the model ``model(parsed JSON)`` picks); ApiError 400.

    Python's JSON reader, not pydantic's: it keeps a lone surrogate in a string, which
    the checks after it then refuse naming the field (pydantic's reader refuses the
    whole body).
    """
    try:
        data = loads(raw)
    except JsonRefused as exc:
        raise ApiError(400, f"the body is not valid JSON: {exc}") from None
    chosen = model if isinstance(model, type) else model(data)
    try:
        return chosen.model_validate(data)
    except ValidationError as exc:
        message, field = validation_message(list(exc.errors()))
        raise ApiError(400, message, _root(field)) from None


def check_json_type(content_type: str | None) -> None:
    """ApiError 415 unless ``content_type`` is ``application/json`` (parameters such as
    ``charset`` aside)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != JSON_TYPE:
        told = f"Content-Type {content_type[:100]!r}" if content_type else "no Content-Type"
        raise ApiError(415, f"the body must be sent as {JSON_TYPE}, got {told}")


async def read_body(
    request: Request,
    model: type[M] | Callable[[Any], type[M]],
    workers: Workers,
    strict: bool,
) -> M:
    """The request's body as ``model``, its unknown fields recorded (or refused)."""
    check_json_type(request.headers.get("content-type"))
    raw = await request.body()
    if len(raw) > INLINE_BYTES:
        body = await workers.run(parse, raw, model)
    else:
        body = parse(raw, model)
    try:
        body.refuse_not_yet()
    except RequestError as exc:
        raise ApiError.refused(exc) from None
    unknown = [_printable(name) for name in body.unknown()]
    if unknown:
        names = ", ".join(unknown[:SHOWN])
        if len(unknown) > SHOWN:
            names += f" (and {len(unknown) - SHOWN} more)"
        if strict:
            raise ApiError(400, f"unknown field(s) in the body: {names}", _root(unknown[0]))
        record = getattr(request.state, "record", None)
        if record is not None:
            record.ignored = (names,)
        rid = record.id if record is not None else "-"
        LOGGER.warning("request %s: ignored unknown field(s): %s", rid, names)
    return body
