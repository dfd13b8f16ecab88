"""Soak: thousands of short requests with random aborts through one engine.

The engine has a small KV cache, so requests also queue and get preempted. Along the
way the block counts stay consistent (never more free blocks than blocks, every block
free whenever the engine is idle); resident memory stays flat after warm-up; at the end
the probe still answers like a fresh engine.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from relhelpers import PROBE_IDS, engine_pids, probe_params, rss

from tandem.core import SamplingParams
from tandem.core.config.engine_args import EngineArgs
from tandem.core.engine.protocol import load_engine_class
from tandem.core.testing import add_request, run_to_completion

pytestmark = [pytest.mark.reliability, pytest.mark.engines("v0", "v1")]

RSS_SLACK = 48 << 20  # bytes of growth allowed after warm-up (allocator noise)


def soak(engine: Any, requests: int, seed: int) -> dict[str, int]:
    """Serve ``requests`` short requests, aborting some at random; counts of what happened."""
    rng = random.Random(seed)
    live: set[str] = set()
    counts = {"served": 0, "aborted": 0, "idle_checks": 0}
    added = 0
    warm = rss_base = 0
    while added < requests or live:
        while added < requests and len(live) < rng.randint(1, 24):
            rid = f"s{added}"
            prompt = [rng.randrange(1, 500) for _ in range(rng.randint(1, 12))]
            temp = rng.choice([0.0, 0.8])
            params = SamplingParams(temperature=temp, max_tokens=rng.randint(1, 4), seed=added)
            add_request(engine, rid, prompt, params)
            live.add(rid)
            added += 1
        for out in engine.step():
            if out.finished and out.request_id in live:
                live.discard(out.request_id)
                counts["served"] += 1
        if live and rng.random() < 0.15:
            victim = rng.choice(sorted(live))
            engine.abort_request(victim)
            live.discard(victim)
            counts["aborted"] += 1
        stats = engine.stats()  # EngineStats refuses free > total: a double free shows here
        assert stats.num_running + stats.num_waiting <= 3 * len(live) + 3
        if not live:
            assert stats.num_free_kv_blocks == stats.num_kv_blocks, stats
            counts["idle_checks"] += 1
        if not warm and added >= requests // 5:
            warm, rss_base = added, rss(engine_pids(engine))
    counts["rss_growth"] = rss(engine_pids(engine)) - rss_base
    counts["preemptions"] = engine.stats().num_preemptions
    return counts


def build(name: str, model: Path) -> Any:
    args = EngineArgs(
        model=str(model), max_model_len=64, block_size=4, num_kv_blocks=16, max_num_seqs=16
    )
    return load_engine_class(name).from_engine_args(args)


@pytest.mark.parametrize(
    "requests",
    [pytest.param(300, id="300"), pytest.param(2000, id="2000", marks=pytest.mark.slow)],
)
def test_soak(requests: int, served: Any, tiny_model: Path, engine: str) -> None:
    eng = build(engine, tiny_model)
    try:
        counts = soak(eng, requests, seed=requests)
        final = eng.stats()
        assert final.num_free_kv_blocks == final.num_kv_blocks
        assert not eng.has_unfinished_requests()
        done = run_to_completion(eng, [("probe", list(PROBE_IDS), probe_params())])
    finally:
        eng.shutdown()
    print(f"\nreliability soak ({engine}): {requests} requests: {counts}, blocks leaked 0")
    assert counts["served"] + counts["aborted"] == requests
    assert counts["aborted"] > 0 and counts["idle_checks"] > 0
    assert counts["rss_growth"] < RSS_SLACK, counts
    assert list(done["probe"].outputs[0].token_ids) == served.reference  # a fresh engine's
