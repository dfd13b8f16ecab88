"""Engine v1's KV manager for a model that mixes local (sliding-window) and global layers:
two pools under one interface, the local one freed behind the window, allocation all or
nothing, and a prefix hit no longer than both pools hold."""

from __future__ import annotations

from v1_support import sample

from tandem.v1.core.grouped_kv import GroupedKVCacheManager, GroupHit
from tandem.v1.core.kv_cache_manager import KVCacheManager
from tandem.v1.core.request import Request


def grouped(full: int, local: int, caching: bool = True) -> GroupedKVCacheManager:
    return GroupedKVCacheManager(
        KVCacheManager(full, 4, caching), KVCacheManager(local, 4, caching, window=6)
    )


def computed(kv: GroupedKVCacheManager, r: Request, n: int) -> None:
    assert kv.allocate(r, n)
    r.num_computed_tokens += n
    kv.cache_full_blocks(r)
    kv.free_behind_window(r)


def test_the_local_pool_keeps_the_window_the_global_one_every_block() -> None:
    kv = grouped(16, 4)
    r = sample("a", list(range(1, 42)))
    for _ in range(10):
        computed(kv, r, 4)
    assert kv.table("a") == list(range(10))
    local = kv.local_table("a")
    assert local[:8] == [kv.local.null.id] * 8 and len(local) == 10
    assert kv.num_blocks == 20 and kv.local.num_free == 2 and kv.num_free == 8
    kv.check()
    kv.release(r)
    assert kv.num_free == 20
    kv.check()


def test_allocation_is_all_or_nothing() -> None:
    kv = grouped(16, 2)
    r = sample("a", list(range(1, 42)))
    assert not kv.allocate(r, 12)  # 3 local blocks, 2 in the pool
    assert kv.table("a") == [] and kv.local_table("a") == [] and kv.num_free == 18
    kv.check()


def publish(kv: GroupedKVCacheManager, key: str, tokens: list[int]) -> None:
    r = sample(key, tokens)
    for _ in range(0, len(tokens), 4):
        computed(kv, r, min(4, len(tokens) - r.num_computed_tokens))
    kv.release(r)


def test_a_hit_spans_both_pools() -> None:
    kv = grouped(16, 8)
    tokens = list(range(1, 26))  # 6 full blocks; hits of up to 24 tokens
    publish(kv, "a", tokens)
    hit = kv.lookup(sample("p", tokens))
    assert isinstance(hit, GroupHit) and len(hit) == len(hit.local) == 6
    # the query at 24 reads 19..24: local blocks 0..3 are behind its window
    assert hit.local[:4] == [kv.local.null] * 4
    b = sample("b", tokens)
    assert kv.allocate(b, 1, hit)
    b.num_computed_tokens = 24
    assert kv.table("b")[:6] == list(range(6))  # the first prompt's global blocks
    assert len(kv.local_table("b")) == 7
    kv.check()


def test_a_hit_is_as_short_as_the_local_pool_holds() -> None:
    kv = grouped(16, 8)
    tokens = list(range(1, 26))
    publish(kv, "a", tokens)
    # another prompt takes the local pool's free blocks, oldest first: the ones covering
    # the first prompt's end go; the global pool still holds the whole prompt
    publish(kv, "c", list(range(100, 125)))
    assert kv.full.lookup(sample("p", tokens)) != []
    assert kv.lookup(sample("p", tokens)) == []
    kv.check()


def test_without_prefix_caching_there_are_no_hits() -> None:
    kv = grouped(16, 8, caching=False)
    publish(kv, "a", list(range(1, 26)))
    assert kv.lookup(sample("p", list(range(1, 26)))) == []
