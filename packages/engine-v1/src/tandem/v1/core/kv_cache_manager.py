"""Paged KV blocks with prefix caching: chained block hashes, ref counts, LRU eviction.

A *full* block (``block_size`` tokens whose K/V is computed) gets a hash chained from
its parent's hash and its own tokens, so equal hashes mean equal prefixes. A hit is
verified against the stored parent hash and tokens before it is used, so a hash
collision can only cost a miss, never a wrong answer.

Blocks with ref count 0 sit in a free queue in the order they were freed; allocation
takes the least recently freed one first, dropping its cached hash at that moment.
A cached free block can be revived by a hit until then.

With a sliding window on every layer (``window``), a request's blocks that fall behind
its window go back to the free queue after each step (:mod:`tandem.core.kv.window`);
their table entries point at the null block from then on, so a long generation holds
the blocks of its window only. They stay in the prefix cache until evicted: a hit then
needs the blocks that cover the window before its first computed token, not the ones
behind it (their hashes are chained into the ones kept, which stand in for them).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from tandem.core.kv.window import blocks_behind
from tandem.v1.core.request import Request

_ROOT = 0x7A4D3E  # parent hash of a sequence's first block


@dataclass(slots=True, eq=False)
class Block:
    id: int
    ref: int = 0
    hash: int | None = None  # set while the block is in the prefix cache
    parent: int | None = None
    tokens: tuple[int, ...] | None = None


def chain_hash(parent: int, tokens: tuple[int, ...]) -> int:
    return hash((parent, tokens))


class KVCacheManager:
    """Owns every block and the block table of every running request."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool,
        window: int | None = None,
    ) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if window is not None and window < 1:
            raise ValueError(f"window must be >= 1 or None, got {window}")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.caching = enable_prefix_caching
        self.window = window
        self.null = Block(num_blocks, ref=1)  # what freed table entries point at; never free
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free: OrderedDict[int, Block] = OrderedDict((b.id, b) for b in self.blocks)
        self.cached: dict[int, Block] = {}
        self.tables: dict[str, list[Block]] = {}
        self.hits = 0
        self.queries = 0

    # -- queries ------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self.free)

    def table(self, key: str) -> list[int]:
        return [b.id for b in self.tables.get(key, ())]

    def local_table(self, key: str) -> list[int] | None:
        """None: one pool for every layer (:mod:`tandem.v1.core.grouped_kv` has two)."""
        return None

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # -- prefix cache -------------------------------------------------------------
    def update_hashes(self, req: Request) -> None:
        """Extend ``req.block_hashes`` over every full block of its known tokens."""
        bs = self.block_size
        tokens = req.all_token_ids
        while (len(req.block_hashes) + 1) * bs <= len(tokens):
            i = len(req.block_hashes)
            parent = req.block_hashes[-1] if i else _ROOT
            req.block_hashes.append(chain_hash(parent, tuple(tokens[i * bs : (i + 1) * bs])))

    def lookup(self, req: Request, most: int | None = None) -> list[Block]:
        """The longest verified cached prefix of ``req``, leaving >= 1 token to compute
        (and of at most ``most`` blocks); with a window, the blocks behind the prefix's
        window are the null block."""
        if not self.caching or req.wants_prompt_logprobs:
            return []
        self.update_hashes(req)
        bs = self.block_size
        tokens = req.all_token_ids
        limit = (len(tokens) - 1) // bs  # the last known token is always recomputed
        if most is not None:
            limit = min(limit, most)
        found: list[Block | None] = []
        for i, h in enumerate(req.block_hashes[:limit]):
            block = self.cached.get(h)
            parent = req.block_hashes[i - 1] if i else _ROOT
            chunk = tuple(tokens[i * bs : (i + 1) * bs])
            ok = block is not None and block.parent == parent and block.tokens == chunk
            if not ok and self.window is None:
                break
            found.append(block if ok else None)
        hit = self._longest_hit(found)
        self.queries += 1
        self.hits += bool(hit)
        return hit

    def _longest_hit(self, found: list[Block | None]) -> list[Block]:
        """The longest prefix whose blocks from its window on were all found (without a
        window every block was: ``found`` stops at the first miss)."""
        runs, run = [], 0  # runs[i]: found blocks in a row ending at block i
        for block in found:
            run = run + 1 if block is not None else 0
            runs.append(run)
        bs = self.block_size
        for k in range(len(found), 0, -1):
            behind = 0 if self.window is None else blocks_behind(k * bs, self.window, bs)
            if k - behind <= runs[k - 1]:
                kept = [b for b in found[behind:k] if b is not None]
                return [self.null] * behind + kept
        return []

    def cache_full_blocks(self, req: Request) -> None:
        """Publish the request's computed full blocks in the prefix cache."""
        if not self.caching:
            return
        self.update_hashes(req)
        bs = self.block_size
        table = self.tables.get(req.key, [])
        n_full = min(req.num_computed_tokens // bs, len(table), len(req.block_hashes))
        tokens = req.all_token_ids
        for i in range(n_full):
            block = table[i]
            if block.hash is not None or block is self.null:
                continue
            h = req.block_hashes[i]
            if h in self.cached:  # an equal block is already published
                continue
            block.hash = h
            block.parent = req.block_hashes[i - 1] if i else _ROOT
            block.tokens = tuple(tokens[i * bs : (i + 1) * bs])
            self.cached[h] = block

    # -- allocation ---------------------------------------------------------------
    def allocate(self, req: Request, num_new_tokens: int, hit: list[Block] | None = None) -> bool:
        """Make room for ``num_new_tokens`` more tokens of ``req`` (after ``hit`` blocks).

        All or nothing: returns False and changes nothing when blocks run short.
        """
        table = self.tables.get(req.key, [])
        hit = hit or []
        if hit and table:
            raise ValueError(f"request {req.key}: prefix hit given for a request with blocks")
        if not self.has_room(req, num_new_tokens, hit):
            return False
        total = req.num_computed_tokens + len(hit) * self.block_size + num_new_tokens
        need = self.blocks_needed(total) - len(table) - len(hit)
        live = [b for b in hit if b is not self.null]
        for block in live:
            if block.ref == 0:
                del self.free[block.id]
            block.ref += 1
        new = [self._take() for _ in range(max(need, 0))]
        self.tables[req.key] = table + hit + new
        return True

    def has_room(self, req: Request, num_new_tokens: int, hit: list[Block] | None = None) -> bool:
        """Whether :meth:`allocate` would succeed (changing nothing)."""
        hit = hit or []
        table = self.tables.get(req.key, [])
        total = req.num_computed_tokens + len(hit) * self.block_size + num_new_tokens
        need = self.blocks_needed(total) - len(table) - len(hit)
        revived = sum(1 for b in hit if b is not self.null and b.ref == 0)
        return need + revived <= self.num_free

    def _take(self) -> Block:
        _, block = self.free.popitem(last=False)
        if block.hash is not None:
            del self.cached[block.hash]
            block.hash = block.parent = block.tokens = None
        block.ref = 1
        return block

    def release(self, req: Request) -> None:
        """Drop the request's blocks; tail blocks go to the free queue first (evicted first)."""
        for block in reversed(self.tables.pop(req.key, [])):
            if block is not self.null:
                self._unref(block, req)

    def trim(self, req: Request, num_tokens: int) -> int:
        """Hand back the request's tail blocks past its first ``num_tokens`` tokens (the
        ones rejected drafts took: never full of computed K/V, so never cached)."""
        table = self.tables.get(req.key, [])
        keep = self.blocks_needed(num_tokens)
        tail = table[keep:]
        del table[keep:]
        for block in reversed(tail):
            self._unref(block, req)
        return len(tail)

    def free_behind_window(self, req: Request) -> int:
        """Hand back the request's blocks that no query from its next token on reads
        (nothing without a window); returns how many. Called after each step."""
        table = self.tables.get(req.key)
        if self.window is None or not table:
            return 0
        behind = min(
            blocks_behind(req.num_computed_tokens, self.window, self.block_size), len(table)
        )
        j, freed = behind - 1, 0
        while j >= 0 and table[j] is not self.null:  # the freed ones are a prefix
            self._unref(table[j], req)
            table[j] = self.null
            j, freed = j - 1, freed + 1
        return freed

    def _unref(self, block: Block, req: Request) -> None:
        if block.ref <= 0:
            raise RuntimeError(f"block {block.id} freed twice (request {req.key})")
        block.ref -= 1
        if block.ref == 0:
            self.free[block.id] = block

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash; only possible while no block is in use."""
        if self.num_free != self.num_blocks:
            return False
        for block in self.blocks:
            block.hash = block.parent = block.tokens = None
        self.cached.clear()
        return True

    def check(self) -> None:
        """Raise if the bookkeeping is inconsistent (used by tests and debug checks)."""
        refs = [0] * self.num_blocks
        for key, table in self.tables.items():
            live = [b for b in table if b is not self.null]
            if table[: len(table) - len(live)] != [self.null] * (len(table) - len(live)):
                raise AssertionError(f"request {key}: null entries after a live block")
            for block in live:
                refs[block.id] += 1
        for block in self.blocks:
            if block.ref != refs[block.id]:
                raise AssertionError(f"block {block.id}: ref {block.ref} != users {refs[block.id]}")
            if (block.ref == 0) != (block.id in self.free):
                raise AssertionError(f"block {block.id}: ref {block.ref}, in free queue mismatch")
            if block.hash is not None and self.cached.get(block.hash) is not block:
                raise AssertionError(f"block {block.id}: hash not in the cache map")
        for h, block in self.cached.items():
            if block.hash != h:
                raise AssertionError(f"cache entry {h} points at block {block.id}")
