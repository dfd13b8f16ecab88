"""Aborts: requests dropped mid-flight (running, waiting, half prefilled) free their KV blocks."""

from __future__ import annotations

import random
from typing import Any

import pytest

from tandem.core import SamplingParams
from tandem.core.testing import add_request

pytestmark = [pytest.mark.reliability, pytest.mark.engines("v0", "v1")]

LONG = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)


def test_abort_mid_flight_frees_blocks(served: Any) -> None:
    engine, rng = served.llm.engine, random.Random(8)
    start = served.llm.stats()
    assert start.num_free_kv_blocks == start.num_kv_blocks
    aborted = 0
    for round_ in range(12):
        ids = [f"a{round_}-{i}" for i in range(6)]
        for rid in ids:
            prompt = [rng.randrange(1, 500) for _ in range(rng.randint(1, 40))]
            add_request(engine, rid, prompt, LONG)
        for _ in range(rng.randint(1, 4)):
            engine.step()
        for _ in range(50):  # engine v1 may not have scheduled them yet
            mid = served.llm.stats()
            if mid.num_free_kv_blocks < mid.num_kv_blocks:
                break
            engine.step()
        assert mid.num_free_kv_blocks < mid.num_kv_blocks  # the requests hold blocks now
        live = ids[:]
        rng.shuffle(live)
        half = live[: len(live) // 2]
        engine.abort_request(half)  # a list, running or still waiting
        engine.abort_request(half[0])  # aborting twice is a no-op
        engine.abort_request("never-added")
        aborted += len(half)
        engine.step()
        engine.abort_request(live[len(live) // 2 :])
        aborted += len(live) - len(half)
        assert not engine.has_unfinished_requests()
        now = served.llm.stats()
        assert now.num_free_kv_blocks == now.num_kv_blocks, (round_, now)
        assert now.num_running == 0 and now.num_waiting == 0
    print(f"\nreliability aborts ({served.llm.engine_name}): {aborted} requests aborted mid-flight")
    end = served.llm.stats()
    assert end.num_free_kv_blocks == start.num_free_kv_blocks
    served.check()


def test_abort_finished_and_during_generate(served: Any) -> None:
    """Aborting a finished request is harmless; a failing generate aborts what it added."""
    llm = served.llm
    out = llm.generate("hello there", SamplingParams(max_tokens=2), use_tqdm=False)
    llm.engine.abort_request(out[0].request_id)

    class Boom(Exception):
        pass

    calls = {"n": 0}
    step = llm.engine.step

    def failing_step() -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise Boom("interrupted")
        return step()

    llm.engine.step = failing_step  # an instance attribute: undone below
    try:
        with pytest.raises(Boom):
            llm.generate(["a b c", "d e f"], LONG, use_tqdm=False)
    finally:
        del llm.engine.step
    assert not llm.engine.has_unfinished_requests()
    served.check()
