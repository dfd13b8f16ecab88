"""The batched sampler: every row of a step sampled with tensor ops only.

Order (shared with engine v0, so seeded draws agree token for token): min-tokens
mask, grammar mask (structured outputs), logit bias, penalties, temperature, top-k,
top-p, min-p, then greedy argmax or a seeded draw whose counter is the index of the
output token being sampled. Logprobs come from the raw log-softmax, before any
processing.

One row never fails the others: when the batched call raises, the rows are sampled
again one at a time and those that still raise fail alone; a row whose logits come out
of processing with no finite maximum (NaN, +inf, or every token masked) fails too.
Every row's draw depends on that row only, so a row sampled alone gets the token it
would have got in the batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from tandem.core.outputs.logprobs import top_logprobs
from tandem.core.outputs.request_output import error_text
from tandem.core.structured.bitmask import GrammarMask, apply_mask
from tandem.kernels.sampling import apply_penalties, choose_tokens, greedy_with_logprob
from tandem.v1.worker.input_batch import InputBatch

INVALID = "ValueError: the sampler got no valid distribution (NaN or infinite logits)"


NO_IDS = torch.zeros(0, dtype=torch.int64)  # shared, never written: every use reads it


def _no_ids() -> Tensor:
    return NO_IDS


@dataclass(slots=True)
class SamplingBatch:
    rows: Tensor  # [B] int64 rows of the input batch
    counters: Tensor  # [B] int64 index of the token being sampled
    mask_rows: Tensor  # [K] int64 (index into B) of tokens banned by min_tokens
    mask_tokens: Tensor  # [K] int64
    max_logprobs: int  # largest top-k logprobs asked for in the batch (-1: none)
    any_penalties: bool
    any_sampling: bool
    bias_rows: Tensor = field(default_factory=_no_ids)  # [L] int64 (index into B)
    bias_tokens: Tensor = field(default_factory=_no_ids)  # [L] int64 logit_bias ids
    bias_values: Tensor = field(default_factory=_no_ids)  # [L] float32 their biases
    grammar: GrammarMask | None = None  # the constrained rows' allowed tokens
    # [B, V] int32 tokens each row counts as output on top of the batch's (the drafts
    # before a speculative draw), for penalties; None: nothing more
    history: Tensor | None = None

    def pick(self, i: int) -> SamplingBatch:
        """Row ``i`` alone, with the batch's flags (so its draw is the batch's)."""
        mine = self.mask_rows == i
        biased = self.bias_rows == i
        return SamplingBatch(
            self.rows[i : i + 1],
            self.counters[i : i + 1],
            torch.zeros_like(self.mask_rows[mine]),
            self.mask_tokens[mine],
            self.max_logprobs,
            self.any_penalties,
            self.any_sampling,
            torch.zeros_like(self.bias_rows[biased]),
            self.bias_tokens[biased],
            self.bias_values[biased],
            self.grammar.pick(i) if self.grammar is not None else None,
            self.history[i : i + 1] if self.history is not None else None,
        )


@dataclass(slots=True)
class SamplerOutput:
    tokens: Tensor  # [B] int64
    logprobs: Tensor  # [B, 1 + k] raw logprob of the sampled token, then of the top k
    token_ids: Tensor  # [B, 1 + k]
    ranks: Tensor  # [B, 1 + k]
    failed: dict[int, str] = field(default_factory=dict)  # row -> why (its values are junk)


class Sampler:
    def __call__(self, logits: Tensor, batch: InputBatch, sb: SamplingBatch) -> SamplerOutput:
        # logits: [B, V]
        try:
            return _sample(logits.float(), batch, sb)
        except Exception:
            return _one_by_one(logits.float(), batch, sb)


def _sample(logits: Tensor, batch: InputBatch, sb: SamplingBatch) -> SamplerOutput:
    # logits: [B, V] float32
    touched = sb.mask_rows.numel() or sb.bias_rows.numel() or sb.grammar is not None
    if not (sb.any_sampling or sb.any_penalties or touched) and sb.max_logprobs < 0:
        return _greedy(logits)
    raw = logits.log_softmax(dim=-1)  # [B, V]
    rows = sb.rows
    x = process(logits, batch, sb)
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
    failed = _invalid(x.amax(dim=-1))
    if sb.grammar is not None:
        failed.update(sb.grammar.failed)
    return SamplerOutput(tokens, lp, ids, ranks, failed)


def process(logits: Tensor, batch: InputBatch, sb: SamplingBatch) -> Tensor:
    """The logits a row draws from, before temperature: the min-tokens mask, grammar
    mask, logit bias and penalties applied. A row whose grammar allows only what
    min_tokens bans (the constrained output is complete) keeps the grammar's tokens.
    logits: [B, V] float32."""
    x = logits
    rows = sb.rows
    if sb.mask_rows.numel():
        x = x.index_put((sb.mask_rows, sb.mask_tokens), torch.tensor(float("-inf")))
    if sb.grammar is not None:
        unbanned = apply_mask(logits, sb.grammar) if sb.mask_rows.numel() else None
        x = apply_mask(x, sb.grammar)
        if unbanned is not None:  # the constraint ends the output: min_tokens yields
            dead = ~torch.isfinite(x.amax(dim=-1, keepdim=True))  # [B, 1]
            x = torch.where(dead, unbanned, x)
    if sb.bias_rows.numel():
        bias = sb.bias_values.to(x.device)
        x = x.index_put((sb.bias_rows.to(x.device), sb.bias_tokens.to(x.device)), bias, True)
    if sb.any_penalties:
        counts = batch.output_counts[rows]
        if sb.history is not None:
            counts = counts + sb.history
        x = apply_penalties(
            x,
            batch.prompt_mask[rows],
            counts,
            batch.presence[rows],
            batch.frequency[rows],
            batch.repetition[rows],
        )
    return x


def _greedy(logits: Tensor) -> SamplerOutput:
    """All rows greedy, nothing masked, no top logprobs: the argmax (rank 1 by
    definition) and its raw logprob in one pass."""
    tokens, picked = greedy_with_logprob(logits)  # [B], [B]
    ranks = torch.ones_like(tokens)[:, None]
    return SamplerOutput(tokens, picked[:, None], tokens[:, None], ranks, _invalid(picked))


def _invalid(values: Tensor) -> dict[int, str]:
    """Rows whose value is not finite. values: [B] (read as Python floats: a step's
    rows are few, and two tensor ops cost more than the read)."""
    return {i: INVALID for i, v in enumerate(values.tolist()) if not math.isfinite(v)}


def _one_by_one(logits: Tensor, batch: InputBatch, sb: SamplingBatch) -> SamplerOutput:
    """Each row alone; a row that raises fails with what it raised."""
    parts: list[SamplerOutput] = []
    failed: dict[int, str] = {}
    for i in range(logits.shape[0]):
        try:
            part = _sample(logits[i : i + 1], batch, sb.pick(i))
        except Exception as exc:
            failed[i] = error_text(exc)
            part = _placeholder(logits, min(max(sb.max_logprobs, 0), logits.shape[1]))
        if part.failed:
            failed[i] = part.failed[0]
        parts.append(part)
    return SamplerOutput(
        torch.cat([p.tokens for p in parts]),
        torch.cat([p.logprobs for p in parts]),
        torch.cat([p.token_ids for p in parts]),
        torch.cat([p.ranks for p in parts]),
        failed,
    )


def _placeholder(logits: Tensor, k: int) -> SamplerOutput:
    """The shape of one row's output, for a row that failed."""
    ids = torch.zeros((1, 1 + k), dtype=torch.int64, device=logits.device)
    return SamplerOutput(ids[:, 0], torch.zeros((1, 1 + k), device=logits.device), ids, ids)
