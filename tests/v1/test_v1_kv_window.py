"""Engine v1's KV manager with a sliding window: blocks behind the window are freed after
each step, freed table entries are the null block, and a prefix hit needs the blocks of
its window only."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from v1_support import sample

from tandem.core.kv.window import blocks_behind, peak_blocks
from tandem.v1.core.kv_cache_manager import KVCacheManager
from tandem.v1.core.request import Request
from tandem.v1.core.scheduler import Scheduler
from tandem.v1.core.step import StepOutput


def computed(kv: KVCacheManager, r: Request, n: int) -> None:
    """Allocate and compute ``n`` more tokens of ``r``, as a step does."""
    assert kv.allocate(r, n)
    r.num_computed_tokens += n
    kv.cache_full_blocks(r)
    kv.free_behind_window(r)


def test_blocks_behind_the_window_go_back_and_point_at_null() -> None:
    kv = KVCacheManager(16, 4, False, window=6)
    r = sample("a", list(range(40)))
    computed(kv, r, 12)  # next query at 12 reads 7..12: block 0 (0..3) is behind
    assert kv.table("a")[0] == kv.null.id == 16
    assert kv.num_free == 16 - 2
    computed(kv, r, 1)  # 13 reads 8..13: block 1 (4..7) behind too
    assert kv.table("a")[:2] == [16, 16] and kv.num_free == 16 - 2
    kv.check()
    kv.release(r)
    assert kv.num_free == 16
    kv.check()


def test_without_a_window_nothing_is_freed_early() -> None:
    kv = KVCacheManager(16, 4, False)
    r = sample("a", list(range(40)))
    computed(kv, r, 32)
    assert kv.num_free == 8 and kv.null.id not in kv.table("a")


def publish(kv: KVCacheManager, key: str, tokens: list[int]) -> Request:
    """A request that computed ``tokens`` in 4-token steps and left (its blocks cached)."""
    r = sample(key, tokens)
    for _ in range(0, len(tokens), 4):
        computed(kv, r, min(4, len(tokens) - r.num_computed_tokens))
    kv.release(r)
    return r


def test_a_hit_needs_only_the_blocks_of_its_window() -> None:
    kv = KVCacheManager(12, 4, True, window=6)
    tokens = list(range(1, 26))  # 25 tokens: 6 full blocks, hits of up to 24 tokens
    publish(kv, "a", tokens)
    probe = sample("p", tokens)
    kv.update_hashes(probe)
    for h in probe.block_hashes[:3]:  # the prefix's first three blocks are evicted
        block = kv.cached.pop(h)
        block.hash = block.parent = block.tokens = None
    hit = kv.lookup(sample("b", tokens))
    # 24 tokens: the next query (24) reads 19..24, so blocks 4 and 5 must be cached
    assert len(hit) == 6 and hit[:4] == [kv.null] * 4
    assert [b.hash for b in hit[4:]] == probe.block_hashes[4:6]
    b = sample("b", tokens)
    assert kv.allocate(b, 1, kv.lookup(b))
    kv.check()


def test_a_missing_block_inside_the_window_shortens_the_hit() -> None:
    kv = KVCacheManager(12, 4, True, window=6)
    tokens = list(range(1, 26))
    publish(kv, "a", tokens)
    probe = sample("p", tokens)
    kv.update_hashes(probe)
    kv.cached.pop(probe.block_hashes[4]).hash = None  # block 4 (16..19) evicted
    hit = kv.lookup(sample("b", tokens))
    # 24 needs block 4; 20 (reads 15..20) needs blocks 3, 4; 16 (reads 11..16) needs 2, 3
    assert len(hit) == 4 and hit[:2] == [kv.null] * 2
    kv.check()


def test_scheduler_frees_during_chunked_prefill_and_decode() -> None:
    window, bs = 8, 4
    kv = KVCacheManager(10, bs, True, window)
    s = Scheduler(kv, 4, 8, True)
    r = sample("a", list(range(1, 30)), max_tokens=60, ignore_eos=True)
    s.add(r)
    steps = 0
    while s.has_work():
        out = s.schedule()
        held = kv.num_blocks - kv.num_free
        assert held <= peak_blocks(window, 8, bs)
        done = [row.key for row in out.scheduled if row.sample]
        s.update_from_output(out, StepOutput({k: [7] for k in done}, {k: [-1.0] for k in done}))
        if r.num_computed_tokens and not r.is_finished:
            assert kv.num_blocks - kv.num_free <= peak_blocks(window, 1, bs)
            live = [b for b in kv.table("a") if b != kv.null.id]
            assert len(kv.table("a")) - len(live) == min(
                blocks_behind(r.num_computed_tokens, window, bs), len(kv.table("a"))
            )
        kv.check()
        steps += 1
    assert len(r.output_token_ids) == 60 and kv.num_free == kv.num_blocks
    assert steps == 4 + 59  # 29 prompt tokens in chunks of 8, then one token a step


@settings(max_examples=80, deadline=None)
@given(
    window=st.integers(1, 13),
    block_size=st.sampled_from([1, 2, 4]),
    ops=st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 30), st.integers(1, 6), st.booleans()),
        max_size=25,
    ),
)
def test_random_traffic_holds_only_the_windows(
    window: int, block_size: int, ops: list[tuple[int, int, int, bool]]
) -> None:
    """Requests sharing prefixes, computed in random steps with hits and evictions: the
    bookkeeping stays exact, each table's null entries are exactly the blocks behind its
    window, and a running request holds at most a window and a step of blocks."""
    kv = KVCacheManager(24, block_size, True, window)
    live: list[tuple[Request, int]] = []
    for n, (prefix, length, step, leave) in enumerate(ops):
        r = sample(f"r{n}", [prefix] * 5 + list(range(length)))
        hit = kv.lookup(r)
        cached = len(hit) * block_size
        if kv.allocate(r, min(step, r.num_tokens - cached), hit):
            r.num_computed_tokens = cached + min(step, r.num_tokens - cached)
            kv.cache_full_blocks(r)
            kv.free_behind_window(r)
            live.append((r, step))
        for other, size in live:  # every live request advances one step
            todo = min(size, other.num_tokens - other.num_computed_tokens)
            if todo and kv.allocate(other, todo):
                other.num_computed_tokens += todo
                kv.cache_full_blocks(other)
                kv.free_behind_window(other)
        for other, size in live:
            table = kv.table(other.key)
            behind = min(blocks_behind(other.num_computed_tokens, window, block_size), len(table))
            assert table[:behind] == [kv.null.id] * behind
            assert kv.null.id not in table[behind:]
            assert len(table) - behind <= peak_blocks(window, size, block_size)
        if leave and live:
            kv.release(live.pop(0)[0])
        kv.check()
        used = {b for t in kv.tables.values() for b in t if b is not kv.null}
        assert kv.num_free + len(used) == kv.num_blocks
    for r, _ in live:
        kv.release(r)
    kv.check()
    assert kv.num_free == kv.num_blocks
