"""Streaming and async generation on either engine: ``AsyncLLM``.

One thread owns the engine (engines are not thread-safe): it takes commands (add,
abort, stats) from a queue, steps the engine while it has work, and hands each
``RequestOutput`` to the asyncio queue of the request it belongs to. It stands on the
engine itself (:func:`tandem.core.entrypoints.front_door.open_engine`), as ``LLM`` does. Requests
are checked and tokenized in the caller by the front door's input processor, and a
request id already running is refused there, before anything is queued, so bad input
raises at once and the engine takes only checked requests. A consumer that stops
iterating (a cancelled task, a client gone) aborts its request, which frees its KV
blocks.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import queue
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from tandem.core.engine.protocol import Engine
from tandem.core.engine.stats import EngineStats
from tandem.core.entrypoints.front_door import open_engine
from tandem.core.entrypoints.loop_calls import post, settle
from tandem.core.inputs.processor import EngineRequest, InputProcessor, OutputKind
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.outputs.request_output import RequestOutput, error_text
from tandem.core.text.tokenizer import Tokenizer
from tandem.core.validate import RequestError

if TYPE_CHECKING:
    from tandem.core.config.engine_args import EngineConfig

LOGGER = logging.getLogger("tandem")
IDLE_CHECK_S = 1.0  # how often an idle engine thread checks that its engine lives


@dataclass(slots=True)
class _Sink:
    """Where one request's outputs go: an asyncio queue on its event loop."""

    queue: asyncio.Queue[RequestOutput | BaseException]
    loop: asyncio.AbstractEventLoop

    def put(self, item: RequestOutput | BaseException) -> None:
        post(self.loop, self.queue.put_nowait, item)


class EngineStopped(RuntimeError):
    """The engine thread is gone (shut down, or the engine failed).

    Its message is one line for the caller (a server sends it to clients); the failure's
    full story (a child's traceback) is logged once on the ``tandem`` logger.
    """


def _summary(exc: BaseException) -> str:
    """One line on an engine failure, without tracebacks or file paths."""
    return f"the engine failed ({error_text(exc)})"


class AsyncLLM:
    """``async for out in llm.generate(prompt, params): ...`` over one engine."""

    def __init__(
        self, model: str | os.PathLike[str], engine: str | None = None, **engine_args: Any
    ) -> None:
        opened = open_engine(model, engine, **engine_args)
        self.engine_name = opened.name
        self.engine_args = opened.engine_args
        # the ids a server of this model answers to (the first announced)
        self.model_names: tuple[str, ...] = opened.model_names
        self.engine: Engine = opened.engine  # stepped by the engine thread only
        self.config: EngineConfig = self.engine.config
        self.inputs: InputProcessor = opened.inputs  # every request is checked here, once
        self._commands: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._sinks: dict[str, _Sink] = {}  # touched by the engine thread only
        self._ids = itertools.count()
        self._lock = threading.Lock()  # the input processor's seed generator, _running
        self._running: set[str] = set()  # ids of the requests between generate and its end
        self._failure: BaseException | None = None
        self._closed = False
        self.stopped = threading.Event()  # set once the engine thread has ended
        self._thread = threading.Thread(target=self._run, name="tandem-engine", daemon=True)
        self._thread.start()

    # -- the caller's side ----------------------------------------------------------
    @property
    def max_model_len(self) -> int:
        return int(self.config.model.max_model_len)

    def get_tokenizer(self) -> Tokenizer:
        return self.engine.tokenizer

    def default_sampling_params(self) -> SamplingParams:
        """What a request without params gets: the model's own defaults (its
        ``generation_config.json``, read as ``transformers`` reads it)."""
        return self.inputs.defaults.clone()

    @property
    def failure(self) -> BaseException | None:
        """Why the engine stopped serving, when it failed (None while it serves)."""
        return self._failure

    def process(
        self,
        prompt: str | list[int],
        params: Any = None,
        request_id: str | None = None,
        strict: bool = False,
        where: str | None = None,
        output_kind: OutputKind = OutputKind.CUMULATIVE,
    ) -> EngineRequest:
        """Check and tokenize one request (a ``RequestError`` naming the field), without
        queueing it; ``strict``: a ``max_tokens`` that does not fit is refused."""
        self._check_usable()
        rid = request_id if request_id is not None else f"async-{next(self._ids)}"
        with self._lock:
            return self.inputs.process(rid, prompt, params, where, strict, output_kind)

    async def generate(
        self,
        prompt: str | list[int] | EngineRequest,
        params: Any = None,
        request_id: str | None = None,
        delta: bool = False,
        final_only: bool = False,
    ) -> AsyncIterator[RequestOutput]:
        """Yield the request's ``RequestOutput`` after each step that advanced it.

        Each output is cumulative (as ``LLM.generate`` returns), or with ``delta=True``
        holds only what is new since the previous one; ``final_only=True`` yields the
        finished output alone. The engine makes the kind asked for, so a stream costs
        O(tokens). Leaving the loop early (break, cancellation) aborts the request. A
        ``request_id`` already running is a ``RequestError`` (field ``request_id``).
        """
        if delta and final_only:
            raise TypeError("generate: delta and final_only exclude each other")
        kind = (
            OutputKind.DELTA
            if delta
            else OutputKind.FINAL_ONLY
            if final_only
            else OutputKind.CUMULATIVE
        )
        if isinstance(prompt, EngineRequest):
            request = prompt
            if request.output_kind != kind:
                request = msgspec.structs.replace(request, output_kind=kind)
        else:
            request = self.process(prompt, params, request_id, output_kind=kind)
        rid = request.request_id
        with self._lock:
            if rid in self._running:
                raise RequestError("request_id", f"request_id {rid!r} is already running")
            self._running.add(rid)
        sink = _Sink(asyncio.Queue(), asyncio.get_running_loop())
        finished = False
        try:
            self._send("add", request, sink)
            while True:
                item = await sink.queue.get()
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                yield item
                if finished:
                    return
        finally:
            if not finished and not self._closed:
                self._commands.put(("abort", rid))  # queued before any later add of rid
            with self._lock:
                self._running.discard(rid)

    async def stats(self) -> EngineStats:
        """The engine's counts now (asked in the engine's thread)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[EngineStats] = loop.create_future()
        self._send("stats", loop, future)
        return await future

    def _send(self, *command: Any) -> None:
        self._check_usable()
        self._commands.put(command)

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise EngineStopped(_summary(self._failure)) from self._failure
        if self._closed:
            raise EngineStopped("this AsyncLLM was shut down; create a new one")

    @property
    def is_alive(self) -> bool:
        return self._failure is None and not self._closed and self._thread.is_alive()

    def shutdown(self) -> None:
        """Stop the engine thread (pending requests end with an error) and the engine."""
        if self._closed:
            return
        self._closed = True
        self._commands.put(("stop",))
        self._thread.join(timeout=60)
        self.engine.shutdown()

    def __enter__(self) -> AsyncLLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- the engine thread -------------------------------------------------------------
    def _run(self) -> None:
        engine = self.engine
        try:
            while True:
                busy = engine.has_unfinished_requests()
                if not self._drain(engine, block=not busy):
                    return
                if engine.has_unfinished_requests():
                    for out in engine.step():
                        self._deliver(out)
        except BaseException as exc:  # the engine is unusable: every waiter hears why
            self._failure = exc
            LOGGER.error("the engine failed; it serves no more requests: %s", exc)
            for sink in self._sinks.values():
                sink.put(EngineStopped(_summary(exc)))
            self._sinks.clear()
        finally:
            stopped = EngineStopped("the engine was shut down")
            for sink in self._sinks.values():
                sink.put(stopped)
            self._sinks.clear()
            self.stopped.set()

    def _drain(self, engine: Engine, block: bool) -> bool:
        """Apply every queued command (waiting for one when idle, and meanwhile checking
        that the engine still lives); False on stop."""
        while True:
            try:
                command = self._commands.get(block=block, timeout=IDLE_CHECK_S if block else None)
            except queue.Empty:
                if block:  # idle: a dead engine is found now, not at the next request
                    engine.check_health()
                    continue
                return True
            block = False
            kind = command[0]
            if kind == "stop":
                return False
            if kind == "add":
                request, sink = command[1], command[2]
                try:
                    engine.add(request)
                except Exception as exc:  # refused by the engine itself (e.g. too big)
                    sink.put(exc)
                    continue
                self._sinks[request.request_id] = sink
            elif kind == "abort":
                if self._sinks.pop(command[1], None) is not None:
                    engine.abort_request(command[1])
            elif kind == "stats":
                loop, future = command[1], command[2]
                try:
                    result: Any = engine.stats()
                    post(loop, settle, future, result, None)
                except Exception as exc:
                    post(loop, settle, future, None, exc)

    def _deliver(self, out: RequestOutput) -> None:
        sink = self._sinks.get(out.request_id)
        if sink is None:
            return  # aborted meanwhile
        if out.finished:
            del self._sinks[out.request_id]
        sink.put(out)
