"""Several engine requests' outputs as one stream, which a stopping server can end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from tandem.core.outputs.request_output import RequestOutput


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
