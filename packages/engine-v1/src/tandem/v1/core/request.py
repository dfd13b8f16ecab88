"""The engine core's view of one sequence being generated."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tandem.core.inputs.engine_request import SamplingSpec, StopRules
from tandem.v1.core.step import PromptLogprobs


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Request:
    """One sample of a client request (a request with ``n`` samples becomes ``n`` of these).

    ``num_computed_tokens`` counts the tokens whose K/V is in the cache; after a
    preemption it drops to 0 and everything known is recomputed.
    """

    key: str  # unique inside the core: f"{index}/{request_id}"
    request_id: str
    index: int
    prompt_token_ids: list[int]
    sampling: SamplingSpec
    stop: StopRules
    seed: int  # the seed of this sample (derived from the request's seed and index)
    arrival: int  # order of arrival, for FCFS
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_cached_tokens: int = -1  # set at the first scheduling (prefix-cache hit length)
    status: Status = Status.WAITING
    block_hashes: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    prompt_logprobs_sent: int = 0  # prompt positions whose logprobs were already emitted
    spec_tokens: list[int] = field(default_factory=list)  # drafts its next decode verifies

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    def token_at(self, pos: int) -> int:
        n = len(self.prompt_token_ids)
        return self.prompt_token_ids[pos] if pos < n else self.output_token_ids[pos - n]

    @property
    def wants_prompt_logprobs(self) -> bool:
        return self.sampling.prompt_logprobs is not None

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def take_prompt_logprobs(self, start: int, n: int) -> PromptLogprobs | None:
        """The prompt positions that computing ``n`` tokens from ``start`` scores, marked
        as sent: each is scored once, also when a preempted request computes it again."""
        k = self.sampling.prompt_logprobs
        sent = self.prompt_logprobs_sent
        if k is None or start + n <= sent or start >= self.num_prompt_tokens:
            return None
        first = max(start, sent - 1 if sent else 0)
        end = min(start + n, self.num_prompt_tokens - 1)  # >= first
        self.prompt_logprobs_sent = max(end + 1, 1)
        return PromptLogprobs(first, end, k, lead=not sent)
