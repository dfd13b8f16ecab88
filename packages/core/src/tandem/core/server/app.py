"""The FastAPI application: routes, request checks, streaming and client disconnects.

Each prompt of a body becomes one engine request, checked (``strict``: a ``max_tokens``
that does not fit is a 400) before any is queued. A streamed response that the client
leaves cancels its generators, which aborts the requests; a whole response is raced
against the client's disconnect for the same effect.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from tandem.core.async_llm import AsyncLLM, EngineStopped
from tandem.core.outputs import RequestOutput
from tandem.core.server.metrics import Metrics
from tandem.core.server.protocol import ChatCompletionRequest, CompletionRequest, error_body
from tandem.core.server.responses import ChatShape, CompletionShape


def sse(obj: Any) -> str:
    return f"data: {json.dumps(obj)}\n\n"


async def merge(
    streams: list[AsyncIterator[RequestOutput]],
) -> AsyncIterator[tuple[int, RequestOutput]]:
    """Outputs of several requests as they come, as (which request, output)."""
    inbox: asyncio.Queue[tuple[int, RequestOutput | BaseException | None]] = asyncio.Queue()

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
        except (TypeError, ValueError) as exc:
            param = "max_tokens" if "max_tokens" in str(exc) else shape.prompt_param
            return self.error(str(exc), param)
        except EngineStopped as exc:
            return self.error(str(exc), None, 503)
        rid, now = f"{shape.prefix}-{uuid.uuid4().hex[:24]}", int(time.time())
        streams = [self.llm.generate(r, delta=stream) for r in reqs]
        if stream:
            body = self.events(streams, shape, rid, now, params.n, usage)
            return StreamingResponse(body, media_type="text/event-stream")
        return await self.whole(request, streams, shape, rid, now, params.n)

    async def whole(
        self, request: Any, streams: list[Any], shape: Any, rid: str, now: int, n: int
    ) -> Any:
        finals: list[RequestOutput | None] = [None] * len(streams)

        async def collect() -> None:
            async for i, out in merge(streams):
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
        except EngineStopped as exc:
            return self.error(str(exc), None, 503)
        done = [f for f in finals if f is not None]
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
            async for i, out in merge(streams):
                made += sum(len(c.token_ids) for c in out.outputs)
                if out.finished:
                    prompt += len(out.prompt_token_ids)
                    finished += 1
                for comp in out.outputs:
                    chunk = shape.chunk(rid, now, i * n + comp.index, comp)
                    if chunk is not None:
                        yield sse(chunk)
            if usage:
                yield sse(shape.usage_chunk(rid, now, prompt, made))
            yield "data: [DONE]\n\n"
            self.metrics.ended("ok", finished)
        except EngineStopped as exc:
            yield sse(error_body(str(exc), None, "server_error"))
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
        return PlainTextResponse(svc.metrics.render(await llm.stats()))

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Any:
        refused = svc.wrong_model(body.model)
        if refused is not None:
            return refused
        if body.echo:
            return svc.error("echo is not supported", "echo")
        try:
            params = body.sampling(body.max_tokens, body.logprobs)
        except (TypeError, ValueError) as exc:
            return svc.error(str(exc), None)
        shape = CompletionShape(model_name, body.logprobs)
        return await svc.run(
            request, body.prompts(), params, body.stream, shape, body.include_usage
        )

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest, request: Request) -> Any:
        refused = svc.wrong_model(body.model)
        if refused is not None:
            return refused
        turns = [m.model_dump(exclude_none=True, exclude={"name"}) for m in body.messages]
        try:
            params = body.sampling(body.limit, body.top_k_logprobs)
            ids = llm.get_tokenizer().apply_chat_template(turns)
        except (TypeError, ValueError) as exc:
            return svc.error(str(exc), "messages")
        shape = ChatShape(model_name, body.top_k_logprobs)
        return await svc.run(request, [ids], params, body.stream, shape, body.include_usage)

    return app
