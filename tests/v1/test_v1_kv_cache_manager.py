from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from v1_support import sample

from tandem.v1.core.kv_cache_manager import KVCacheManager
from tandem.v1.core.request import Request


def req(key: str, tokens: list[int]) -> Request:
    return sample(key, tokens)


def test_hit_reuses_blocks_and_keeps_last_token() -> None:
    kv = KVCacheManager(8, 4, True)
    a = req("a", list(range(12)))
    assert kv.allocate(a, 12)
    a.num_computed_tokens = 12
    kv.cache_full_blocks(a)
    b = req("b", list(range(12)))
    hit = kv.lookup(b)
    assert len(hit) == 2  # 12 tokens: the third block holds the last token, recomputed
    assert kv.allocate(b, 12 - 8, hit)
    assert kv.table("b")[:2] == kv.table("a")[:2]
    assert all(blk.ref == 2 for blk in hit)
    kv.check()


def test_verified_hit_rejects_different_tokens() -> None:
    kv = KVCacheManager(8, 4, True)
    a = req("a", [1, 2, 3, 4, 5, 6, 7, 8, 9])
    kv.allocate(a, 9)
    a.num_computed_tokens = 9
    kv.cache_full_blocks(a)
    # forge a collision: same hash key, different stored tokens
    blk = kv.cached[a.block_hashes[0]]
    blk.tokens = (0, 0, 0, 0)
    assert kv.lookup(req("b", [1, 2, 3, 4, 5, 6, 7, 8, 9])) == []


def test_lru_eviction_takes_least_recently_freed() -> None:
    kv = KVCacheManager(2, 2, True)
    a = req("a", [1, 2, 3])
    kv.allocate(a, 3)
    a.num_computed_tokens = 3
    kv.cache_full_blocks(a)
    kv.release(a)
    assert len(kv.cached) == 1 and kv.num_free == 2
    b = req("b", [9, 9, 9, 9])
    assert kv.allocate(b, 4)  # needs both blocks: the cached one is evicted
    assert kv.cached == {}
    kv.check()


def test_allocation_is_all_or_nothing_and_double_free_raises() -> None:
    kv = KVCacheManager(2, 2, False)
    a = req("a", [1, 2, 3, 4, 5])
    assert not kv.allocate(a, 5)
    assert kv.num_free == 2 and kv.table("a") == []
    b = req("b", [1])
    assert kv.allocate(b, 1)
    blocks = kv.tables["b"]
    kv.release(b)
    kv.tables["b"] = blocks
    with pytest.raises(RuntimeError, match="freed twice"):
        kv.release(b)


def test_bad_sizes() -> None:
    with pytest.raises(ValueError, match="num_blocks"):
        KVCacheManager(0, 4, True)
    with pytest.raises(ValueError, match="block_size"):
        KVCacheManager(4, 0, True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 9), st.booleans()), max_size=40))
def test_random_traffic_keeps_ref_counts_exact(ops: list[tuple[int, int, bool]]) -> None:
    kv = KVCacheManager(6, 2, True)
    live: dict[str, Request] = {}
    for n, (prefix, length, release) in enumerate(ops):
        key = f"r{n}"
        r = req(key, [prefix] * 2 + list(range(length)))
        hit = kv.lookup(r)
        cached = len(hit) * kv.block_size
        if kv.allocate(r, r.num_tokens - cached, hit):
            r.num_computed_tokens = r.num_tokens
            kv.cache_full_blocks(r)
            live[key] = r
        if release and live:
            kv.release(live.pop(next(iter(live))))
        kv.check()
        used = {b for t in kv.tables.values() for b in t}
        assert kv.num_free + len(used) == kv.num_blocks
    for r in live.values():
        kv.release(r)
    kv.check()
    assert kv.num_free == kv.num_blocks
