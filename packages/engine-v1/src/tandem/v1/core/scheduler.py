"""One token budget per step: running requests first, then waiting ones.

Each step hands every scheduled request a number of new tokens to compute: a decode
gets one, a prompt (or a recompute after preemption) gets as much as the budget
allows (a chunk, when chunked prefill is on). When blocks run out, the most recently
admitted running request is preempted: its blocks are freed and it goes back to the
front of the waiting queue to be recomputed later.

After the model ran, :meth:`Scheduler.update_from_output` retires what it scheduled: it
counts the computed tokens, appends each sampled token, applies the token stop rules
(:func:`tandem.core.stopping.token_stop`) and turns the step into ``CoreOutput``s. Keys
of requests that left (finished, aborted, preempted) travel with the next step's
``SchedulerOutput``, so the worker drops their rows before it lays out that step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tandem.core.stopping import token_stop
from tandem.v1.core.kv_cache_manager import KVCacheManager
from tandem.v1.core.request import Request, Status
from tandem.v1.proc import messages as m

if TYPE_CHECKING:
    from tandem.v1.worker.model_runner import StepResult


@dataclass(slots=True)
class SchedulerOutput:
    # request key -> number of tokens computed for it this step, in scheduling order
    num_tokens: dict[str, int] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # keys whose rows the worker must drop

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
        self.samples: dict[str, list[Request]] = {}  # request id -> its n samples
        self.num_preemptions = 0
        self.num_cached_finished = 0  # prefix-cache hit tokens of samples that left
        self._dropped: list[str] = []

    # -- queue changes -------------------------------------------------------------
    def add(self, req: Request) -> None:
        if req.key in self.requests:
            raise ValueError(f"request {req.key!r} is already in the scheduler")
        self.requests[req.key] = req
        self.samples.setdefault(req.request_id, []).append(req)
        self.waiting.append(req)

    def finish(self, req: Request, reason: str, stop_reason: int | str | None = None) -> None:
        """Remove a request (finished or aborted) and free its blocks."""
        if self.requests.pop(req.key, None) is None:
            return
        self.num_cached_finished += max(req.num_cached_tokens, 0)
        if req.status is Status.RUNNING:
            self.running.remove(req)
        else:
            self.waiting.remove(req)
        self.kv.release(req)
        req.status = Status.FINISHED
        req.finish_reason = reason
        req.stop_reason = stop_reason
        self._dropped.append(req.key)
        if all(r.is_finished for r in self.samples.get(req.request_id, ())):
            self.samples.pop(req.request_id, None)

    def abort(
        self, request_ids: list[str], samples: list[tuple[str, int]] = ()
    ) -> list[m.CoreOutput]:
        """Finish whole requests and single samples; an output for each that was live."""
        targets = [r for rid in request_ids for r in self.samples.get(rid, ())]
        for rid, index in samples:
            targets += [r for r in self.samples.get(rid, ()) if r.index == index]
        outs = []
        for req in targets:
            if req.is_finished:
                continue
            self.finish(req, "abort")
            outs.append(
                m.CoreOutput(
                    req.request_id,
                    req.index,
                    [],
                    finish_reason="abort",
                    num_cached_tokens=max(req.num_cached_tokens, 0),
                )
            )
        return outs

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
        if out.requests:
            out.dropped, self._dropped = self._dropped, []
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
        self._dropped.append(req.key)
        self.num_preemptions += 1

    # -- after the model ran -------------------------------------------------------
    def update_from_output(self, out: SchedulerOutput, result: StepResult) -> list[m.CoreOutput]:
        """Retire a step: computed tokens counted, sampled tokens appended, stops applied."""
        for req in out.requests:
            if req.status is Status.RUNNING:
                req.num_computed_tokens += out.num_tokens[req.key]
                self.kv.cache_full_blocks(req)  # newly full blocks join the prefix cache
        outs = []
        for req in out.requests:
            tok = result.sampled.get(req.key)
            plp = result.prompt_logprobs.get(req.key)
            if tok is None and plp is None:
                continue
            verdict = None
            if tok is not None:
                req.output_token_ids.append(tok)
                verdict = token_stop(req.stop, tok, len(req.output_token_ids))
            lps = result.logprobs.get(req.key)
            reason, stop_reason = verdict if verdict is not None else (None, None)
            outs.append(
                m.CoreOutput(
                    req.request_id,
                    req.index,
                    [tok] if tok is not None else [],
                    new_logprobs=[result.sampled_logprob[req.key]] if tok is not None else [],
                    logprobs=[lps] if lps is not None else None,
                    prompt_logprobs=plp,
                    finish_reason=reason,
                    stop_reason=stop_reason,
                    num_cached_tokens=max(req.num_cached_tokens, 0),
                )
            )
            if reason is not None:
                self.finish(req, reason, stop_reason)
        return outs
