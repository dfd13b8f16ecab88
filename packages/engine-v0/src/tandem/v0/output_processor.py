"""Turning sampled tokens into text, stop decisions and ``RequestOutput``s.

The stop rules and the text of a sample are core's (:mod:`tandem.core.engine.stopping`), the
same code engine v1 runs in its core and detokenizer processes; the logprob shape is
core's too (:mod:`tandem.core.outputs.logprobs`).

An output is of the kind its request asked for (``OutputKind``): the whole request so
far (cumulative), what changed since its previous output (delta: the new text, ids
and logprobs of the samples that changed), or nothing until it finishes, then the
whole of it (final only). A delta is cut from where the previous one ended, so a
stream of n tokens costs O(n).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tandem.core.engine.stopping import SampleText, token_stop
from tandem.core.inputs.engine_request import OutputKind
from tandem.core.outputs.logprobs import LogprobDict, TopEntry, entry
from tandem.core.outputs.request_output import CompletionOutput, RequestMetrics, RequestOutput
from tandem.v0.sampler import SampleResult
from tandem.v0.sequence import Request, Sequence


@dataclass(slots=True)
class _Sent:
    """How much of a sequence its request's outputs carried so far (delta requests)."""

    chars: int = 0
    tokens: int = 0
    logprobs: int = 0
    finished: bool = False


class OutputProcessor:
    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.metrics: dict[str, RequestMetrics] = {}
        self.sent: dict[int, _Sent] = {}  # seq_id ->
        self.sent_prompt: dict[str, int] = {}  # request id -> prompt logprobs sent

    def start(self, req: Request) -> None:
        """Set up each sample's text; raises (and sets up nothing) when it cannot be."""
        r = req.request
        texts = [
            SampleText(self.tokenizer, r.prompt_token_ids, r.stop, r.skip_special_tokens)
            for _ in req.seqs
        ]
        for seq, text in zip(req.seqs, texts):
            seq.text = text
            if r.sampling.logprobs is not None:
                seq.logprobs = []
            self.sent[seq.seq_id] = _Sent()
        self.sent_prompt[req.request_id] = 0
        self.metrics[req.request_id] = RequestMetrics(arrival_time=time.monotonic())

    def drop(self, req: Request) -> None:
        self.metrics.pop(req.request_id, None)
        self.sent_prompt.pop(req.request_id, None)
        for seq in req.seqs:
            self.sent.pop(seq.seq_id, None)

    def mark_scheduled(self, req: Request) -> None:
        m = self.metrics.get(req.request_id)
        if m is not None and m.first_scheduled_time is None:
            m.first_scheduled_time = time.monotonic()

    def _decoded(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

    def logprob_entry(self, tops: list[TopEntry]) -> LogprobDict:
        return entry(tops, self._decoded)

    def add_prompt_logprobs(self, req: Request, start: int, entries: list[list[TopEntry]]) -> None:
        """entries[i] scores prompt token start + 1 + i; keeps positions not yet scored."""
        assert req.prompt_logprobs is not None
        for i, tops in enumerate(entries):
            if start + 1 + i == len(req.prompt_logprobs):
                req.prompt_logprobs.append(self.logprob_entry(tops))
        req.num_prompt_logprobs_done = len(req.prompt_logprobs)

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
        if verdict is None and sample.ends:  # the grammar is complete: nothing may follow
            verdict = ("stop", None)
        assert seq.text is not None
        stop = seq.text.add(tok, verdict[0] if verdict is not None else None)
        if stop is not None:
            verdict = ("stop", stop)
        if verdict is None:
            return False
        seq.finish_reason, seq.stop_reason = verdict
        return True

    def make_output(self, req: Request) -> RequestOutput | None:
        """The request's output of its kind; None for a final-only request still running."""
        finished = req.is_finished
        kind = OutputKind(req.request.output_kind)
        if kind is OutputKind.FINAL_ONLY and not finished:
            return None
        m = self.metrics.get(req.request_id)
        if finished and m is not None and m.finished_time is None:
            m.finished_time = time.monotonic()
        plp = req.prompt_logprobs
        if kind is OutputKind.DELTA:
            outputs = [self._delta(seq) for seq in req.seqs if self._changed(seq)]
            if plp is not None:
                done = self.sent_prompt.get(req.request_id, 0)
                plp, self.sent_prompt[req.request_id] = plp[done:], len(plp)
        else:
            outputs = [self._whole(seq) for seq in req.seqs]
            plp = list(plp) if plp is not None else None
        r = req.request
        return RequestOutput(
            request_id=r.request_id,
            prompt=r.prompt,
            prompt_token_ids=r.prompt_token_ids,  # shared by every output, not copied
            prompt_logprobs=plp,
            outputs=outputs,
            finished=finished,
            num_cached_tokens=0,
            metrics=m,
            error=req.error,
        )

    def _changed(self, seq: Sequence) -> bool:
        sent = self.sent.setdefault(seq.seq_id, _Sent())
        return seq.num_output_tokens > sent.tokens or (seq.is_finished and not sent.finished)

    def _delta(self, seq: Sequence) -> CompletionOutput:
        """What ``seq`` gained since the previous output, marked as sent."""
        sent = self.sent[seq.seq_id]
        shown = _shown(seq)
        lps = seq.logprobs
        out = CompletionOutput(
            index=seq.index,
            text=shown[sent.chars :],
            token_ids=seq.output_token_ids[sent.tokens :],
            cumulative_logprob=seq.cumulative_logprob,
            logprobs=lps[sent.logprobs :] if lps is not None else None,
            finish_reason=seq.finish_reason,
            stop_reason=seq.stop_reason,
        )
        sent.chars, sent.tokens = len(shown), seq.num_output_tokens
        sent.logprobs, sent.finished = len(lps or ()), seq.is_finished
        return out

    @staticmethod
    def _whole(seq: Sequence) -> CompletionOutput:
        return CompletionOutput(
            index=seq.index,
            text=_shown(seq),
            token_ids=list(seq.output_token_ids),
            cumulative_logprob=seq.cumulative_logprob,
            logprobs=list(seq.logprobs) if seq.logprobs is not None else None,
            finish_reason=seq.finish_reason,
            stop_reason=seq.stop_reason,
        )


def _shown(seq: Sequence) -> str:
    """The text a client may see: all of it once the sample ended, else without a held
    back possible stop-string start (the shown text only grows)."""
    if seq.text is None:
        return ""
    return seq.text.text if seq.finish_reason is not None else seq.text.shown
