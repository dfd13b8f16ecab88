"""The worker's side of speculative decoding: the draws a verify step makes, which
drafts they keep, and the drafts proposed for the next step.

A request verifying ``k`` drafts computes its last known token and the drafts in one
step and draws a token at each of those ``k + 1`` positions, with the sampler the
engine always uses: position ``j`` is drawn as output token ``counter + j`` (its seeded
draw's counter) with the drafts before it counted as history (penalties see them).
Drafts are kept while each equals the draw at its position; the draw where they first
differ (or after the last draft) is the one token more. Every kept token is therefore
the very token the engine would have drawn without speculation, greedy or seeded:
speculation changes how many forward passes a request takes, never its output. For
greedy rows this is :func:`tandem.core.speculative.verify.verify_greedy`; for sampled
rows it is rejection sampling with certain drafts (a draft is kept with the target's
probability of it, as ``verify_sampled`` with ``draft_probs=None`` keeps it), drawn
with the request's own seed instead of a separate generator.

The proposer runs here, after the draws, rather than in the engine core: the worker
already holds every request's tokens (the input batch), a draft model must live next to
its own KV cache in the model's process anyway, and the drafts then travel back to the
scheduler in the step's output like the sampled tokens, so one step's data flows one
way: scheduler -> worker -> scheduler.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tandem.core.speculative import SpeculativeConfig, propose_ngram
from tandem.v1.core.step import ScheduledRequest
from tandem.v1.worker.input_batch import InputBatch

if TYPE_CHECKING:
    from tandem.core.config import EngineConfig


@dataclass(slots=True)
class Draws:
    """Where the draws of a step's sampled rows are: row ``i`` owns draws
    ``first[i] .. first[i] + count[i] - 1``, at ``positions`` of the step's tokens."""

    first: list[int]
    count: list[int]
    positions: Tensor  # [P] int64 index into the step's hidden states
    owners: list[int]  # [P] the sampled row of each draw
    steps: list[int]  # [P] position of the draw in its row's verify (0 .. k)

    @property
    def speculative(self) -> bool:
        return len(self.owners) > len(self.first)


def layout(rows: Sequence[ScheduledRequest], ends: Sequence[int]) -> Draws:
    """The draws of ``rows`` (the sampled ones), whose last tokens are at ``ends``."""
    first, count, positions, owners, steps = [], [], [], [], []
    for i, (r, end) in enumerate(zip(rows, ends)):
        n = 1 + len(r.spec_tokens)
        first.append(len(owners))
        count.append(n)
        positions += range(end - n + 1, end + 1)
        owners += [i] * n
        steps += range(n)
    return Draws(first, count, torch.tensor(positions, dtype=torch.int64), owners, steps)


def place_drafts(batch: InputBatch, rows: Sequence[ScheduledRequest]) -> None:
    """Write each row's drafts after its known tokens, where the step reads its inputs
    (a kept draft is then written there again as an output token; a rejected one is
    overwritten by the token drawn in its place)."""
    for r in rows:
        if r.spec_tokens:
            b = batch.rows[r.key]
            n = batch.num_tokens[b]
            batch.token_ids[b, n : n + len(r.spec_tokens)] = torch.tensor(r.spec_tokens)


def history(draws: Draws, rows: Sequence[ScheduledRequest], vocab_size: int) -> Tensor:
    """[P, V] int32: the drafts each draw counts as output before it (for penalties)."""
    extra = torch.zeros((len(draws.owners), vocab_size), dtype=torch.int32)
    for p, (i, j) in enumerate(zip(draws.owners, draws.steps)):
        if j:
            ids = torch.tensor(rows[i].spec_tokens[:j], dtype=torch.int64)
            extra[p].index_add_(0, ids, torch.ones_like(ids, dtype=torch.int32))
    return extra


def kept(drafts: Sequence[int], drawn: Sequence[int]) -> int:
    """How many of ``drafts`` a verify keeps, given the ``len(drafts) + 1`` draws."""
    n = 0
    while n < len(drafts) and drafts[n] == drawn[n]:
        n += 1
    return n


class Proposer:
    """Drafts for each request's next step: n-gram lookup in its tokens so far."""

    def __init__(self, config: SpeculativeConfig) -> None:
        self.config = config
        self.k = config.num_speculative_tokens

    def propose(
        self, batch: InputBatch, keys: Sequence[str], limits: Sequence[int]
    ) -> list[list[int]]:
        """Up to ``min(k, limits[i])`` drafts for request ``keys[i]``."""
        c = self.config
        out = []
        for key, limit in zip(keys, limits):
            k = min(self.k, limit)
            if k <= 0:
                out.append([])
                continue
            b = batch.rows[key]
            tokens = batch.token_ids[b, : batch.num_tokens[b]].tolist()
            out.append(propose_ngram(tokens, k, c.prompt_lookup_min, c.prompt_lookup_max))
        return out

    def drop(self, key: str) -> None:
        """Forget a request (nothing is kept per request for n-gram lookup)."""


def make_proposer(config: EngineConfig) -> Proposer | None:
    """The proposer ``config`` asks for (None: no speculative decoding)."""
    sc = config.speculative
    if sc is None:
        return None
    if sc.method == "ngram":
        return Proposer(sc)
    raise NotImplementedError(f"speculative method {sc.method!r} is not supported on engine v1")
