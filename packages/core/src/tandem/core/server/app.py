"""The FastAPI application: routes, request checks, streaming and client disconnects.

Each prompt of a body becomes one engine request, checked (``strict``: a ``max_tokens``
that does not fit is a 400) before any is queued. A streamed response that the client
leaves cancels its generators, which aborts the requests; a whole response is raced
against the client's disconnect for the same effect.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from tandem.core.async_llm import AsyncLLM, EngineStopped
from tandem.core.outputs import RequestOutput, error_text
from tandem.core.server.metrics import Metrics
from tandem.core.server.protocol import ChatCompletionRequest, CompletionRequest, error_body
from tandem.core.server.responses import ChatShape, CompletionShape
from tandem.core.validate import RequestError

LOGGER = logging.getLogger("tandem")


def _failure(exc: BaseException) -> str:
    """One line for the client about an unexpected failure (the log has the rest)."""
    return f"the request failed: {error_text(exc)}"


def _param(exc: Exception, fallback: str | None) -> str | None:
    """The API field a refused input names (``stop_token_ids[2]`` -> ``stop_token_ids``)."""
    return exc.root if isinstance(exc, RequestError) and exc.root else fallback


def sse(obj: Any) -> str:
    return f"data: {json.dumps(obj)}\n\n"


class ServerStopping(RuntimeError):
    """The server's grace period after SIGTERM ran out: the request is aborted."""


Inbox = asyncio.Queue[tuple[int, "RequestOutput | BaseException | None"]]


async def merge(
    streams: list[AsyncIterator[RequestOutput]], inboxes: set[Inbox]
) -> AsyncIterator[tuple[int, RequestOutput]]:
    """Outputs of several requests as they come, as (which request, output); the inbox
    is listed in ``inboxes`` meanwhile, so that a stopping server can end it."""
    inbox: Inbox = asyncio.Queue()
    inboxes.add(inbox)

    async def pump(i: int, stream: AsyncIterator[RequestOutput]) -> None:
        try:
            async for out in stream:
                await inbox.put((i, out))
        except Exception as exc:
            await inbox.put((i, exc))
            return
        await inbox.put((i, None))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        left = len(tasks)
        while left:
            i, item = await inbox.get()
            if item is None:
                left -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield i, item
    finally:
        inboxes.discard(inbox)
        for task in tasks:  # a cancelled pump closes its generator: the request is aborted
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Service:
    """What the routes share: the engine, the served name and the counters."""

    def __init__(self, llm: AsyncLLM, model_name: str) -> None:
        self.llm = llm
        self.model_name = model_name
        self.metrics = Metrics()
        self.created = int(time.time())
        self.active = 0  # HTTP requests being answered (generation running)
        self.inboxes: set[Inbox] = set()  # of the requests generating now
        self.loop: asyncio.AbstractEventLoop | None = None

    def in_flight(self) -> int:
        return self.active

    def abort_all(self, reason: str) -> None:
        """End every request in flight with ``reason`` (thread-safe: a server's signal
        handler or a timer calls it); each answers with an error, its engine work aborted."""
        if self.loop is None:
            return
        stop = ServerStopping(reason)
        for inbox in list(self.inboxes):
            self.loop.call_soon_threadsafe(inbox.put_nowait, (-1, stop))

    def error(self, message: str, param: str | None, status: int = 400, kind: str = "") -> Any:
        self.metrics.ended("error")
        kind = kind or ("invalid_request_error" if status < 500 else "server_error")
        return JSONResponse(error_body(message, param, kind), status_code=status)

    def wrong_model(self, name: str | None) -> Any:
        if name is None or name == self.model_name:
            return None
        message = f"model {name!r} does not exist; this server serves {self.model_name!r}"
        return self.error(message, "model", 404, "not_found_error")

    async def run(
        self, request: Any, prompts: list[Any], params: Any, stream: bool, shape: Any, usage: bool
    ) -> Any:
        try:
            reqs = [
                self.llm.process(p, params, f"{shape.prefix}-{uuid.uuid4().hex}", True, where)
                for p, where in zip(prompts, shape.where(len(prompts)))
            ]
        except EngineStopped as exc:
            return self.error(str(exc), None, 503)
        except (TypeError, ValueError) as exc:
            return self.error(str(exc), _param(exc, shape.prompt_param))
        self.loop = asyncio.get_running_loop()
        rid, now = f"{shape.prefix}-{uuid.uuid4().hex[:24]}", int(time.time())
        streams = [self.llm.generate(r, delta=stream, final_only=not stream) for r in reqs]
        if stream:
            body = self.counted(self.events(streams, shape, rid, now, params.n, usage))
            return StreamingResponse(body, media_type="text/event-stream")
        self.active += 1
        try:
            return await self.whole(request, streams, shape, rid, now, params.n)
        finally:
            self.active -= 1

    async def counted(self, events: AsyncIterator[str]) -> AsyncIterator[str]:
        self.active += 1
        try:
            async for event in events:
                yield event
        finally:
            self.active -= 1

    async def whole(
        self, request: Any, streams: list[Any], shape: Any, rid: str, now: int, n: int
    ) -> Any:
        finals: list[RequestOutput | None] = [None] * len(streams)

        async def collect() -> None:
            async for i, out in merge(streams, self.inboxes):
                finals[i] = out

        task = asyncio.ensure_future(collect())
        while not task.done():  # a client that hangs up aborts its requests
            await asyncio.wait({task}, timeout=0.25)
            if not task.done() and await request.is_disconnected():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                self.metrics.ended("aborted", len(streams))
                return self.error("the client disconnected", None, 499)
        try:
            task.result()
        except (EngineStopped, ServerStopping) as exc:
            return self.error(str(exc), None, 503)
        except Exception as exc:  # refused by the engine itself: this request only
            LOGGER.exception("request %s failed", rid)
            return self.error(_failure(exc), None, 500)
        done = [f for f in finals if f is not None]
        failed = next((o.error for o in done if o.error is not None), None)
        if failed is not None:
            return self.error(f"the request failed inside the engine: {failed}", None, 500)
        self.metrics.ended("ok", len(done))
        self.metrics.tokens(
            sum(len(o.prompt_token_ids) for o in done),
            sum(len(c.token_ids) for o in done for c in o.outputs),
        )
        return shape.whole(rid, now, done, n)

    async def events(
        self, streams: list[Any], shape: Any, rid: str, now: int, n: int, usage: bool
    ) -> AsyncIterator[str]:
        prompt = made = finished = 0
        try:
            opening = shape.opening(rid, now, len(streams) * n)
            if opening is not None:
                yield sse(opening)
            async for i, out in merge(streams, self.inboxes):
                made += sum(len(c.token_ids) for c in out.outputs)
                if out.finished:
                    prompt += len(out.prompt_token_ids)
                    finished += 1
                if out.error is not None:  # this request failed; the others go on
                    message = f"the request failed inside the engine: {out.error}"
                    yield sse(error_body(message, None, "server_error"))
                    continue
                for comp in out.outputs:
                    chunk = shape.chunk(rid, now, i * n + comp.index, comp)
                    if chunk is not None:
                        yield sse(chunk)
            if usage:
                yield sse(shape.usage_chunk(rid, now, prompt, made))
            yield "data: [DONE]\n\n"
            self.metrics.ended("ok", finished)
        except (EngineStopped, ServerStopping) as exc:
            yield sse(error_body(str(exc), None, "server_error"))
            yield "data: [DONE]\n\n"
            self.metrics.ended("error", len(streams) - finished)
        except Exception as exc:  # refused by the engine itself: this request only
            LOGGER.exception("request %s failed", rid)
            yield sse(error_body(_failure(exc), None, "server_error"))
            self.metrics.ended("error", len(streams) - finished)
        except BaseException:  # the client left (cancelled) or the server stops
            self.metrics.ended("aborted", len(streams) - finished)
            raise
        finally:
            self.metrics.tokens(prompt, made)


def build_app(llm: AsyncLLM, model_name: str) -> Any:
    """The FastAPI application serving ``llm`` under the model id ``model_name``."""
    app = FastAPI(title="tandem", description="An OpenAI-compatible API over Tandem.")
    svc = Service(llm, model_name)
    app.state.service = svc

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Any:
        errors = exc.errors()
        first = errors[0] if errors else {}
        loc = [str(x) for x in first.get("loc", ()) if x != "body"]
        param = ".".join(loc) or None
        return svc.error(f"{param or 'body'}: {first.get('msg', 'invalid value')}", param)

    @app.get("/health")
    async def health() -> Any:
        if not llm.is_alive:
            return JSONResponse({"status": "dead"}, status_code=503)
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> Any:
        card = {
            "id": model_name,
            "object": "model",
            "created": svc.created,
            "owned_by": "tandem",
            "max_model_len": llm.max_model_len,
        }
        return {"object": "list", "data": [card]}

    @app.get("/metrics")
    async def metrics() -> Any:
        try:
            stats = await llm.stats()
        except EngineStopped:  # the counters still tell what happened before
            stats = None
        return PlainTextResponse(svc.metrics.render(stats))

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Any:
        refused = svc.wrong_model(body.model)
        if refused is not None:
            return refused
        if body.echo:
            return svc.error("echo is not supported", "echo")
        try:
            params = body.sampling(llm.default_sampling_params(), body.max_tokens, body.logprobs)
            prompts = body.prompts()
        except EngineStopped as exc:
            return svc.error(str(exc), None, 503)
        except (TypeError, ValueError) as exc:
            return svc.error(str(exc), _param(exc, None))
        shape = CompletionShape(model_name, body.logprobs)
        return await svc.run(request, prompts, params, body.stream, shape, body.include_usage)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest, request: Request) -> Any:
        refused = svc.wrong_model(body.model)
        if refused is not None:
            return refused
        turns = [m.model_dump(exclude_none=True, exclude={"name"}) for m in body.messages]
        try:
            params = body.sampling(llm.default_sampling_params(), body.limit, body.top_k_logprobs)
            ids = llm.get_tokenizer().apply_chat_template(turns)
        except EngineStopped as exc:
            return svc.error(str(exc), None, 503)
        except (TypeError, ValueError) as exc:
            return svc.error(str(exc), _param(exc, "messages"))
        shape = ChatShape(model_name, body.top_k_logprobs)
        return await svc.run(request, [ids], params, body.stream, shape, body.include_usage)

    return app
