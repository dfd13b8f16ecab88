"""One token budget per step: running requests first, then waiting ones.

Each step hands every scheduled request a number of new tokens to compute: a decode
gets one (plus the drafts it verifies, :mod:`~tandem.v1.core.spec_sched`), a prompt gets
as much as the budget allows (a chunk, when chunked prefill is on). When blocks run
out, the most recently admitted running request is preempted: its blocks are freed and
it goes back to the front of the waiting queue to be recomputed later.

A step is handed to the worker as plain data (:mod:`tandem.v1.core.step`): each
scheduled request's key, positions, block table and what its draw needs; the state of
a request the worker does not hold yet; the keys of requests that left (finished,
aborted, preempted), so the worker drops their rows before it lays out the step.
After the model ran, :meth:`Scheduler.update_from_output` retires the step: it counts
the computed tokens, appends each sampled token, applies the token stop rules
(:func:`tandem.core.engine.stopping.token_stop`), fails the requests the worker could not
serve, and turns the step into ``CoreOutput``s.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from tandem.core.outputs.logprobs import TopEntry
from tandem.v1 import messages as m
from tandem.v1.core import spec_sched as spec
from tandem.v1.core.grouped_kv import GroupedKVCacheManager
from tandem.v1.core.kv_cache_manager import KVCacheManager
from tandem.v1.core.request import Request, Status
from tandem.v1.core.step import NewRequest, ScheduledRequest, SchedulerOutput, StepOutput


class Scheduler:
    def __init__(
        self,
        kv: KVCacheManager | GroupedKVCacheManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        enable_chunked_prefill: bool,
        spec_k: int = 0,
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
        self.spec_k = spec_k  # drafts proposed per step (0: no speculative decoding)
        self.verified = spec.Verified()  # drafts verified and accepted so far
        self._dropped: list[str] = []
        self._placed: set[str] = set()  # keys whose state the worker holds

    # -- queue changes -------------------------------------------------------------
    def add(self, req: Request) -> None:
        assert req.key not in self.requests, req.key  # ids are unique at the front door
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
        self._drop(req)
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
            outs.append(_output(req, reason="abort"))
        return outs

    def has_work(self) -> bool:
        return bool(self.requests)

    # -- one step ------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.budget
        preempted = self.num_preemptions
        kept: list[Request] = []
        queue = list(self.running)
        while queue and budget > 0:
            req = queue.pop(0)
            n = self._tokens_for(req, budget)
            if n == 0:
                kept.append(req)
                continue
            drafts = spec.drafts_for(req, budget - n) if self.spec_k else []
            if drafts and not self.kv.allocate(req, n + len(drafts)):
                drafts = []  # drafts are dropped, never a reason to preempt
            while not drafts and not self.kv.allocate(req, n):
                victim = queue.pop() if queue else None
                if victim is None:
                    self._preempt(req)
                    break
                self._preempt(victim)
            else:
                kept.append(req)
                self._take(req, n, out, drafts)
                budget -= n + len(drafts)
        kept.extend(queue)
        self.running = kept

        if self.num_preemptions == preempted:
            budget = self._admit(budget, out)
        if out.scheduled:
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

    def _take(self, req: Request, n: int, out: SchedulerOutput, drafts: Sequence[int] = ()) -> None:
        """Describe ``n`` tokens of ``req`` and the ``drafts`` after them for the worker
        (their blocks are allocated)."""
        if req.key not in self._placed:
            self._placed.add(req.key)
            out.new.append(
                NewRequest(
                    req.key, req.all_token_ids, req.num_prompt_tokens, req.sampling, req.seed
                )
            )
        start = req.num_computed_tokens
        counter = len(req.output_token_ids)
        sample = start + n == req.num_tokens
        banned = req.stop.banned if sample and counter < req.stop.min_tokens else []
        table = self.kv.table(req.key)
        row = ScheduledRequest(req.key, start, n + len(drafts), table, sample, counter, banned)
        row.prompt_logprobs = req.take_prompt_logprobs(start, n)
        row.spec_tokens = list(drafts)
        row.draft_room = spec.draft_room(req, self.spec_k) if sample else 0
        row.local_table = self.kv.local_table(req.key)
        out.scheduled.append(row)

    def _preempt(self, req: Request) -> None:
        self.kv.release(req)
        req.num_computed_tokens = 0
        req.spec_tokens = []
        req.status = Status.PREEMPTED
        self.waiting.appendleft(req)
        self._drop(req)
        self.num_preemptions += 1

    def _drop(self, req: Request) -> None:
        """The worker lets go of the request's state before the next step it runs."""
        if req.key in self._placed:
            self._placed.discard(req.key)
            self._dropped.append(req.key)

    # -- after the model ran -------------------------------------------------------
    def update_from_output(self, step: SchedulerOutput, result: StepOutput) -> list[m.CoreOutput]:
        """Retire a step: computed tokens counted (rolled back over rejected drafts),
        sampled tokens appended one by one with the stop rules applied, the requests the
        worker failed finished with ``"error"``."""
        outs = []
        for row in step.scheduled:
            req = self.requests.get(row.key)
            if req is None:
                continue
            error = result.failed.get(row.key)
            if error is not None:
                self.finish(req, "error")
                outs.append(_output(req, reason="error", error=error))
                continue
            req.num_computed_tokens += row.num_tokens
            toks = result.sampled.get(row.key, [])
            if row.spec_tokens and toks:
                self.verified.roll_back(req, len(row.spec_tokens), len(toks) - 1)
            new, (reason, stop) = spec.accept(req, toks)  # the token stop rules, in order
            self.kv.cache_full_blocks(req)  # newly full blocks join the prefix cache
            self.kv.free_behind_window(req)  # then those behind a sliding window go
            plp = result.prompt_logprobs.get(row.key)
            if not new:
                if plp is not None:
                    outs.append(_output(req, plp=plp))
                continue
            if reason is None and row.key in result.ended:  # its grammar allows nothing more
                reason = "stop"
            tops = result.logprobs.get(row.key, [])[: len(new)] or None
            lps = result.sampled_logprob[row.key][: len(new)]
            outs.append(_output(req, new, lps, tops, plp, reason, stop))
            if reason is not None:
                self.finish(req, reason, stop)
            elif self.spec_k:
                req.spec_tokens = result.drafts.get(row.key, [])
                self.kv.trim(req, req.num_tokens)  # blocks only rejected drafts needed go
        return outs


def _output(
    req: Request,
    new: list[int] | None = None,
    lps: list[float] | None = None,
    tops: list[list[TopEntry]] | None = None,
    plp: list[list[TopEntry]] | None = None,
    reason: str | None = None,
    stop: int | str | None = None,
    error: str | None = None,
) -> m.CoreOutput:
    return m.CoreOutput(
        req.request_id,
        req.index,
        new or [],
        new_logprobs=lps or [],
        logprobs=tops,
        prompt_logprobs=plp,
        finish_reason=reason,
        stop_reason=stop,
        num_cached_tokens=max(req.num_cached_tokens, 0),
        error=error,
    )
