"""What the generation routes share: checks, admission, tokenizing, whole or streamed.

Each prompt of a body becomes one engine request, checked (``strict``: a ``max_tokens``
that does not fit is a 400) and tokenized by a worker thread before any is queued. The
request then waits its turn in the admission queue (:mod:`~tandem.core.server.admission`).
A streamed response that the client leaves cancels its generators, which aborts the
requests; a whole response is raced against the client's disconnect for the same effect.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from tandem.core.entrypoints.async_llm import AsyncLLM, EngineStopped
from tandem.core.inputs.context_limit import model_context_limit
from tandem.core.inputs.processor import EngineRequest
from tandem.core.outputs.request_output import RequestOutput
from tandem.core.server.admission import Admission, Draining, QueueFull, Ticket
from tandem.core.server.config import DEFAULT_WINDOW, ServerConfig
from tandem.core.server.errors import ApiError, failure_line
from tandem.core.server.front import Record
from tandem.core.server.merge import Inbox, ServerStopping, merge
from tandem.core.server.metrics import Metrics
from tandem.core.server.stream import EventStream, Job, events
from tandem.core.server.tokenize import PromptBound
from tandem.core.server.workers import Workers

LOGGER = logging.getLogger("tandem")
Inputs = Callable[[], list[tuple[Any, str]]]  # run by a worker: [(prompt or ids, where)]


def record_of(request: Request) -> Record:
    record = getattr(request.state, "record", None)
    return record if record is not None else Record(id="-", client="-")


class Service:
    """The engine, the server's config, its counters and its admission queue."""

    def __init__(self, llm: AsyncLLM, config: ServerConfig) -> None:
        self.llm = llm
        self.config = config
        self.metrics = Metrics()
        self.created = int(time.time())
        self.active = 0  # HTTP requests being answered (generation running)
        self.inboxes: set[Inbox] = set()  # of the requests generating now
        self.loop: asyncio.AbstractEventLoop | None = None
        most = llm.engine_args.max_num_seqs
        window = config.engine_window or min(DEFAULT_WINDOW, most)
        self.admission = Admission(window, config.waiting_room)
        self.workers = Workers()
        limit = model_context_limit(llm.config.model.hf_config)
        self.bound = PromptBound(llm.get_tokenizer(), llm.max_model_len, limit)
        # the ids both the tokenizer and the model know (the published schema's range)
        self.vocab_size = min(len(llm.get_tokenizer()), llm.config.model.vocab_size)

    def in_flight(self) -> int:
        return self.active

    def drain(self) -> None:
        """Refuse new generation requests (503) from now on; those admitted go on."""
        self.admission.draining = True

    def abort_all(self, reason: str) -> None:
        """End every request in flight with ``reason`` (thread-safe: a server's signal
        handler or a timer calls it); each answers with an error, its engine work aborted."""
        if self.loop is None:
            return
        stop = ServerStopping(reason)
        for inbox in list(self.inboxes):
            self.loop.call_soon_threadsafe(inbox.put_nowait, (-1, stop))

    def close(self) -> None:
        self.workers.close()

    def count_error(self, status: int) -> None:
        if status != 499:  # a client that left was counted as aborted
            self.metrics.ended("error")

    def check_model(self, name: str | None) -> None:
        if name is None or name in self.config.model_names:
            return
        served = ", ".join(repr(n) for n in self.config.model_names)
        near = difflib.get_close_matches(name, self.config.model_names, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise ApiError(
            404, f"model {name!r} does not exist; this server serves {served}{hint}", "model"
        )

    def check_size(self, prompts: int, n: int) -> None:
        """The per-request limits: prompts, and prompts x n sequences."""
        if prompts > self.config.max_prompts:
            raise ApiError(
                400,
                f"prompt has {prompts} prompts; this server takes at most "
                f"{self.config.max_prompts} per request",
                "prompt",
            )
        if prompts * n > self.config.max_sequences:
            raise ApiError(
                400,
                f"n={n} x {prompts} prompts asks for {prompts * n} sequences; this server "
                f"takes at most {self.config.max_sequences} per request",
                "n",
            )

    def _enter(self, client: str, sequences: int) -> Ticket:
        try:
            return self.admission.enter(client, sequences)
        except QueueFull as exc:
            headers = {"Retry-After": str(self.config.retry_after)}
            raise ApiError(429, str(exc), None, headers) from None
        except Draining as exc:
            raise ApiError(503, str(exc)) from None

    def _process(self, inputs: Inputs, params: Any, rid: str) -> list[EngineRequest]:
        """In a worker: tokenize and check every prompt; all or none."""
        return [
            self.llm.process(prompt, params, f"{rid}-{i}", True, where)
            for i, (prompt, where) in enumerate(inputs())
        ]

    async def run(
        self, request: Request, inputs: Inputs, count: int, params: Any, stream: bool, shape: Any
    ) -> Any:
        """Serve ``count`` prompts (``inputs`` makes them) with ``params``, as ``shape``."""
        record = record_of(request)
        ticket = self._enter(record.client, count * params.n)
        rid = f"{shape.prefix}-{record.id}"
        try:
            reqs = await self.workers.run(self._process, inputs, params, rid)
        except EngineStopped as exc:
            ticket.close()
            raise ApiError(503, str(exc)) from None
        except (TypeError, ValueError) as exc:
            ticket.close()
            raise ApiError.refused(exc, shape.prompt_param) from None
        except BaseException:
            ticket.close()
            raise
        self.loop = asyncio.get_running_loop()
        record.prompt_tokens = sum(len(r.prompt_token_ids) for r in reqs)
        streams = [self._admitted(ticket, r, stream) for r in reqs]
        job = Job(streams, shape, rid, int(time.time()), params.n, ticket, record)
        if stream:
            return EventStream(events(self, job), ticket.close)
        self.active += 1
        try:
            return await self.whole(request, job)
        finally:
            self.active -= 1
            ticket.close()

    async def _admitted(
        self, ticket: Ticket, req: EngineRequest, delta: bool
    ) -> AsyncIterator[RequestOutput]:
        async with ticket.admit(req.n):
            async for out in self.llm.generate(req, delta=delta):
                yield out

    async def whole(self, request: Request, job: Job) -> Any:
        streams, shape, record = job.streams, job.shape, job.record
        finals: list[RequestOutput | None] = [None] * len(streams)

        async def collect() -> None:
            async for i, out in merge(streams, self.inboxes):
                if any(c.token_ids for c in out.outputs):
                    record.token_seen()
                finals[i] = out

        task = asyncio.ensure_future(collect())
        while not task.done():  # a client that hangs up aborts its requests
            await asyncio.wait({task}, timeout=0.25)
            if not task.done() and await request.is_disconnected():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                self.metrics.ended("aborted", len(streams))
                raise ApiError(499, "the client disconnected")
        try:
            task.result()
        except (EngineStopped, ServerStopping) as exc:
            raise ApiError(503, str(exc)) from None
        except Exception as exc:  # refused by the engine itself: this request only
            LOGGER.exception("request %s failed", job.rid)
            raise ApiError(500, failure_line(exc)) from None
        done = [shape.view(f) for f in finals if f is not None]
        failed = next((o.error for o in done if o.error is not None), None)
        if failed is not None:
            raise ApiError(500, f"the request failed inside the engine: {failed}")
        made = sum(len(c.token_ids) for o in done for c in o.outputs)
        self.metrics.ended("ok", len(done))
        self.metrics.tokens(sum(len(o.prompt_token_ids) for o in done), made)
        record.output_tokens = made
        return JSONResponse(shape.whole(job.rid, job.now, done, job.n))
