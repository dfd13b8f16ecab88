"""Client side of the result stream: Result deltas -> cumulative RequestOutputs.

The detokenizer sends each request's progress as a delta (new token ids, new text,
new logprobs); this keeps what came before, together with the prompt the client sent,
so a step's :class:`~tandem.core.outputs.RequestOutput` is whole, as engine v0's is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tandem.core.inputs import EngineRequest
from tandem.core.logprobs import LogprobDict
from tandem.core.outputs import CompletionOutput, RequestMetrics, RequestOutput
from tandem.v1.proc import messages as m


@dataclass(slots=True, eq=False)
class _Sample:
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[LogprobDict] | None = None
    cumulative: float | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass(slots=True, eq=False)
class RequestStream:
    """Everything sent so far about one request."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    samples: list[_Sample]
    metrics: RequestMetrics
    prompt_logprobs: list[LogprobDict | None] | None = None
    finished: bool = False
    num_cached_tokens: int = 0

    @classmethod
    def start(cls, req: EngineRequest) -> RequestStream:
        return cls(
            req.request_id,
            req.prompt,
            list(req.prompt_token_ids),
            [_Sample() for _ in range(req.n)],
            RequestMetrics(arrival_time=time.monotonic()),
        )

    def apply(self, res: m.Result) -> None:
        """Add one Result delta (in the order they were sent)."""
        if res.new_prompt_logprobs is not None:
            self.prompt_logprobs = self.prompt_logprobs or []
            self.prompt_logprobs += res.new_prompt_logprobs
        for c in res.outputs:
            s = self.samples[c.index]
            s.text = s.text[: c.text_from] + c.text
            s.token_ids += c.new_token_ids
            if c.new_logprobs is not None:
                s.logprobs = s.logprobs if s.logprobs is not None else []
                s.logprobs += c.new_logprobs
            s.cumulative = c.cumulative_logprob
            s.finish_reason, s.stop_reason = c.finish_reason, c.stop_reason
        self.finished = res.finished
        self.num_cached_tokens = res.num_cached_tokens
        now = time.monotonic()
        if self.metrics.first_token_time is None and any(s.token_ids for s in self.samples):
            self.metrics.first_token_time = now
        if res.finished:
            self.metrics.finished_time = now

    def output(self) -> RequestOutput:
        """The request as it stands: lists copied, so later deltas leave it unchanged."""
        outputs = [
            CompletionOutput(
                index=i,
                text=s.text,
                token_ids=list(s.token_ids),
                cumulative_logprob=s.cumulative,
                logprobs=list(s.logprobs) if s.logprobs is not None else None,
                finish_reason=s.finish_reason,
                stop_reason=s.stop_reason,
            )
            for i, s in enumerate(self.samples)
        ]
        return RequestOutput(
            request_id=self.request_id,
            prompt=self.prompt,
            prompt_token_ids=list(self.prompt_token_ids),
            prompt_logprobs=list(self.prompt_logprobs)
            if self.prompt_logprobs is not None
            else None,
            outputs=outputs,
            finished=self.finished,
            num_cached_tokens=self.num_cached_tokens,
            metrics=self.metrics,
        )
