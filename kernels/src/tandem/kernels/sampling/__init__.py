"""Sampling shared by both engines: seeded draws, seeds of ``n`` samples, logit processors.

Both engines build their samplers from these functions, so a seeded request yields the
same tokens in v0 and v1 whatever the batch around it.
"""

from __future__ import annotations

from tandem.kernels.ops.sampling import sample_seeded
from tandem.kernels.rng import derive_seed, seeded_uniform
from tandem.kernels.sampling.choose import choose_tokens, filtered_probs
from tandem.kernels.sampling.greedy import greedy_with_logprob
from tandem.kernels.sampling.processors import (
    apply_min_p,
    apply_penalties,
    apply_temperature,
    apply_top_k,
    apply_top_p,
)

__all__ = [
    "apply_min_p",
    "apply_penalties",
    "apply_temperature",
    "apply_top_k",
    "apply_top_p",
    "choose_tokens",
    "derive_seed",
    "filtered_probs",
    "greedy_with_logprob",
    "sample_seeded",
    "seeded_uniform",
]
