"""The worker's side of a verify step: where its draws are, and which drafts they keep.

A request verifying ``k`` drafts computes its last known token and the drafts in one
step and gets logits at each of those ``k + 1`` positions. Row ``j`` is processed as
the sampler would process it had the first ``j`` drafts been drawn already (penalties
count them; it is drawn as output token ``counter + j``).

* Greedy: the sampler's argmax at every position; drafts are kept while each equals
  it, then the argmax where they first differ (or after the last draft) is added. This
  is :func:`~tandem.core.speculative.verify.verify_greedy`, done by the batched
  sampler for all rows at once, and the output is plain greedy decoding's, token for
  token.
* Sampled: :func:`~tandem.core.speculative.verify.verify_sampled` (rejection sampling)
  on the target's distributions at the positions (temperature, top-k, top-p, min-p of
  the processed logits), with the draft model's distributions when it sampled the
  drafts, its coins seeded by :func:`~tandem.core.speculative.verify.verify_seed` from
  the sample's seed and output count, as engine v0 verifies, so a seeded request
  gives the same tokens on every run and on both engines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from tandem.core.speculative.verify import verify_sampled, verify_seed
from tandem.kernels.sampling import filtered_probs
from tandem.v1.core.step import ScheduledRequest
from tandem.v1.worker.input_batch import InputBatch


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


def verify_row(
    x: Tensor, batch: InputBatch, row: int, drafts: list[int], q: Tensor | None, counter: int
) -> list[int]:
    """Rejection sampling of one sampled row's ``drafts`` (``q``: their distributions,
    None when they were certain) against its processed logits ``x`` [k + 1, V]."""
    n = x.shape[0]
    rows = torch.full((n,), row, dtype=torch.int64)
    dev = x.device
    y = filtered_probs(
        x, batch.temperature[rows].to(dev), batch.top_k[rows].to(dev),
        batch.top_p[rows].to(dev), batch.min_p[rows].to(dev),
    )  # fmt: skip
    gen = torch.Generator(device=x.device)
    gen.manual_seed(verify_seed(int(batch.seeds[row]), counter))
    return verify_sampled(y, drafts, q, gen)
