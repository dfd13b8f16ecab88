"""The server's admission queue on its own: turns between clients, the window, refusals."""

from __future__ import annotations

import asyncio

import pytest

from tandem.core.server.admission import Admission, Draining, QueueFull


async def _order(adm: Admission, requests: list[tuple[str, int]], hold: float = 0.01) -> list:
    """Let each (client, n) in, holding its room ``hold`` s; the order they got in."""
    seen: list[tuple[str, int]] = []

    async def one(i: int, client: str, n: int) -> None:
        ticket = adm.enter(client, n)
        async with ticket.admit(n):
            seen.append((client, i))
            await asyncio.sleep(hold)
        ticket.close()

    await asyncio.gather(*(one(i, c, n) for i, (c, n) in enumerate(requests)))
    return seen


def test_clients_take_turns() -> None:
    async def main() -> list:
        adm = Admission(window=1, max_waiting=100)
        return await _order(adm, [("a", 1)] * 5 + [("b", 1)] * 2 + [("c", 1)])

    order = [c for c, _ in asyncio.run(main())]
    # the first "a" goes in at once, so a's second came with nothing waiting (a newcomer
    # like b and c, and before them); then turns go round a, b, c while they have any
    assert order == ["a", "a", "b", "c", "a", "b", "a", "a"]


def test_the_window_bounds_what_is_inside_and_a_big_request_goes_in_alone() -> None:
    async def main() -> None:
        adm = Admission(window=4, max_waiting=100)
        peak = 0

        async def one(n: int) -> None:
            nonlocal peak
            ticket = adm.enter("a", n)
            async with ticket.admit(n):
                peak = max(peak, adm.inside)
                await asyncio.sleep(0.01)
            ticket.close()

        await asyncio.gather(*(one(n) for n in (2, 2, 3, 1, 9, 1)))
        assert peak == 9  # the request of 9 went in alone; the others shared 4
        assert adm.inside == 0 and adm.waiting == 0

    asyncio.run(main())


def test_a_full_queue_and_a_draining_server_refuse() -> None:
    adm = Admission(window=1, max_waiting=5)
    first = adm.enter("a", 4)
    with pytest.raises(QueueFull, match="busy"):
        adm.enter("b", 2)
    first.close()
    adm.enter("b", 2).close()
    adm.draining = True
    with pytest.raises(Draining):
        adm.enter("a", 1)


def test_a_cancelled_waiter_gives_its_turn_and_room_back() -> None:
    async def main() -> None:
        adm = Admission(window=4, max_waiting=10)
        holder = adm.enter("a", 4)
        waiter = adm.enter("b", 2)  # more than the headroom: it waits
        async with holder.admit(4):
            task = asyncio.ensure_future(waiter.admit(2).__aenter__())
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        holder.close()
        waiter.close()
        assert adm.inside == 0 and adm.waiting == 0 and adm.clients_waiting() == 0
        third = adm.enter("c", 1)
        async with third.admit(1):
            assert adm.inside == 1
        third.close()

    asyncio.run(main())


def test_a_client_with_nothing_inside_goes_past_a_full_window_by_the_headroom() -> None:
    async def main() -> None:
        adm = Admission(window=4, max_waiting=10)
        flood, probe = adm.enter("a", 8), adm.enter("b", 2)
        async with flood.admit(4), probe.admit(1):  # at once: b had nothing inside
            assert adm.inside == 5
            second = asyncio.ensure_future(probe.admit(1).__aenter__())
            await asyncio.sleep(0.01)
            assert not second.done()  # b is inside now: the window holds
            second.cancel()
        for ticket in (flood, probe):
            ticket.close()
        assert adm.inside == 0 and adm.waiting == 0

    asyncio.run(main())
