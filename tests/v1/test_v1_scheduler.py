from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from v1_support import sample

from tandem.v1.core.kv_cache_manager import KVCacheManager
from tandem.v1.core.request import Request, Status
from tandem.v1.core.scheduler import Scheduler
from tandem.v1.core.step import SchedulerOutput, StepOutput


def req(key: str, n: int, arrival: int = 0) -> Request:
    return sample(key, list(range(100, 100 + n)), arrival)


def finish_step(s: Scheduler, out: SchedulerOutput) -> None:
    """What the runner reports after the model ran: token 7 where a row completes."""
    done = [r.key for r in out.scheduled if r.sample]
    s.update_from_output(out, StepOutput({k: [7] for k in done}, {k: [-1.0] for k in done}))


def test_running_first_then_waiting_mixed_in_one_step() -> None:
    s = Scheduler(KVCacheManager(32, 4, False), 8, 16, True)
    a = req("a", 6)
    s.add(a)
    finish_step(s, s.schedule())
    b = req("b", 10)
    s.add(b)
    out = s.schedule()
    assert list(out.num_tokens.items()) == [("a", 1), ("b", 10)]


def test_chunked_prefill_splits_a_long_prompt() -> None:
    s = Scheduler(KVCacheManager(32, 4, False), 8, 5, True)
    a = req("a", 12)
    s.add(a)
    sizes = []
    for _ in range(3):
        out = s.schedule()
        sizes.append(out.num_tokens["a"])
        finish_step(s, out)
    assert sizes == [5, 5, 2]
    assert a.output_token_ids == [7]


def test_without_chunking_a_prompt_waits_for_a_full_budget() -> None:
    s = Scheduler(KVCacheManager(32, 4, False), 8, 8, False)
    s.add(req("a", 6))
    s.add(req("b", 6))
    out = s.schedule()
    assert list(out.num_tokens) == ["a"]


def test_preemption_by_recompute_when_blocks_run_out() -> None:
    s = Scheduler(KVCacheManager(4, 2, False), 8, 64, True)
    a, b = req("a", 4), req("b", 3)
    s.add(a)
    s.add(b)
    finish_step(s, s.schedule())  # a: 2 blocks (+1 token pending), b: 2 blocks
    out = s.schedule()  # a needs a 3rd block: b (admitted last) is preempted
    assert s.num_preemptions == 1 and out.dropped == ["b"]
    assert b.status is Status.PREEMPTED and b.num_computed_tokens == 0
    assert s.waiting[0] is b
    s.kv.check()


def test_max_num_seqs_limits_admission() -> None:
    s = Scheduler(KVCacheManager(32, 4, False), 2, 64, True)
    for k in "abc":
        s.add(req(k, 3))
    assert list(s.schedule().num_tokens) == ["a", "b"]


def test_prefix_hit_sets_num_cached_tokens() -> None:
    s = Scheduler(KVCacheManager(32, 4, True), 8, 64, True)
    a = req("a", 10)
    s.add(a)
    finish_step(s, s.schedule())
    b = req("b", 10)
    s.add(b)
    out = s.schedule()
    assert b.num_cached_tokens == 8 and out.num_tokens["b"] == 2


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 20), min_size=1, max_size=8),
    st.integers(3, 12),
    st.integers(2, 24),
    st.booleans(),
)
def test_random_workloads_finish_without_leaks(
    lengths: list[int], blocks: int, budget: int, caching: bool
) -> None:
    kv = KVCacheManager(blocks, 2, caching)
    s = Scheduler(kv, 4, budget, True)
    reqs = [req(f"r{i}", min(n, 2 * blocks - 4)) for i, n in enumerate(lengths)]
    for r in reqs:
        s.add(r)
    for _ in range(400):
        if not s.has_work():
            break
        out = s.schedule()
        assert out.total_tokens <= budget
        assert len(s.running) <= 4
        finish_step(s, out)
        for key in out.num_tokens:
            r = s.requests.get(key)
            if r is not None and len(r.output_token_ids) >= 3:
                s.finish(r, "length")
        kv.check()
    assert not s.has_work()
    assert kv.num_free == kv.num_blocks
