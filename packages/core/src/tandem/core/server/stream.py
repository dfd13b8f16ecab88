"""A streamed answer: server-sent events from the merged outputs of a request's prompts.

Each event is ``data: {chunk}``; the stream ends with ``data: [DONE]``. A request that
fails inside the engine sends an error event and the others go on; a stopping server or
a dead engine ends the stream with one. :class:`EventStream` gives the request's place
in the admission queue back however the response ends, even when the client leaves
before the first event.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi.responses import StreamingResponse

from tandem.core.entrypoints.async_llm import EngineStopped
from tandem.core.server.errors import error_body, failure_line, scrub
from tandem.core.server.merge import ServerStopping, merge

if TYPE_CHECKING:
    from tandem.core.server.admission import Ticket
    from tandem.core.server.front import Record

LOGGER = logging.getLogger("tandem")


def sse(obj: Any) -> str:
    return f"data: {json.dumps(obj)}\n\n"


@dataclass(slots=True)
class Job:
    """One HTTP request's engine requests and how to answer them."""

    streams: list[Any]  # one output stream per prompt
    shape: Any  # CompletionShape or ChatShape
    rid: str
    now: int
    n: int
    ticket: Ticket
    record: Record


class EventStream(StreamingResponse):
    """``text/event-stream`` that calls ``on_close`` when the response is over."""

    def __init__(self, body: AsyncIterator[str], on_close: Callable[[], None]) -> None:
        super().__init__(body, media_type="text/event-stream")
        self._on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with contextlib.suppress(RuntimeError):  # already running elsewhere: it ends itself
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
            self._on_close()


async def events(svc: Any, job: Job) -> AsyncIterator[str]:
    """The events of ``job``; ``svc`` (the Service) keeps the counts."""
    shape, rid, now, n = job.shape, job.rid, job.now, job.n
    prompt = made = finished = 0
    svc.active += 1
    try:
        opening = shape.opening(rid, now, len(job.streams) * n)
        if opening is not None:
            yield sse(opening)
        async for i, raw in merge(job.streams, svc.inboxes):
            out = shape.view(raw)
            made += sum(len(c.token_ids) for c in out.outputs)
            if out.finished:
                prompt += len(out.prompt_token_ids)
                finished += 1
            if out.error is not None:  # this request failed; the others go on
                message = f"the request failed inside the engine: {out.error}"
                yield sse(error_body(scrub(message), None, "server_error"))
                continue
            for comp in out.outputs:
                chunk = shape.chunk(rid, now, i * n + comp.index, out, comp)
                if chunk is not None:
                    if comp.token_ids:
                        job.record.token_seen()
                    yield sse(chunk)
        if shape.include_usage:
            yield sse(shape.usage_chunk(rid, now, prompt, made))
        yield "data: [DONE]\n\n"
        svc.metrics.ended("ok", finished)
    except (EngineStopped, ServerStopping) as exc:
        yield sse(error_body(scrub(str(exc)), None, "server_error"))
        yield "data: [DONE]\n\n"
        svc.metrics.ended("error", len(job.streams) - finished)
    except Exception as exc:  # refused by the engine itself: this request only
        LOGGER.exception("request %s failed", rid)
        yield sse(error_body(failure_line(exc), None, "server_error"))
        svc.metrics.ended("error", len(job.streams) - finished)
    except BaseException:  # the client left (cancelled) or the server stops
        svc.metrics.ended("aborted", len(job.streams) - finished)
        raise
    finally:
        svc.active -= 1
        job.ticket.close()
        svc.metrics.tokens(prompt, made)
        job.record.output_tokens = made
