"""Turning sampled tokens into text, stop decisions and ``RequestOutput``s.

The stop rules and the text of a sample are core's (:mod:`tandem.core.stopping`), the
same code engine v1 runs in its core and detokenizer processes; the logprob shape is
core's too (:mod:`tandem.core.logprobs`).
"""

from __future__ import annotations

import time
from typing import Any

from tandem.core.logprobs import LogprobDict, TopEntry, entry
from tandem.core.outputs import CompletionOutput, RequestMetrics, RequestOutput
from tandem.core.stopping import SampleText, token_stop
from tandem.v0.sampler import SampleResult
from tandem.v0.sequence import Request, Sequence


class OutputProcessor:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.metrics: dict[str, RequestMetrics] = {}

    def start(self, req: Request) -> None:
        r = req.request
        for seq in req.seqs:
            seq.text = SampleText(self.tokenizer, r.prompt_token_ids, r.stop, r.skip_special_tokens)
            if r.sampling.logprobs is not None:
                seq.logprobs = []
        self.metrics[req.request_id] = RequestMetrics(arrival_time=time.monotonic())

    def drop(self, req: Request) -> None:
        self.metrics.pop(req.request_id, None)

    def mark_scheduled(self, req: Request) -> None:
        m = self.metrics.get(req.request_id)
        if m is not None and m.first_scheduled_time is None:
            m.first_scheduled_time = time.monotonic()

    def _decoded(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

    def logprob_entry(self, tops: list[TopEntry]) -> LogprobDict:
        return entry(tops, self._decoded)

    def append(self, req: Request, seq: Sequence, sample: SampleResult) -> bool:
        """Record one sampled token of ``seq``; True when it finished the sequence.

        The caller removes a finished sequence from the scheduler.
        """
        tok = sample.token_id
        seq.output_token_ids.append(tok)
        seq.cumulative_logprob += sample.logprob
        if seq.logprobs is not None and sample.tops is not None:
            seq.logprobs.append(self.logprob_entry(sample.tops))
        m = self.metrics.get(req.request_id)
        if m is not None and m.first_token_time is None:
            m.first_token_time = time.monotonic()
        verdict = token_stop(req.request.stop, tok, seq.num_output_tokens)
        assert seq.text is not None
        stop = seq.text.add(tok, verdict[0] if verdict is not None else None)
        if stop is not None:
            verdict = ("stop", stop)
        if verdict is None:
            return False
        seq.finish_reason, seq.stop_reason = verdict
        return True

    def make_output(self, req: Request) -> RequestOutput:
        """The request's cumulative output so far (all n completions)."""
        finished = req.is_finished
        m = self.metrics.get(req.request_id)
        if finished and m is not None and m.finished_time is None:
            m.finished_time = time.monotonic()
        outputs = [
            CompletionOutput(
                index=seq.index,
                text=seq.text.shown if seq.text is not None else "",
                token_ids=list(seq.output_token_ids),
                cumulative_logprob=seq.cumulative_logprob,
                logprobs=list(seq.logprobs) if seq.logprobs is not None else None,
                finish_reason=seq.finish_reason,
                stop_reason=seq.stop_reason,
            )
            for seq in req.seqs
        ]
        r = req.request
        return RequestOutput(
            request_id=r.request_id,
            prompt=r.prompt,
            prompt_token_ids=list(r.prompt_token_ids),
            prompt_logprobs=list(req.prompt_logprobs) if req.prompt_logprobs is not None else None,
            outputs=outputs,
            finished=finished,
            num_cached_tokens=0,
            metrics=m,
        )
