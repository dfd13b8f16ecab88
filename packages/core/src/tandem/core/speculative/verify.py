"""The verify step: which drafts the target model keeps, and the one token it adds.

Pure torch, no engine types. Row i of the target's logits / probabilities is what the
engine would sample from at draft i's position (the drafts before it counted as
history), row k the position after the last draft. Both functions return the accepted
drafts followed by exactly one more token: the correction at the first rejection, or a
bonus token when every draft was kept (1..k+1 tokens).

Sampled verification keeps the target's distribution exactly: draft d drawn from q is
kept with probability min(1, p(d)/q(d)); when refused, the token comes from
normalize(max(0, p - q)). Together these give p(x) for every x.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _check(rows: torch.Tensor, drafts: Sequence[int], name: str) -> None:
    if rows.dim() != 2 or rows.shape[0] != len(drafts) + 1:
        raise ValueError(
            f"{name} must have shape [len(drafts) + 1, vocab] = [{len(drafts) + 1}, V], "
            f"got {tuple(rows.shape)}"
        )
    vocab = rows.shape[1]
    for i, d in enumerate(drafts):
        if not 0 <= int(d) < vocab:
            raise ValueError(f"drafts[{i}] must be a token id in [0, {vocab}), got {d}")


def verify_greedy(target_logits: torch.Tensor, drafts: Sequence[int]) -> list[int]:
    """The tokens greedy decoding gives: drafts while each is the target's argmax, then
    the argmax where they first differ (or after the last draft)."""
    _check(target_logits, drafts, "target_logits")
    best = target_logits.argmax(dim=-1).tolist()
    out: list[int] = []
    for i, d in enumerate(drafts):
        if best[i] != int(d):
            break
        out.append(int(d))
    out.append(best[len(out)])
    return out


def verify_sampled(
    target_probs: torch.Tensor,
    drafts: Sequence[int],
    draft_probs: torch.Tensor | None,
    generator: torch.Generator | None,
) -> list[int]:
    """Rejection sampling; ``draft_probs=None`` means the drafts were certain (q one-hot,
    as n-gram drafts are): each is kept with probability p(d)."""
    _check(target_probs, drafts, "target_probs")
    k = len(drafts)
    if draft_probs is not None and (draft_probs.dim() != 2 or draft_probs.shape[0] < k):
        raise ValueError(
            f"draft_probs must have shape [len(drafts), vocab] = [{k}, V], "
            f"got {tuple(draft_probs.shape)}"
        )
    p_all = target_probs.float()
    q_all = None if draft_probs is None else draft_probs.float()
    device = p_all.device
    if k:
        # one uniform per draft, drawn together: the same count whatever is accepted
        coins = torch.rand(k, generator=generator, device=device).tolist()
    out: list[int] = []
    for i, d in enumerate(drafts):
        d = int(d)
        p = p_all[i]
        pd = float(p[d])
        qd = 1.0 if q_all is None else float(q_all[i, d])
        if pd > 0.0 and (qd <= pd or coins[i] * qd < pd):
            out.append(d)
            continue
        if q_all is None:
            residual = p.clone()
            residual[d] = 0.0
        else:
            residual = (p - q_all[i]).clamp_min(0.0)
        if float(residual.sum()) <= 0.0:
            residual = p  # p == q up to rounding: the refusal was rounding; draw from p
        out.append(_draw(residual, generator))
        return out
    out.append(_draw(p_all[k], generator))
    return out


def _draw(weights: torch.Tensor, generator: torch.Generator | None) -> int:
    return int(torch.multinomial(weights, 1, generator=generator).item())


def verify_seed(seed: int, counter: int) -> int:
    """The seed of the verify draws of a sample (seed ``seed``) whose drafts follow output
    token ``counter``: fixed by the sample's seed, so a seeded request verifies the same
    way in every run and batch."""
    from tandem.kernels.rng import derive_seed

    return derive_seed(seed, 2 * counter + 1)


def draft_seed(seed: int, counter: int) -> int:
    """The seed a draft model samples those drafts with: distinct from
    :func:`verify_seed`, so proposal and acceptance draws are independent."""
    from tandem.kernels.rng import derive_seed

    return derive_seed(seed, 2 * counter + 2)
