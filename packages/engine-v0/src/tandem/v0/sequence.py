"""Request and sequence state of engine v0.

A request with ``n`` samples becomes ``n`` :class:`Sequence` objects that share the
prompt and are scheduled independently (each owns its KV blocks). A sequence's tokens
are ``prompt + output``; ``num_computed_tokens`` counts those whose K/V are in the
cache. Preemption by recompute simply resets that count to zero.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tandem.core.engine.stopping import SampleText
from tandem.core.inputs.engine_request import EngineRequest

if TYPE_CHECKING:
    from tandem.core.structured.state import GrammarState


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Sequence:
    """One sample of one request: the unit the scheduler and the block manager handle."""

    seq_id: int
    request_id: str
    index: int  # which of the request's n samples this is
    prompt_token_ids: list[int]
    max_tokens: int  # resolved: never None, never past max_model_len
    seed: int  # the seed this sample draws its tokens from
    arrival: int = 0  # admission order; lower runs first and is preempted last
    output_token_ids: list[int] = field(default_factory=list)
    status: SequenceStatus = SequenceStatus.WAITING
    num_computed_tokens: int = 0
    block_table: list[int] = field(default_factory=list)
    # the local layers' blocks where a model mixes windows (:mod:`tandem.v0.grouped_blocks`)
    local_table: list[int] = field(default_factory=list)
    num_preemptions: int = 0
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    cumulative_logprob: float = 0.0
    logprobs: list[dict[int, Any]] | None = None
    text: SampleText | None = None  # its text and stop strings (set by the output processor)
    grammar: GrammarState | None = None  # its structured-output state (None: unconstrained)
    # speculative decoding: tokens proposed to follow this sequence's tokens, checked by
    # the next step (and, from a draft model that sampled them, their probabilities)
    draft_token_ids: list[int] = field(default_factory=list)
    draft_probs: Any = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    @property
    def max_total_tokens(self) -> int:
        """The most tokens this sequence can ever hold (prompt plus max_tokens)."""
        return self.num_prompt_tokens + self.max_tokens

    def token_at(self, pos: int) -> int:
        p = len(self.prompt_token_ids)
        return self.prompt_token_ids[pos] if pos < p else self.output_token_ids[pos - p]

    def token_slice(self, start: int, stop: int) -> list[int]:
        p = len(self.prompt_token_ids)
        if stop <= p:
            return self.prompt_token_ids[start:stop]
        if start >= p:
            return self.output_token_ids[start - p : stop - p]
        return self.prompt_token_ids[start:] + self.output_token_ids[: stop - p]

    def reset_for_recompute(self) -> None:
        """Forget the cached K/V: the next schedule recomputes prompt and output."""
        self.num_computed_tokens = 0
        self.block_table = []
        self.local_table = []
        self.draft_token_ids = []
        self.num_preemptions += 1
        self.status = SequenceStatus.PREEMPTED


@dataclass(slots=True, eq=False)
class Request:
    """A user request: the checked ``EngineRequest``, its n sequences and its outputs."""

    request: EngineRequest
    seqs: list[Sequence]
    prompt_logprobs: list[dict[int, Any] | None] | None = None
    # prompt positions whose logprobs are computed (position 0 never has any)
    num_prompt_logprobs_done: int = 1
    error: str | None = None  # why it failed inside the engine (finish_reason "error")

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def prompt_token_ids(self) -> list[int]:
        return self.request.prompt_token_ids

    @property
    def is_finished(self) -> bool:
        return all(s.is_finished for s in self.seqs)

    @property
    def wants_prompt_logprobs(self) -> bool:
        return self.request.sampling.prompt_logprobs is not None and (
            self.num_prompt_logprobs_done < len(self.prompt_token_ids)
        )
