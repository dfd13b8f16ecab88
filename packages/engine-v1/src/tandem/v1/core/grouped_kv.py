"""KV blocks of a model whose layers mix a sliding window and the whole sequence.

Gemma 2 and 3 alternate local layers (a query sees its last ``window`` keys) with global
ones. Each kind has its own :class:`KVCacheManager`: its own pool, a table per request
and its own prefix cache under the same block hashes. The global manager keeps every
block; the local one hands back the blocks behind the window after each step, so a long
sequence costs what its global layers need. Allocation is all or nothing over both; a
prefix hit is the longest prefix both managers hold (the local one needs only the blocks
that cover the window before the hit's end).
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.v1.core.kv_cache_manager import Block, KVCacheManager
from tandem.v1.core.request import Request


@dataclass(slots=True)
class GroupHit:
    """A prefix hit in both pools: the same number of blocks, the local ones behind the
    hit's window being the null block."""

    full: list[Block]
    local: list[Block]

    def __len__(self) -> int:
        return len(self.full)


class GroupedKVCacheManager:
    """The global layers' manager and the local layers' one, with the interface of one
    :class:`KVCacheManager` (counts are their sums)."""

    def __init__(self, full: KVCacheManager, local: KVCacheManager) -> None:
        if full.window is not None or local.window is None:
            raise ValueError("GroupedKVCacheManager needs a full pool and a windowed one")
        if full.block_size != local.block_size or full.caching != local.caching:
            raise ValueError("both pools must have one block size and one prefix-cache setting")
        self.full = full
        self.local = local
        self.block_size = full.block_size
        self.caching = full.caching
        self.hits = 0
        self.queries = 0

    @property
    def num_blocks(self) -> int:
        return self.full.num_blocks + self.local.num_blocks

    @property
    def num_free(self) -> int:
        return self.full.num_free + self.local.num_free

    def table(self, key: str) -> list[int]:
        """The global layers' blocks of request ``key``."""
        return self.full.table(key)

    def local_table(self, key: str) -> list[int]:
        """The local layers' blocks of request ``key`` (the null block behind the window)."""
        return self.local.table(key)

    def lookup(self, req: Request) -> GroupHit | list[Block]:
        full = self.full.lookup(req)
        local = self.local.lookup(req, most=len(full)) if full else []
        self.queries += 1
        if not local:
            return []
        self.hits += 1
        return GroupHit(full[: len(local)], local)

    def allocate(
        self, req: Request, num_new_tokens: int, hit: GroupHit | list[Block] | None = None
    ) -> bool:
        full, local = (hit.full, hit.local) if isinstance(hit, GroupHit) else ([], [])
        if not (
            self.full.has_room(req, num_new_tokens, full)
            and self.local.has_room(req, num_new_tokens, local)
        ):
            return False
        done = self.full.allocate(req, num_new_tokens, full)
        done = self.local.allocate(req, num_new_tokens, local) and done
        if not done:
            raise RuntimeError(f"request {req.key}: a pool refused blocks it said it had")
        return True

    def release(self, req: Request) -> None:
        self.full.release(req)
        self.local.release(req)

    def trim(self, req: Request, num_tokens: int) -> int:
        return self.full.trim(req, num_tokens) + self.local.trim(req, num_tokens)

    def free_behind_window(self, req: Request) -> int:
        return self.local.free_behind_window(req)

    def cache_full_blocks(self, req: Request) -> None:
        self.full.cache_full_blocks(req)
        self.local.cache_full_blocks(req)

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash in both pools; only while no block is in use."""
        if self.num_free != self.num_blocks:
            return False
        return self.full.reset_prefix_cache() and self.local.reset_prefix_cache()

    def check(self) -> None:
        self.full.check()
        self.local.check()
