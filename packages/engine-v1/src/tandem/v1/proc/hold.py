"""Outputs that nobody reads before their sample ends, held in the engine-core process.

A request that asked for its output once (``OutputKind.FINAL_ONLY``, what
``LLM.generate`` asks for) and has no stop strings needs nothing from the detokenizer
until a sample finishes: no text is shown and no stop string can end it there. Sending
each step's token anyway wakes the detokenizer process once a token, and on a machine
with as many cores as the core's threads every wake-up is time taken from the forward
pass. Such a sample's outputs are merged here, in order, and sent in one message with
the output that finishes it (its stop, length, error or abort). Everything else passes
straight through, so streamed requests see each token as soon as it is made.
"""

from __future__ import annotations

from tandem.core.inputs.engine_request import EngineRequest, OutputKind
from tandem.v1 import messages as m


def quiet(request: EngineRequest) -> bool:
    """Whether ``request``'s outputs may wait until its samples finish."""
    return request.output_kind == OutputKind.FINAL_ONLY and not request.stop.stop


def merge(a: m.CoreOutput, b: m.CoreOutput) -> m.CoreOutput:
    """One output holding ``a`` then ``b`` (``b``'s finish, counts and error win)."""
    logprobs = None
    if a.logprobs is not None or b.logprobs is not None:
        logprobs = (a.logprobs or []) + (b.logprobs or [])
    prompt_logprobs = None  # a prompt prefilled in chunks brings its logprobs in parts
    if a.prompt_logprobs is not None or b.prompt_logprobs is not None:
        prompt_logprobs = (a.prompt_logprobs or []) + (b.prompt_logprobs or [])
    return m.CoreOutput(
        request_id=b.request_id,
        index=b.index,
        new_token_ids=a.new_token_ids + b.new_token_ids,
        new_logprobs=a.new_logprobs + b.new_logprobs,
        logprobs=logprobs,
        prompt_logprobs=prompt_logprobs,
        finish_reason=b.finish_reason,
        stop_reason=b.stop_reason,
        num_cached_tokens=b.num_cached_tokens,
        error=b.error,
    )


class OutputHold:
    def __init__(self) -> None:
        self._samples: dict[str, int] = {}  # quiet request -> samples not finished yet
        self._held: dict[tuple[str, int], m.CoreOutput] = {}

    def __len__(self) -> int:
        return len(self._held)

    def track(self, msg: m.AddRequest | m.Abort) -> None:
        """Note a request as it reaches the core (before the core takes it)."""
        if isinstance(msg, m.AddRequest) and quiet(msg.request):
            self._samples[msg.request.request_id] = msg.request.n

    def pass_on(self, outputs: list[m.CoreOutput]) -> list[m.CoreOutput]:
        """The outputs to send now; a quiet sample's unfinished ones are kept back."""
        out = []
        for o in outputs:
            rid = o.request_id
            key = (rid, o.index)
            if rid not in self._samples:
                out.append(o)
                continue
            held = self._held.pop(key, None)
            o = o if held is None else merge(held, o)
            if o.finish_reason is None:
                self._held[key] = o
                continue
            out.append(o)
            self._samples[rid] -= 1
            if self._samples[rid] <= 0:
                del self._samples[rid]
        return out
