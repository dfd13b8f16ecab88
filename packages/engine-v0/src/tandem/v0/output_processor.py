"""Turning sampled tokens into text, stop decisions and ``RequestOutput``s.

Stop rules, checked after every token in this order (as vLLM users expect):

* nothing stops a sequence before it has ``min_tokens`` output tokens (the sampler also
  keeps EOS and ``stop_token_ids`` from being drawn until then);
* EOS (unless ``ignore_eos``): ``finish_reason="stop"``, ``stop_reason=None``;
* a ``stop_token_ids`` entry: ``"stop"`` with that id as ``stop_reason``; the token stays
  in ``token_ids`` but its text is left out unless ``include_stop_str_in_output``;
* a ``stop`` string in the text: ``"stop"`` with the string as ``stop_reason``; the text
  ends before it (or after it with ``include_stop_str_in_output``);
* ``max_tokens`` or the ``max_model_len`` limit: ``"length"``.

While a sequence runs, the end of its text that could still become a stop string is
held back, so a streamed text never shows part of a stop string.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tandem.core.detokenizer import IncrementalDetokenizer
from tandem.core.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from tandem.core.stop import StopStringMatcher
from tandem.v0.sampler import SampleResult
from tandem.v0.sequence import Request, Sequence


@dataclass(slots=True)
class _SeqText:
    detok: IncrementalDetokenizer
    matcher: StopStringMatcher


class OutputProcessor:
    def __init__(self, tokenizer: Any, eos_token_ids: list[int], max_model_len: int) -> None:
        self.tokenizer = tokenizer
        self.eos_token_ids = frozenset(eos_token_ids)
        self.max_model_len = max_model_len
        self._text: dict[int, _SeqText] = {}
        self.metrics: dict[str, RequestMetrics] = {}

    def blocked_ids(self, params: Any) -> tuple[int, ...]:
        """The ids ``min_tokens`` keeps the sampler from drawing."""
        ids = set(params.stop_token_ids or ())
        if not params.ignore_eos:
            ids |= self.eos_token_ids
        return tuple(sorted(ids))

    def start(self, req: Request) -> None:
        p = req.params
        for seq in req.seqs:
            detok = IncrementalDetokenizer(
                self.tokenizer, req.prompt_token_ids, p.skip_special_tokens
            )
            matcher = StopStringMatcher(p.stop_strings, p.include_stop_str_in_output)
            self._text[seq.seq_id] = _SeqText(detok, matcher)
            if p.logprobs is not None:
                seq.logprobs = []
        self.metrics[req.request_id] = RequestMetrics(arrival_time=time.monotonic())

    def drop(self, req: Request) -> None:
        for seq in req.seqs:
            self._text.pop(seq.seq_id, None)
        self.metrics.pop(req.request_id, None)

    def mark_scheduled(self, req: Request) -> None:
        m = self.metrics.get(req.request_id)
        if m is not None and m.first_scheduled_time is None:
            m.first_scheduled_time = time.monotonic()

    def _decoded(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

    def logprob_entry(self, entries: dict[int, tuple[float, int]]) -> dict[int, Logprob]:
        return {t: Logprob(lp, rank, self._decoded(t)) for t, (lp, rank) in entries.items()}

    def append(self, req: Request, seq: Sequence, sample: SampleResult) -> bool:
        """Record one sampled token of ``seq``; True when it finished the sequence.

        The caller removes a finished sequence from the scheduler.
        """
        p = req.params
        tok = sample.token_id
        seq.output_token_ids.append(tok)
        seq.cumulative_logprob += sample.logprob
        if seq.logprobs is not None:
            entries = {tok: (sample.logprob, sample.rank)}
            for t, lp, rank in sample.top or ():
                entries.setdefault(t, (lp, rank))
            seq.logprobs.append(self.logprob_entry(entries))
        m = self.metrics.get(req.request_id)
        if m is not None and m.first_token_time is None:
            m.first_token_time = time.monotonic()

        st = self._text[seq.seq_id]
        may_stop = seq.num_output_tokens >= p.min_tokens
        reason: tuple[str, int | str | None] | None = None
        if may_stop and not p.ignore_eos and tok in self.eos_token_ids:
            reason = ("stop", None)
        elif may_stop and tok in (p.stop_token_ids or ()):
            reason = ("stop", tok)
        delta = ""
        if reason is None or p.include_stop_str_in_output:
            delta = st.detok.add([tok])
        if reason is None and (
            seq.num_output_tokens >= seq.max_tokens or seq.num_tokens >= self.max_model_len
        ):
            reason = ("length", None)
        if reason is not None:
            delta += st.detok.flush()
        full = st.detok.text
        if may_stop and (reason is None or reason[0] == "length"):
            check = st.matcher.check(full, len(delta))
            if check.matched:
                reason, full = ("stop", check.stop), check.text
        if reason is None:
            seq.text = st.matcher.releasable_text(full)
            return False
        seq.text = full
        seq.finish_reason, seq.stop_reason = reason
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
                text=seq.text,
                token_ids=list(seq.output_token_ids),
                cumulative_logprob=seq.cumulative_logprob,
                logprobs=list(seq.logprobs) if seq.logprobs is not None else None,
                finish_reason=seq.finish_reason,
                stop_reason=seq.stop_reason,
            )
            for seq in req.seqs
        ]
        return RequestOutput(
            request_id=req.request_id,
            prompt=req.prompt,
            prompt_token_ids=list(req.prompt_token_ids),
            prompt_logprobs=list(req.prompt_logprobs) if req.prompt_logprobs is not None else None,
            outputs=outputs,
            finished=finished,
            num_cached_tokens=0,
            metrics=m,
        )
