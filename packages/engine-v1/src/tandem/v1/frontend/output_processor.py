"""Token outputs of the core -> text, stop strings and ready-made result records.

Runs in the detokenizer process (or in the caller's process with the in-process
client). A stop string that ends a sample is reported back so the core stops it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem.core.logprobs import LogprobDict, TopEntry, entry
from tandem.core.stopping import SampleText
from tandem.core.tokenizer import Tokenizer
from tandem.v1.proc import messages as m


@dataclass(slots=True, eq=False)
class _Sample:
    index: int
    text: SampleText
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[LogprobDict] | None = None
    cumulative: float = 0.0
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    sent_text: str = ""  # what the client was last sent of the text
    sent_tokens: int = 0
    sent_logprobs: int = 0


@dataclass(slots=True, eq=False)
class _Tracked:
    request_id: str
    samples: list[_Sample]
    prompt_logprobs: list[LogprobDict | None] | None = None
    num_cached_tokens: int = 0
    sent_prompt_logprobs: int = 0

    @property
    def finished(self) -> bool:
        return all(s.finish_reason is not None for s in self.samples)


class OutputProcessor:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.requests: dict[str, _Tracked] = {}

    def add(self, req: m.AddRequest) -> None:
        r = req.request
        if r.request_id in self.requests:
            raise ValueError(f"request_id {r.request_id!r} is already running")
        wants = r.sampling.logprobs is not None
        samples = [
            _Sample(
                i,
                SampleText(self.tokenizer, r.prompt_token_ids, r.stop, r.skip_special_tokens),
                logprobs=[] if wants else None,
            )
            for i in range(r.n)
        ]
        self.requests[r.request_id] = _Tracked(r.request_id, samples)

    def abort(self, request_ids: list[str]) -> None:
        for rid in request_ids:
            self.requests.pop(rid, None)

    def process(self, outputs: list[m.CoreOutput]) -> tuple[list[m.Result], list[tuple[str, int]]]:
        """Apply one step's outputs; returns (results, samples the core must stop)."""
        touched: dict[str, _Tracked] = {}
        stopped: list[tuple[str, int]] = []
        for out in outputs:
            tracked = self.requests.get(out.request_id)
            if tracked is None or out.index >= len(tracked.samples):
                continue  # aborted or already finished: late tokens are dropped
            sample = tracked.samples[out.index]
            if sample.finish_reason is not None:
                continue
            tracked.num_cached_tokens = max(tracked.num_cached_tokens, out.num_cached_tokens)
            if out.prompt_logprobs is not None and out.index == 0:
                # every sample of an n > 1 request scores the same prompt: keep the first's
                self._prompt_logprobs(tracked, out.prompt_logprobs)
            if self._update(sample, out):
                stopped.append((out.request_id, out.index))
            touched[out.request_id] = tracked
        results = []
        for rid, tracked in touched.items():
            results.append(self._result(tracked))
            if tracked.finished:
                del self.requests[rid]
        return results, stopped

    def _decoded(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

    def _prompt_logprobs(self, tracked: _Tracked, chunk: list[list[TopEntry]]) -> None:
        if tracked.prompt_logprobs is None:
            tracked.prompt_logprobs = []
        tracked.prompt_logprobs += [entry(e, self._decoded) if e else None for e in chunk]

    def _update(self, s: _Sample, out: m.CoreOutput) -> bool:
        """Add the new tokens; True when a stop string ended the sample early."""
        for k, tok in enumerate(out.new_token_ids):
            s.token_ids.append(tok)
            if k < len(out.new_logprobs):
                s.cumulative += out.new_logprobs[k]
            if out.logprobs is not None and s.logprobs is not None:
                s.logprobs.append(entry(out.logprobs[k], self._decoded))
            reason = out.finish_reason if k == len(out.new_token_ids) - 1 else None
            stop = s.text.add(tok, reason)
            if stop is not None:
                s.finish_reason, s.stop_reason = "stop", stop
                return reason is None
        if out.finish_reason is not None:
            s.finish_reason, s.stop_reason = out.finish_reason, out.stop_reason
        return False

    def _result(self, tracked: _Tracked) -> m.Result:
        """What changed since the request's previous Result; marks it as sent."""
        comps = [_delta(s) for s in tracked.samples]
        plp = tracked.prompt_logprobs
        new_plp = None
        if plp is not None:
            new_plp = plp[tracked.sent_prompt_logprobs :]
            tracked.sent_prompt_logprobs = len(plp)
        return m.Result(
            request_id=tracked.request_id,
            new_prompt_logprobs=new_plp,
            outputs=comps,
            finished=tracked.finished,
            num_cached_tokens=tracked.num_cached_tokens,
        )


def _delta(s: _Sample) -> m.Completion:
    visible = s.text.text if s.finish_reason is not None else s.text.shown
    keep = len(s.sent_text)
    if not visible.startswith(s.sent_text):  # never expected: resend from the divergence
        keep = next(
            (i for i, (a, b) in enumerate(zip(visible, s.sent_text)) if a != b),
            min(len(visible), keep),
        )
    new_lps = None
    if s.logprobs is not None:
        new_lps = s.logprobs[s.sent_logprobs :]
        s.sent_logprobs = len(s.logprobs)
    comp = m.Completion(
        index=s.index,
        text_from=keep,
        text=visible[keep:],
        new_token_ids=s.token_ids[s.sent_tokens :],
        cumulative_logprob=s.cumulative,
        new_logprobs=new_lps,
        finish_reason=s.finish_reason,
        stop_reason=s.stop_reason,
    )
    s.sent_text, s.sent_tokens = visible, len(s.token_ids)
    return comp
