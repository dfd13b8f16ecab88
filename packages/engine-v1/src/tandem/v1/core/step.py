"""One step of engine v1 as plain data: what the scheduler hands the worker, and back.

The worker never holds the KV cache manager nor a scheduler's live request: a
:class:`SchedulerOutput` says all it needs (the rows to compute, their blocks, what to
sample and how) and a :class:`StepOutput` carries all it found (tokens, logprobs, the
requests that failed). :meth:`tandem.v1.core.scheduler.Scheduler.update_from_output`
applies the result. This module is the one part of ``core`` the worker imports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from tandem.core.inputs.engine_request import SamplingSpec
from tandem.core.outputs.logprobs import TopEntry


@dataclass(slots=True)
class NewRequest:
    """A request the worker holds nothing of yet: first scheduled, or back after a
    preemption (its state was dropped with its blocks)."""

    key: str
    token_ids: list[int]  # every known token: the prompt, then the output so far
    num_prompt_tokens: int
    sampling: SamplingSpec
    seed: int  # this sample's seed


@dataclass(slots=True)
class PromptLogprobs:
    """Prompt positions to score this step: position p predicts prompt token p + 1."""

    first: int
    end: int  # one past the last position scored (may equal first: nothing to score)
    k: int  # top entries per position
    lead: bool  # the list starts with position 0's entry, empty (nothing predicts it)


@dataclass(slots=True)
class ScheduledRequest:
    key: str
    start: int  # computed tokens so far: the position of this step's first token
    num_tokens: int  # tokens computed this step
    # the request's KV blocks, in order; those behind a sliding window are the null block
    block_table: list[int]
    sample: bool  # this step computes the last known token, so one token is drawn
    counter: int  # index of the output token drawn (its output tokens so far)
    banned: list[int] = field(default_factory=list)  # masked for the draw (min_tokens)
    prompt_logprobs: PromptLogprobs | None = None
    # speculative decoding: drafts to verify, fed after the last known token (a decode
    # with drafts computes 1 + len(spec_tokens) tokens and draws at every one of them)
    spec_tokens: list[int] = field(default_factory=list)
    # output tokens the request may still gain from this step on; the worker proposes
    # drafts for the next step only within it (0: propose none for this request)
    draft_room: int = 0
    # the local layers' blocks where they keep a pool of their own (None: one pool)
    local_table: list[int] | None = None

    @property
    def is_decode(self) -> bool:
        return self.num_tokens == 1 and self.start > 0


@dataclass(slots=True)
class SchedulerOutput:
    scheduled: list[ScheduledRequest] = field(default_factory=list)  # scheduling order
    new: list[NewRequest] = field(default_factory=list)  # state the worker builds first
    dropped: list[str] = field(default_factory=list)  # keys whose state goes, before all

    @property
    def num_tokens(self) -> dict[str, int]:
        return {r.key: r.num_tokens for r in self.scheduled}

    @property
    def total_tokens(self) -> int:
        return sum(r.num_tokens for r in self.scheduled)


@dataclass(slots=True)
class StepOutput:
    """What one step found. A request draws one token per step, or, when it verified
    drafts, the accepted drafts and one more (1 .. len(spec_tokens) + 1 tokens)."""

    sampled: dict[str, list[int]] = field(default_factory=dict)  # key -> new tokens
    sampled_logprob: dict[str, list[float]] = field(default_factory=dict)  # raw logprob of each
    # per new token: its top entries (the sampled token first), when asked
    logprobs: dict[str, list[list[TopEntry]]] = field(default_factory=dict)
    prompt_logprobs: dict[str, list[list[TopEntry]]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # key -> why it failed this step
    ended: set[str] = field(default_factory=set)  # keys whose token completed their grammar
    drafts: dict[str, list[int]] = field(default_factory=dict)  # proposals for the next step


class Executor(Protocol):
    """The worker as the engine core drives it: one model runner in the core's process,
    or the ranks of a tensor-parallel group, each handed the same step."""

    num_kv_blocks: int
    attention_backend: str
    max_model_len: int  # the context the KV cache was sized for
    kv_source: str  # what sized the cache (for messages)
    num_local_kv_blocks: int  # the local layers' pool, where they have one (else 0)

    def execute(self, step: SchedulerOutput) -> StepOutput: ...

    def check_health(self) -> None:
        """Raise when a process of the executor has died (called while idle)."""

    def shutdown(self) -> None:
        """Stop whatever the executor started; idempotent."""
