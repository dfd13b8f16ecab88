"""Handing results from a worker thread to an asyncio event loop.

The engine thread of ``AsyncLLM`` and the server's worker threads both finish work that
a coroutine awaits; these two helpers are how such a result crosses over.
"""

from __future__ import annotations

import asyncio
from typing import Any


def post(loop: asyncio.AbstractEventLoop, callback: Any, *args: Any) -> None:
    """Run ``callback(*args)`` on ``loop`` from another thread; a loop that has closed
    (its server stopped while the work still ran) has no one to tell."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:  # "Event loop is closed"
        if not loop.is_closed():
            raise


def settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """Give ``future`` its result or error, unless it is already done (cancelled)."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
