"""Token outputs of the core -> text, stop strings and ready-made result records.

Runs in the detokenizer process (or in the caller's process with the in-process
client). A stop string that ends a sample is reported back so the core stops it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tandem.core.detokenizer import IncrementalDetokenizer
from tandem.core.stop import StopStringMatcher
from tandem.core.tokenizer import Tokenizer
from tandem.v1 import messages as m

TopDict = dict[int, tuple[float, int, str | None]]


@dataclass(slots=True, eq=False)
class _Sample:
    index: int
    detok: IncrementalDetokenizer
    stop: StopStringMatcher | None
    token_ids: list[int] = field(default_factory=list)
    text: str = ""  # the whole text so far (stop-cut once matched)
    shown: str = ""  # what may be shown now (held-back stop prefixes excluded)
    logprobs: list[TopDict] | None = None
    cumulative: float = 0.0
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    sent_text: str = ""  # what the client was last sent of text / shown
    sent_tokens: int = 0
    sent_logprobs: int = 0


@dataclass(slots=True, eq=False)
class _Tracked:
    add: m.AddRequest
    samples: list[_Sample]
    prompt_logprobs: list[TopDict | None] | None = None
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
        if req.request_id in self.requests:
            raise ValueError(f"request_id {req.request_id!r} is already running")
        spec = req.detok
        samples = []
        for i in range(req.n):
            detok = IncrementalDetokenizer(
                self.tokenizer, req.prompt_token_ids, spec.skip_special_tokens
            )
            stop = (
                StopStringMatcher(spec.stop, spec.include_stop_str_in_output) if spec.stop else None
            )
            wants = req.sampling.logprobs is not None
            samples.append(_Sample(i, detok, stop, logprobs=[] if wants else None))
        self.requests[req.request_id] = _Tracked(req, samples)

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
            if self._update(tracked, sample, out):
                stopped.append((out.request_id, out.index))
            touched[out.request_id] = tracked
        results = []
        for rid, tracked in touched.items():
            results.append(self._result(tracked))
            if tracked.finished:
                del self.requests[rid]
        return results, stopped

    def _prompt_logprobs(self, tracked: _Tracked, chunk: list[list[m.TopEntry]]) -> None:
        if tracked.prompt_logprobs is None:
            tracked.prompt_logprobs = []
        for entries in chunk:
            if not entries:
                tracked.prompt_logprobs.append(None)
            else:
                tracked.prompt_logprobs.append(self._tops(entries))

    def _tops(self, entries: list[m.TopEntry]) -> TopDict:
        out: TopDict = {}
        for tok, lp, rank in entries:
            if tok not in out:
                out[tok] = (lp, rank, self.tokenizer.decode([tok], skip_special_tokens=False))
        return out

    def _update(self, tracked: _Tracked, s: _Sample, out: m.CoreOutput) -> bool:
        """Add the new tokens; True when a stop string ended the sample early."""
        spec = tracked.add.detok
        for k, tok in enumerate(out.new_token_ids):
            s.token_ids.append(tok)
            if k < len(out.new_logprobs):
                s.cumulative += out.new_logprobs[k]
            if out.logprobs is not None and s.logprobs is not None:
                s.logprobs.append(self._tops(out.logprobs[k]))
            last = k == len(out.new_token_ids) - 1
            reason = out.finish_reason if last else None
            delta = ""
            if reason != "stop" or spec.include_stop_str_in_output:
                delta = s.detok.add([tok])
            if reason is not None:
                delta += s.detok.flush()
            full = s.detok.text
            may_stop = len(s.token_ids) >= spec.min_tokens
            if s.stop is not None and may_stop and reason in (None, "length"):
                check = s.stop.check(full, len(delta))
                if check.matched:
                    s.text = s.shown = check.text
                    s.finish_reason, s.stop_reason = "stop", check.stop
                    return reason is None
            s.text = full
            s.shown = s.stop.releasable_text(full) if s.stop is not None else full
        if out.finish_reason is not None:
            s.finish_reason, s.stop_reason = out.finish_reason, out.stop_reason
            s.shown = s.text
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
            request_id=tracked.add.request_id,
            new_prompt_logprobs=new_plp,
            outputs=comps,
            finished=tracked.finished,
            num_cached_tokens=tracked.num_cached_tokens,
        )


def _delta(s: _Sample) -> m.Completion:
    visible = s.text if s.finish_reason is not None else s.shown
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
