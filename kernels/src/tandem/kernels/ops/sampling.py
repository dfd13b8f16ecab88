"""Seeded categorical sampling by an exponential race (the shared engine sampler op)."""

from __future__ import annotations

import torch
from torch import Tensor

from tandem.kernels import checks
from tandem.kernels.ops.library import call, define
from tandem.kernels.rng import seeded_uniform


@define("torch_sample_seeded")
def _sample_seeded(probs: Tensor, seeds: Tensor, counters: Tensor) -> Tensor:
    # argmax(p / E) with E ~ Exp(1) picks token j with probability p_j
    u = seeded_uniform(seeds, counters, probs.shape[1])  # [B, V] float64 in (0, 1)
    race = probs.double() / u.log_().neg_()  # p / E, zero where p == 0
    return race.argmax(dim=-1)


@_sample_seeded.register_fake
def _(probs: Tensor, seeds: Tensor, counters: Tensor) -> Tensor:
    return probs.new_empty((probs.shape[0],), dtype=torch.int64)


def sample_seeded(probs: Tensor, seeds: Tensor, counters: Tensor) -> Tensor:
    """Draw one token per row from ``probs``: [B, V]; returns [B] int64.

    Row b's draw depends only on ``(probs[b], seeds[b], counters[b])``: the engine passes
    the request's seed and the index of the token being generated as the counter. A
    token of probability 0 is never drawn (unless the whole row is 0, which is invalid).
    """
    p = checks.tensor("probs", probs, 2, (torch.float32,))
    s = checks.tensor("seeds", seeds, 1, (torch.int64,))
    c = checks.tensor("counters", counters, 1, (torch.int64,))
    checks.dim("seeds", s, 0, p.shape[0], "probs.shape[0]")
    checks.dim("counters", c, 0, p.shape[0], "probs.shape[0]")
    if p.shape[1] < 1:
        raise ValueError(f"probs must have a vocabulary of >= 1 column, got {tuple(p.shape)}")
    checks.same_device(probs=p, seeds=s, counters=c)
    return call("torch_sample_seeded", probs, seeds, counters)
