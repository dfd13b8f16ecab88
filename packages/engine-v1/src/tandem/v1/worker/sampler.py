"""The batched sampler: every row of a step sampled with tensor ops only.

Order (shared with engine v0, so seeded draws agree token for token): min-tokens
mask, penalties, temperature, top-k, top-p, min-p, then greedy argmax or a seeded draw
whose counter is the index of the output token being sampled. Logprobs come from the
raw log-softmax, before any processing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tandem.core.logprobs import top_logprobs
from tandem.kernels.sampling import apply_penalties, choose_tokens, greedy_with_logprob
from tandem.v1.worker.input_batch import InputBatch


@dataclass(slots=True)
class SamplingBatch:
    rows: Tensor  # [B] int64 rows of the input batch
    counters: Tensor  # [B] int64 index of the token being sampled
    mask_rows: Tensor  # [K] int64 (index into B) of tokens banned by min_tokens
    mask_tokens: Tensor  # [K] int64
    max_logprobs: int  # largest top-k logprobs asked for in the batch (-1: none)
    any_penalties: bool
    any_sampling: bool


@dataclass(slots=True)
class SamplerOutput:
    tokens: Tensor  # [B] int64
    logprobs: Tensor  # [B, 1 + k] raw logprob of the sampled token, then of the top k
    token_ids: Tensor  # [B, 1 + k]
    ranks: Tensor  # [B, 1 + k]


class Sampler:
    def __call__(self, logits: Tensor, batch: InputBatch, sb: SamplingBatch) -> SamplerOutput:
        # logits: [B, V]
        logits = logits.float()
        if (
            not (sb.any_sampling or sb.any_penalties or sb.mask_rows.numel())
            and sb.max_logprobs < 0
        ):
            return _greedy(logits)
        raw = logits.log_softmax(dim=-1)  # [B, V]
        rows = sb.rows
        x = logits
        if sb.mask_rows.numel():
            x = x.index_put((sb.mask_rows, sb.mask_tokens), torch.tensor(float("-inf")))
        if sb.any_penalties:
            x = apply_penalties(
                x,
                batch.prompt_mask[rows],
                batch.output_counts[rows],
                batch.presence[rows],
                batch.frequency[rows],
                batch.repetition[rows],
            )
        if sb.any_sampling:
            tokens = choose_tokens(
                x,
                batch.temperature[rows],
                batch.top_k[rows],
                batch.top_p[rows],
                batch.min_p[rows],
                batch.seeds[rows],
                sb.counters,
            )
        else:
            tokens = x.argmax(dim=-1)
        lp, ids, ranks = top_logprobs(raw, tokens, max(sb.max_logprobs, 0))
        return SamplerOutput(tokens, lp, ids, ranks)


def _greedy(logits: Tensor) -> SamplerOutput:
    """All rows greedy, nothing masked, no top logprobs: the argmax (rank 1 by
    definition) and its raw logprob in one pass."""
    tokens, picked = greedy_with_logprob(logits)  # [B], [B]
    return SamplerOutput(tokens, picked[:, None], tokens[:, None], torch.ones_like(tokens)[:, None])
