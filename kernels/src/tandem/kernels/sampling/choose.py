"""The last step of sampling, one definition for both engines.

Which processors run, and in which order, decides the token a seed draws: v0 and v1 call
this same function so that their seeded samples agree token for token.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tandem.kernels.ops.sampling import sample_seeded
from tandem.kernels.sampling.processors import (
    apply_min_p,
    apply_temperature,
    apply_top_k,
    apply_top_p,
)


def choose_tokens(
    logits: Tensor,
    temperature: Tensor,
    top_k: Tensor,
    top_p: Tensor,
    min_p: Tensor,
    seeds: Tensor,
    counters: Tensor,
) -> Tensor:
    """Token ids [B] from processed logits [B, V] (penalties and bans already applied).

    Rows with temperature 0 take the argmax; the others are scaled by their temperature,
    filtered by top-k, then top-p, then min-p, and drawn with ``sample_seeded(seeds,
    counters)``. Per-row tensors: temperature, top_p, min_p float32 [B]; top_k,
    seeds, counters int64 [B].
    """
    tokens = logits.argmax(dim=-1)  # [B]
    greedy = temperature == 0
    if bool(greedy.all()):
        return tokens
    drawn = sample_seeded(filtered_probs(logits, temperature, top_k, top_p, min_p), seeds, counters)
    return torch.where(greedy, tokens, drawn)


def filtered_probs(
    logits: Tensor, temperature: Tensor, top_k: Tensor, top_p: Tensor, min_p: Tensor
) -> Tensor:
    """The distributions [B, V] sampled rows draw from: processed logits scaled by their
    temperature, filtered by top-k, then top-p, then min-p, softmaxed in float32. The
    verify step of speculative decoding reads the same distributions."""
    x = apply_temperature(logits, temperature)
    x = apply_top_k(x, top_k)
    x = apply_top_p(x, top_p)
    x = apply_min_p(x, min_p)
    return x.float().softmax(dim=-1)
