"""Logprobs in their two shapes, shared by both engines.

Where the model runs, a position's logprobs are plain ids and floats: ``TopEntry`` rows
``(token id, logprob, rank)``, the sampled (or actual prompt) token first, then the top k.
What a user gets is one ``{token id: Logprob}`` dict per position, each token's text
decoded (:func:`entry`). Logprobs and ranks (1 = most likely) always come from the raw
model log-softmax, before any sampling processing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from tandem.core.outputs.request_output import Logprob

if TYPE_CHECKING:  # the detokenizer process uses the shapes without loading torch
    from torch import Tensor

TopEntry = tuple[int, float, int]  # (token id, logprob, rank)
LogprobDict = dict[int, Logprob]


def top_logprobs(logprobs: Tensor, chosen: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """Logprob, id and rank of ``chosen`` then of the top ``k``, each ``[B, 1 + k]``.

    logprobs: [B, V] raw log-softmax; chosen: [B] int64 (the token each row is about).
    """
    import torch

    picked = logprobs.gather(1, chosen[:, None])  # [B, 1]
    rank = (logprobs > picked).sum(dim=1, keepdim=True) + 1  # [B, 1]
    if k <= 0:
        return picked, chosen[:, None], rank
    top = logprobs.topk(min(k, logprobs.shape[1]), dim=1)  # [B, k]
    k = top.values.shape[1]
    ranks = torch.arange(1, k + 1, device=rank.device).expand(len(chosen), k)
    return (
        torch.cat([picked, top.values], 1),
        torch.cat([chosen[:, None], top.indices], 1),
        torch.cat([rank, ranks], 1),
    )


def entries(vals: Tensor, ids: Tensor, ranks: Tensor, keep: list[int]) -> list[list[TopEntry]]:
    """Rows of :func:`top_logprobs` as ``TopEntry`` lists, row b cut to ``1 + keep[b]``."""
    v, i, r = vals.tolist(), ids.tolist(), ranks.tolist()
    return [list(zip(i[b], v[b], r[b]))[: 1 + keep[b]] for b in range(len(keep))]


def entry(tops: Iterable[TopEntry], decode: Callable[[int], str]) -> LogprobDict:
    """One position's ``{token id: Logprob}``; a token listed twice keeps its first entry."""
    out: LogprobDict = {}
    for tok, lp, rank in tops:
        if tok not in out:
            out[tok] = Logprob(lp, rank, decode(tok))
    return out
