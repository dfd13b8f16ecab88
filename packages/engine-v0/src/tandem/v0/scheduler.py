"""Continuous-batching scheduler of engine v0.

Each step the scheduler picks the token work for one forward pass:

1. running sequences first, oldest first: a decode needs one new slot, a chunked
   prefill in progress needs its next chunk. When the block manager runs dry, the
   youngest running sequence is preempted (its blocks freed, its K/V to be recomputed
   later) until the older one fits;
2. then, if nothing was preempted this step, new work is admitted: preempted sequences
   before waiting ones, within ``max_num_seqs`` and the token budget
   ``max_num_batched_tokens`` (with chunked prefill a prompt may take several steps).

The batch is returned prefills first, then decodes (the layout of AttentionMetadata).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tandem.v0.block_manager import BlockManager
from tandem.v0.grouped_blocks import GroupedBlockManager
from tandem.v0.sequence import Sequence, SequenceStatus


@dataclass(slots=True)
class ScheduledSeq:
    seq: Sequence
    num_new_tokens: int  # this step's query length
    start: int  # position of the first new token (= num_computed_tokens when scheduled)
    completes: bool  # this step computes the sequence's last known token, so it samples
    num_drafts: int = 0  # speculative drafts fed after the known tokens (then verified)

    @property
    def is_decode(self) -> bool:
        return self.num_new_tokens == 1 and self.start > 0

    @classmethod
    def of(cls, seq: Sequence, num_new_tokens: int) -> ScheduledSeq:
        start = seq.num_computed_tokens
        drafts = max(0, start + num_new_tokens - seq.num_tokens)
        done = start + num_new_tokens - drafts == seq.num_tokens
        return cls(seq, num_new_tokens, start, done, drafts)


@dataclass(slots=True)
class SchedulerOutput:
    scheduled: list[ScheduledSeq] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

    @property
    def num_batched_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled


class Scheduler:
    def __init__(
        self,
        block_manager: BlockManager | GroupedBlockManager,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
        enable_chunked_prefill: bool = True,
    ) -> None:
        for name, value in (
            ("max_num_seqs", max_num_seqs),
            ("max_num_batched_tokens", max_num_batched_tokens),
            ("max_model_len", max_model_len),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if not enable_chunked_prefill and max_num_batched_tokens < max_model_len:
            raise ValueError(
                f"max_num_batched_tokens must be >= max_model_len={max_model_len} when "
                f"chunked prefill is off (a whole prompt runs in one step), "
                f"got {max_num_batched_tokens}"
            )
        self.block_manager = block_manager
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.chunked = bool(enable_chunked_prefill)
        self.waiting: deque[Sequence] = deque()
        self.preempted: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0
        self._arrivals = 0

    # admission ----------------------------------------------------------------------
    def check_fits(self, num_prompt_tokens: int, max_tokens: int) -> None:
        """Raise ValueError when a request of this size could never be scheduled: its
        KV blocks exceed the cache. The engine calls it once per request, before any
        sample is queued; ``add`` trusts it.

        The rest is already true of a checked request: the input processor cuts
        ``max_tokens`` to the room ``max_model_len`` leaves, and without chunked prefill
        the config keeps ``max_num_batched_tokens >= max_model_len``, so a recompute
        after preemption (a prefill of up to ``total - 1`` tokens) fits one step."""
        total = num_prompt_tokens + max_tokens
        assert total <= self.max_model_len, (total, self.max_model_len)
        bm = self.block_manager
        # a recompute after preemption computes up to total - 1 tokens in one step
        step = min(total, self.max_num_batched_tokens) if self.chunked else total
        need, have = bm.demand(total, step)
        if need > have:
            raise ValueError(
                f"request needs up to {total} tokens (prompt {num_prompt_tokens} + max_tokens "
                f"{max_tokens}) = {need} KV blocks of {bm.block_size}, but the KV cache has only "
                f"{have} blocks; lower max_tokens or raise num_kv_blocks"
            )

    def add(self, seq: Sequence) -> None:
        """Queue ``seq`` (of a request that passed :meth:`check_fits`)."""
        seq.arrival = self._arrivals
        self._arrivals += 1
        seq.status = SequenceStatus.WAITING
        self.waiting.append(seq)

    # queries ------------------------------------------------------------------------
    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.preempted or self.running)

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.preempted) + len(self.running)

    # scheduling ---------------------------------------------------------------------
    def _chunk(self, need: int, budget: int) -> int:
        if self.chunked:
            return min(need, budget)
        return need if need <= budget else 0

    def _fit_drafts(self, seq: Sequence, budget: int) -> int:
        """This step's tokens for running ``seq``: its uncomputed ones plus the drafts
        that fit the budget and the free blocks (drafts never cause a preemption)."""
        need = seq.num_uncomputed_tokens
        drafts = seq.draft_token_ids
        if drafts:
            del drafts[max(min(budget, need + len(drafts)) - need, 0) :]
            if drafts and not self.block_manager.can_allocate(seq, need + len(drafts)):
                drafts.clear()
        return self._chunk(need + len(drafts), budget)

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.reset_for_recompute()
        self.preempted.append(seq)
        out.preempted.append(seq)
        self.num_preemptions += 1

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        bm = self.block_manager
        budget = self.max_num_batched_tokens
        self.running.sort(key=lambda s: s.arrival)
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = self._fit_drafts(seq, budget)
            if n == 0:
                i += 1
                continue
            while not bm.can_allocate(seq, n):
                victim = self.running[-1]
                self._preempt(victim, out)
                if victim is seq:
                    break
            if seq.status is not SequenceStatus.RUNNING:
                break
            bm.allocate(seq, n)
            out.scheduled.append(ScheduledSeq.of(seq, n))
            budget -= n
            i += 1

        if not out.preempted:
            self.preempted = deque(sorted(self.preempted, key=lambda s: s.arrival))
            for queue in (self.preempted, self.waiting):
                while queue and len(self.running) < self.max_num_seqs and budget > 0:
                    seq = queue[0]
                    n = self._chunk(seq.num_uncomputed_tokens, budget)
                    if n == 0 or not bm.can_allocate(seq, n):
                        break
                    queue.popleft()
                    bm.allocate(seq, n)
                    seq.status = SequenceStatus.RUNNING
                    self.running.append(seq)
                    out.scheduled.append(ScheduledSeq.of(seq, n))
                    budget -= n
                if queue and queue is self.preempted:
                    break  # preempted work goes first: no new request overtakes it
        out.scheduled.sort(key=lambda s: s.is_decode)  # stable: prefills first
        return out

    def update(self, out: SchedulerOutput) -> None:
        """Record that the scheduled tokens were computed (their K/V are in the cache);
        with a sliding window, the blocks it left behind are freed."""
        for item in out.scheduled:
            # drafts count once verified (the engine moves this past the accepted ones)
            item.seq.num_computed_tokens = item.start + item.num_new_tokens - item.num_drafts
            self.block_manager.free_behind_window(item.seq)

    # leaving --------------------------------------------------------------------------
    def finish(self, seq: Sequence) -> None:
        """Remove a finished or aborted sequence from whichever queue holds it."""
        if seq.status is SequenceStatus.RUNNING:
            self.running.remove(seq)
            self.block_manager.free(seq)
        elif seq.status is SequenceStatus.WAITING:
            self.waiting.remove(seq)
        elif seq.status is SequenceStatus.PREEMPTED:
            self.preempted.remove(seq)
        seq.status = SequenceStatus.FINISHED
