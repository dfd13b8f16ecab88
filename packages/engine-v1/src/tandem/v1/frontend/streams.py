"""Client side of the result stream: Result deltas -> RequestOutputs of the asked kind.

The detokenizer sends each request's progress as a delta (new token ids, new text, new
logprobs of the samples that changed). What this side does depends on the request's
``OutputKind``:

* ``DELTA``: each Result becomes a RequestOutput as it is, holding the delta;
* ``FINAL_ONLY``: the detokenizer sent one Result, at the end, holding everything; it
  becomes the one RequestOutput;
* ``CUMULATIVE``: the deltas are added to what came before, and each step's output is
  the whole request so far, as engine v0's is.

Only the cumulative kind keeps anything between Results.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tandem.core.inputs.engine_request import EngineRequest, OutputKind
from tandem.core.outputs.logprobs import LogprobDict
from tandem.core.outputs.request_output import CompletionOutput, RequestMetrics, RequestOutput
from tandem.v1 import messages as m


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
    """What one request's outputs are built from; for a cumulative request, everything
    sent so far."""

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    kind: OutputKind
    metrics: RequestMetrics
    samples: list[_Sample]  # cumulative only
    prompt_logprobs: list[LogprobDict | None] | None = None  # cumulative only
    finished: bool = False
    num_cached_tokens: int = 0
    error: str | None = None

    @classmethod
    def start(cls, req: EngineRequest) -> RequestStream:
        kind = OutputKind(req.output_kind)
        n = req.n if kind is OutputKind.CUMULATIVE else 0
        return cls(
            req.request_id,
            req.prompt,
            list(req.prompt_token_ids),
            kind,
            RequestMetrics(arrival_time=time.monotonic()),
            [_Sample() for _ in range(n)],
        )

    def apply(self, res: m.Result) -> RequestOutput | None:
        """Take one Result (in the order they were sent): the RequestOutput it makes, or
        None for a cumulative request (its :meth:`output` is whole once a step is read)."""
        self.finished = res.finished
        self.num_cached_tokens = res.num_cached_tokens
        self.error = res.error
        now = time.monotonic()
        if self.metrics.first_token_time is None and any(c.new_token_ids for c in res.outputs):
            self.metrics.first_token_time = now
        if res.finished:
            self.metrics.finished_time = now
        if self.kind is not OutputKind.CUMULATIVE:
            return self._make(res.new_prompt_logprobs, [_delta(c) for c in res.outputs])
        if res.new_prompt_logprobs is not None:
            self.prompt_logprobs = self.prompt_logprobs or []
            self.prompt_logprobs += res.new_prompt_logprobs
        for c in res.outputs:
            s = self.samples[c.index]
            s.text += c.text
            s.token_ids += c.new_token_ids
            if c.new_logprobs is not None:
                s.logprobs = s.logprobs if s.logprobs is not None else []
                s.logprobs += c.new_logprobs
            s.cumulative = c.cumulative_logprob
            s.finish_reason, s.stop_reason = c.finish_reason, c.stop_reason
        return None

    def output(self) -> RequestOutput:
        """A cumulative request as it stands: lists copied, so later Results leave it as
        it is."""
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
        plp = list(self.prompt_logprobs) if self.prompt_logprobs is not None else None
        return self._make(plp, outputs)

    def _make(
        self, plp: list[LogprobDict | None] | None, outputs: list[CompletionOutput]
    ) -> RequestOutput:
        # every output shares the request's prompt ids (not copied per step)
        return RequestOutput(
            request_id=self.request_id,
            prompt=self.prompt,
            prompt_token_ids=self.prompt_token_ids,
            prompt_logprobs=plp,
            outputs=outputs,
            finished=self.finished,
            num_cached_tokens=self.num_cached_tokens,
            metrics=self.metrics,
            error=self.error,
        )


def _delta(c: m.Completion) -> CompletionOutput:
    return CompletionOutput(
        index=c.index,
        text=c.text,
        token_ids=c.new_token_ids,
        cumulative_logprob=c.cumulative_logprob,
        logprobs=c.new_logprobs,
        finish_reason=c.finish_reason,
        stop_reason=c.stop_reason,
    )
