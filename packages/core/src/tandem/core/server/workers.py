"""Work the event loop must not do itself: parsing large bodies, tokenizing, decoding.

A few daemon threads take calls from one queue; ``await workers.run(fn, *args)`` waits
for the result without holding the loop, so ``/health`` and ``/metrics`` answer while a
long prompt is tokenized (the tokenizer releases the GIL while it works).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from tandem.core.entrypoints.loop_calls import post, settle

T = TypeVar("T")


class Workers:
    """``count`` daemon threads running the calls given to :meth:`run`."""

    def __init__(self, count: int = 2, name: str = "tandem-worker") -> None:
        self._calls: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._calls.put((fn, args, loop, future))
        return await future

    def _serve(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            fn, args, loop, future = call
            if future.cancelled():
                continue
            try:
                result, error = fn(*args), None
            except BaseException as exc:
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                post(loop, settle, future, result, error)

    def close(self) -> None:
        for _ in self._threads:
            self._calls.put(None)
