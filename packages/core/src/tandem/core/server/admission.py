"""Fair admission: which engine request enters the engine next, round-robin by client.

The engine serves what it holds first come, first served; a client that sends 16,000
sequences at once would hold the engine until they are done. So the server keeps the
requests itself and feeds the engine one engine request at a time while fewer than
``window`` sequences are inside it, taking turns between clients (a client is an API key,
else a remote address). A client that comes with nothing waiting takes the next turn
(after other such newcomers); turns then go round the clients with something waiting.
A client with nothing in the engine may go past the window by a quarter of it
(``headroom``), so a newcomer's small request goes in at once instead of waiting for a
flood's sequences to finish: it waits for at most its turn, not for everything queued
before it, and runs in a batch of at most ``window + headroom`` sequences.

A request declares all its sequences on arrival (:meth:`Admission.enter`); past
``max_waiting`` sequences waiting in all, it is refused with :class:`QueueFull` (a 429),
and with :class:`Draining` once the server is stopping (a 503).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


class QueueFull(Exception):
    """Too many sequences are waiting for the engine: come back later."""


class Draining(Exception):
    """The server is stopping: it takes no new requests."""


@dataclass(slots=True)
class _Waiter:
    ticket: Ticket
    n: int
    future: asyncio.Future[None]


@dataclass(slots=True)
class Ticket:
    """One HTTP request's place: the sequences it declared and has not yet let in."""

    admission: Admission
    client: str
    waiting: int
    closed: bool = field(default=False)

    @contextlib.asynccontextmanager
    async def admit(self, n: int) -> AsyncIterator[None]:
        """Wait for the turn of ``n`` sequences (one engine request), hold their room in
        the engine meanwhile, give it back on leaving."""
        await self.admission._wait(self, n)
        try:
            yield
        finally:
            self.admission._leave(self.client, n)

    def close(self) -> None:
        """Give back what was declared and never let in (a refused or abandoned request)."""
        if not self.closed:
            self.closed = True
            self.admission.waiting -= self.waiting
            self.waiting = 0


class Admission:
    """The queue between the server and the engine (one per server, one event loop)."""

    def __init__(self, window: int, max_waiting: int) -> None:
        self.window = window
        self.headroom = max(1, window // 4)
        self.max_waiting = max_waiting
        self.inside = 0  # sequences let into the engine and not yet done
        self.waiting = 0  # sequences declared and not yet let in
        self.draining = False
        self._queues: dict[str, deque[_Waiter]] = {}  # clients in turn order
        self._fresh: set[str] = set()  # clients that came with nothing waiting, not yet let in
        self._inside_by: dict[str, int] = {}  # sequences in the engine, by client

    def enter(self, client: str, sequences: int) -> Ticket:
        """Declare a request of ``sequences`` sequences; QueueFull or Draining refuse it."""
        if self.draining:
            raise Draining("the server is stopping and takes no new requests")
        if self.waiting + sequences > self.max_waiting:
            raise QueueFull(
                f"the server is busy: {self.waiting} sequences wait for the engine and this "
                f"request adds {sequences} (at most {self.max_waiting} wait); retry later"
            )
        self.waiting += sequences
        return Ticket(self, client, sequences)

    def clients_waiting(self) -> int:
        return len(self._queues)

    async def _wait(self, ticket: Ticket, n: int) -> None:
        loop = asyncio.get_running_loop()
        waiter = _Waiter(ticket, n, loop.create_future())
        queue = self._queues.get(ticket.client)
        if queue is None:  # a client with nothing waiting: after the other newcomers
            order = list(self._queues.items())
            at = next((i for i, (c, _) in enumerate(order) if c not in self._fresh), len(order))
            order.insert(at, (ticket.client, deque([waiter])))
            self._queues = dict(order)
            self._fresh.add(ticket.client)
        else:
            queue.append(waiter)
        self._pump()
        try:
            await waiter.future
        except BaseException:
            if waiter.future.done() and not waiter.future.cancelled():
                self._leave(ticket.client, n)  # let in just as it was cancelled: give it back
            else:
                self._drop(waiter)
            raise

    def _drop(self, waiter: _Waiter) -> None:
        queue = self._queues.get(waiter.ticket.client)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self._queues[waiter.ticket.client]
                self._fresh.discard(waiter.ticket.client)
        self._pump()

    def _leave(self, client: str, n: int) -> None:
        self.inside -= n
        left = self._inside_by.get(client, 0) - n
        if left > 0:
            self._inside_by[client] = left
        else:
            self._inside_by.pop(client, None)
        self._pump()

    def _fits(self, client: str, n: int) -> bool:
        """Whether ``n`` more sequences of ``client`` may go in now."""
        if not self.inside:
            return True  # larger than the window: alone
        room = self.window if client in self._inside_by else self.window + self.headroom
        return self.inside + n <= room

    def _pump(self) -> None:
        """Let in the head request of each client in turn while the window has room (a
        request larger than the whole window goes in alone)."""
        while self._queues:
            client = next(iter(self._queues))
            queue = self._queues.pop(client)
            waiter = queue[0]
            if waiter.future.done():  # cancelled, its task not yet told: drop it
                queue.popleft()
                if queue:
                    self._queues = {client: queue, **self._queues}
                else:
                    self._fresh.discard(client)
                continue
            if not self._fits(client, waiter.n):
                self._queues = {client: queue, **self._queues}  # keeps its turn
                return
            queue.popleft()
            self._fresh.discard(client)
            if queue:
                self._queues[client] = queue  # to the back of the turn order
            self.inside += waiter.n
            self._inside_by[client] = self._inside_by.get(client, 0) + waiter.n
            ticket = waiter.ticket
            taken = min(waiter.n, ticket.waiting)
            ticket.waiting -= taken
            self.waiting -= taken
            waiter.future.set_result(None)
