"""Token outputs of the core -> text, stop strings and result deltas.

Runs in the detokenizer process (or in the caller's process with the in-process
client). A stop string that ends a sample is reported back so the core stops it.

What it sends is what each request gained since its previous :class:`~tandem.v1.messages.Result`:
the new text, ids and logprobs of the samples that changed, never the whole output, so
a stream of n tokens costs O(n) here. A request that asked for its output only once
(``OutputKind.FINAL_ONLY``) gets one Result, when it finishes, holding all of it.

A sample stopped here (a stop string) or aborted by the client may still have outputs
on their way from the core, which runs ahead. They are dropped until the core's last
word on the sample (an output with a finish reason: the abort, or its own stop), so
that a new request reusing the id never receives them: the core answers an abort
before it takes any request sent after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem.core.engine.stopping import SampleText
from tandem.core.inputs.engine_request import OutputKind
from tandem.core.outputs.logprobs import LogprobDict, TopEntry, entry
from tandem.core.outputs.request_output import error_text
from tandem.core.text.tokenizer import TextDecoder, Tokenizer
from tandem.v1 import messages as m


@dataclass(slots=True, eq=False)
class _Sample:
    index: int
    text: SampleText
    new_ids: list[int] = field(default_factory=list)  # not sent yet
    new_logprobs: list[LogprobDict] | None = None  # not sent yet (None: not asked)
    cumulative: float = 0.0
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    sent_chars: int = 0  # how much of the shown text was sent
    changed: bool = False  # something to send

    def delta(self) -> m.Completion:
        """What changed since the last call, marked as sent. The shown text only grows:
        held-back text is a possible stop string's start, which a match never precedes."""
        shown = self.text.text if self.finish_reason is not None else self.text.shown
        new_lps = self.new_logprobs
        comp = m.Completion(
            index=self.index,
            text=shown[self.sent_chars :],
            new_token_ids=self.new_ids,
            cumulative_logprob=self.cumulative,
            new_logprobs=new_lps,
            finish_reason=self.finish_reason,
            stop_reason=self.stop_reason,
        )
        self.sent_chars = len(shown)
        self.new_ids = []
        self.new_logprobs = [] if new_lps is not None else None
        self.changed = False
        return comp


@dataclass(slots=True, eq=False)
class _Tracked:
    request_id: str
    kind: OutputKind
    samples: list[_Sample]
    new_prompt_logprobs: list[LogprobDict | None] | None = None  # not sent yet
    num_cached_tokens: int = 0
    error: str | None = None

    @property
    def finished(self) -> bool:
        return all(s.finish_reason is not None for s in self.samples)


class OutputProcessor:
    def __init__(self, tokenizer: Tokenizer | TextDecoder) -> None:
        self.tokenizer = tokenizer
        self.requests: dict[str, _Tracked] = {}
        self.closing: set[tuple[str, int]] = set()  # samples the core has not ended yet

    def add(self, req: m.AddRequest) -> m.Result | None:
        """Track a request; when its text cannot be set up, the request fails here: the
        Result that says so is returned (and the core must not get the request)."""
        r = req.request
        assert r.request_id not in self.requests, r.request_id  # the front door's check
        wants = r.sampling.logprobs is not None
        try:
            texts = [
                SampleText(self.tokenizer, r.prompt_token_ids, r.stop, r.skip_special_tokens)
                for _ in range(r.n)
            ]
        except Exception as exc:
            why = error_text(exc)
            comps = [m.Completion(i, "", [], None, None, "error", None) for i in range(r.n)]
            return m.Result(r.request_id, None, comps, True, 0, why)
        samples = [_Sample(i, t, new_logprobs=[] if wants else None) for i, t in enumerate(texts)]
        plp = [] if r.sampling.prompt_logprobs is not None else None
        self.requests[r.request_id] = _Tracked(r.request_id, r.output_kind, samples, plp)
        return None

    def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            tracked = self.requests.pop(rid, None)
            if tracked is not None:
                self.closing.update((rid, s.index) for s in tracked.samples if not s.finish_reason)

    def process(self, outputs: list[m.CoreOutput]) -> tuple[list[m.Result], list[tuple[str, int]]]:
        """Apply one step's outputs; returns (results, samples the core must stop)."""
        touched: dict[str, _Tracked] = {}
        stopped: list[tuple[str, int]] = []
        for out in outputs:
            key = (out.request_id, out.index)
            if key in self.closing:  # a late output of a sample stopped or aborted
                if out.finish_reason is not None:
                    self.closing.discard(key)
                continue
            tracked = self.requests.get(out.request_id)
            if tracked is None or out.index >= len(tracked.samples):
                continue  # aborted or already finished: late tokens are dropped
            sample = tracked.samples[out.index]
            if sample.finish_reason is not None:
                continue
            tracked.num_cached_tokens = max(tracked.num_cached_tokens, out.num_cached_tokens)
            if out.error is not None and tracked.error is None:
                tracked.error = out.error
            if out.prompt_logprobs is not None and out.index == 0:
                # every sample of an n > 1 request scores the same prompt: keep the first's
                self._prompt_logprobs(tracked, out.prompt_logprobs)
            if self._update(sample, out):
                stopped.append(key)
                self.closing.add(key)
            touched[out.request_id] = tracked
        results = []
        for rid, tracked in touched.items():
            finished = tracked.finished
            if tracked.kind is OutputKind.FINAL_ONLY and not finished:
                continue
            results.append(_result(tracked, finished))
            if finished:
                del self.requests[rid]
        return results, stopped

    def _decoded(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

    def _prompt_logprobs(self, tracked: _Tracked, chunk: list[list[TopEntry]]) -> None:
        if tracked.new_prompt_logprobs is None:
            tracked.new_prompt_logprobs = []
        tracked.new_prompt_logprobs += [entry(e, self._decoded) if e else None for e in chunk]

    def _update(self, s: _Sample, out: m.CoreOutput) -> bool:
        """Add the new tokens; True when a stop string ended the sample early."""
        s.changed = True
        for k, tok in enumerate(out.new_token_ids):
            s.new_ids.append(tok)
            if k < len(out.new_logprobs):
                s.cumulative += out.new_logprobs[k]
            if out.logprobs is not None and s.new_logprobs is not None:
                s.new_logprobs.append(entry(out.logprobs[k], self._decoded))
            reason = out.finish_reason if k == len(out.new_token_ids) - 1 else None
            stop = s.text.add(tok, reason)
            if stop is not None:  # the tokens after it (a step's accepted drafts) are dropped
                s.finish_reason, s.stop_reason = "stop", stop
                return out.finish_reason is None  # else the core has ended it already
        if out.finish_reason is not None:
            s.finish_reason, s.stop_reason = out.finish_reason, out.stop_reason
        return False


def _result(tracked: _Tracked, finished: bool) -> m.Result:
    """What changed since the request's previous Result; marks it as sent."""
    plp = tracked.new_prompt_logprobs
    if plp is not None:
        tracked.new_prompt_logprobs = []
    return m.Result(
        request_id=tracked.request_id,
        new_prompt_logprobs=plp,
        outputs=[s.delta() for s in tracked.samples if s.changed],
        finished=finished,
        num_cached_tokens=tracked.num_cached_tokens,
        error=tracked.error,
    )
