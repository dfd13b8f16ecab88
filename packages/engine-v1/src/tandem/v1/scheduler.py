"""One token budget per step: running requests first, then waiting ones.

Each step hands every scheduled request a number of new tokens to compute: a decode
gets one, a prompt (or a recompute after preemption) gets as much as the budget
allows (a chunk, when chunked prefill is on). When blocks run out, the most recently
admitted running request is preempted: its blocks are freed and it goes back to the
front of the waiting queue to be recomputed later.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tandem.v1.kv_cache_manager import KVCacheManager
from tandem.v1.request import Request, Status


@dataclass(slots=True)
class SchedulerOutput:
    # request key -> number of tokens computed for it this step, in scheduling order
    num_tokens: dict[str, int] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)

    @property
    def total_tokens(self) -> int:
        return sum(self.num_tokens.values())


class Scheduler:
    def __init__(
        self,
        kv: KVCacheManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        enable_chunked_prefill: bool,
    ) -> None:
        if max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {max_num_seqs}")
        if max_num_batched_tokens < 1:
            raise ValueError(f"max_num_batched_tokens must be >= 1, got {max_num_batched_tokens}")
        self.kv = kv
        self.max_num_seqs = max_num_seqs
        self.budget = max_num_batched_tokens
        self.chunked = enable_chunked_prefill
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.num_preemptions = 0

    # -- queue changes -------------------------------------------------------------
    def add(self, req: Request) -> None:
        if req.key in self.requests:
            raise ValueError(f"request {req.key!r} is already in the scheduler")
        self.requests[req.key] = req
        self.waiting.append(req)

    def finish(self, req: Request, reason: str, stop_reason: int | str | None = None) -> None:
        """Remove a request (finished or aborted) and free its blocks."""
        if self.requests.pop(req.key, None) is None:
            return
        if req.status is Status.RUNNING:
            self.running.remove(req)
        else:
            self.waiting.remove(req)
        self.kv.release(req)
        req.status = Status.FINISHED
        req.finish_reason = reason
        req.stop_reason = stop_reason

    def has_work(self) -> bool:
        return bool(self.requests)

    # -- one step ------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.budget
        kept: list[Request] = []
        queue = list(self.running)
        while queue and budget > 0:
            req = queue.pop(0)
            n = self._tokens_for(req, budget)
            if n == 0:
                kept.append(req)
                continue
            while not self.kv.allocate(req, n):
                victim = queue.pop() if queue else None
                if victim is None:
                    self._preempt(req, out)
                    break
                self._preempt(victim, out)
            else:
                kept.append(req)
                self._take(req, n, out)
                budget -= n
        kept.extend(queue)
        self.running = kept

        if not out.preempted:
            budget = self._admit(budget, out)
        return out

    def _admit(self, budget: int, out: SchedulerOutput) -> int:
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = self.waiting[0]
            hit = self.kv.lookup(req) if req.num_computed_tokens == 0 else []
            cached = len(hit) * self.kv.block_size
            remaining = req.num_tokens - cached
            if not self.chunked and remaining > budget:
                break
            n = min(remaining, budget)
            if not self.kv.allocate(req, n, hit):
                break
            self.waiting.popleft()
            req.num_computed_tokens = cached
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = cached
            req.status = Status.RUNNING
            self.running.append(req)
            self._take(req, n, out)
            budget -= n
        return budget

    def _tokens_for(self, req: Request, budget: int) -> int:
        remaining = req.num_tokens - req.num_computed_tokens
        if remaining > budget and not self.chunked:
            return 0
        return min(remaining, budget)

    def _take(self, req: Request, n: int, out: SchedulerOutput) -> None:
        out.num_tokens[req.key] = n
        out.requests.append(req)

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        self.kv.release(req)
        req.num_computed_tokens = 0
        req.status = Status.PREEMPTED
        self.waiting.appendleft(req)
        out.preempted.append(req)
        self.num_preemptions += 1

    # -- after the model ran -------------------------------------------------------
    def advance(self, out: SchedulerOutput) -> None:
        """Count this step's tokens as computed and publish newly full blocks."""
        for req in out.requests:
            if req.status is not Status.RUNNING:
                continue
            req.num_computed_tokens += out.num_tokens[req.key]
            self.kv.cache_full_blocks(req)
