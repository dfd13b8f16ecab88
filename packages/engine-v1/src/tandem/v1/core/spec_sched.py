"""The scheduler's side of speculative decoding: which drafts a decode verifies, how
many the worker may propose, and the tokens a verified step leaves.

A running request keeps the drafts the worker proposed after its last draw
(``Request.spec_tokens``). When it is next scheduled as a decode, the drafts ride
along: the step computes the last known token and the drafts (``1 + k`` tokens, like a
short prefill chunk) and draws a token at each. Drafts are the first thing to give up:
they are cut to the token budget left, and dropped when their blocks do not fit
(never a reason to preempt anyone).

A request speculates only when every draw of a verify step is an ordinary draw:
its grammar (structured outputs) advances one token at a time in the worker, and
while ``min_tokens`` is not reached the ids it bans depend on the position, so those
requests decode one token a step until then.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.core.engine.stopping import token_stop
from tandem.v1.core.request import Request


def can_speculate(req: Request) -> bool:
    return req.sampling.grammar is None and len(req.output_token_ids) >= req.stop.min_tokens


def draft_room(req: Request, k: int) -> int:
    """Output tokens ``req`` may still gain from its next draw on (0: propose nothing)."""
    if k <= 0 or not can_speculate(req):
        return 0
    return max(req.stop.max_tokens - len(req.output_token_ids), 0)


def drafts_for(req: Request, budget: int) -> list[int]:
    """The drafts a decode of ``req`` verifies now: at most ``budget`` of them, none past
    ``max_tokens`` (the step yields one token more than the drafts it accepts)."""
    if not req.spec_tokens or req.num_computed_tokens != req.num_tokens - 1:
        return []
    if not can_speculate(req):
        return []
    room = req.stop.max_tokens - len(req.output_token_ids) - 1
    return req.spec_tokens[: max(min(budget, room), 0)]


def accept(req: Request, tokens: list[int]) -> tuple[list[int], tuple[str | None, int | None]]:
    """Append ``tokens`` to ``req``'s output one by one, stopping at the first token
    rule that ends it: the tokens kept (the stop token included) and the verdict
    (``(None, None)`` while the request goes on)."""
    kept = []
    for tok in tokens:
        req.output_token_ids.append(tok)
        kept.append(tok)
        verdict = token_stop(req.stop, tok, len(req.output_token_ids))
        if verdict is not None:
            return kept, verdict
    return kept, (None, None)


@dataclass(slots=True)
class Verified:
    """Drafts verified and accepted since the core started (the engine's stats)."""

    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0

    def roll_back(self, req: Request, num_drafts: int, accepted: int) -> None:
        """A verify step of ``req`` kept ``accepted`` of its ``num_drafts`` drafts: the
        K/V past them is garbage, so its computed length stops after the last kept one
        (the token drawn in place of the first refused draft is computed next step)."""
        req.num_computed_tokens -= num_drafts - accepted
        self.num_draft_tokens += num_drafts
        self.num_accepted_tokens += accepted
