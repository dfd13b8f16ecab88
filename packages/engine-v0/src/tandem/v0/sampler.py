"""The v0 sampler: logits of one position per sequence -> one token each.

Order of work per row: ``min_tokens`` masks the stop ids, penalties, then either
argmax (greedy, temperature 0) or temperature, top-k, top-p, min-p and a seeded draw
through :func:`tandem.kernels.sampling.sample_seeded` keyed by ``(seed, counter)``,
where the counter is the index of the output token being sampled. A draw therefore
depends on nothing but the row itself, which is what makes a seeded request
reproducible in any batch and in any engine built on the same op.

Logprobs (and their ranks, 1 = most likely) always come from the raw model
log-softmax, before any processing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from tandem.kernels.sampling import apply_penalties, choose_tokens, greedy_with_logprob

TopLogprobs = list[tuple[int, float, int]]  # (token id, logprob, rank)


@dataclass(slots=True)
class SamplingRow:
    """What the sampler needs to know about one sequence."""

    params: Any  # SamplingParams
    prompt_token_ids: Sequence[int]
    output_token_ids: Sequence[int]
    seed: int
    blocked_ids: Sequence[int] = ()  # EOS / stop ids, masked while below min_tokens

    @property
    def counter(self) -> int:
        return len(self.output_token_ids)


@dataclass(slots=True)
class SampleResult:
    token_id: int
    logprob: float  # raw model logprob of token_id
    rank: int
    top: TopLogprobs | None = field(default=None)  # when params.logprobs is set


def _column(values: list[float] | list[int], dtype: torch.dtype, device: torch.device) -> Tensor:
    return torch.tensor(values, dtype=dtype, device=device)


def rank_of(logprobs: Tensor, token_ids: Tensor) -> Tensor:
    """1-based rank of each chosen token in its row; logprobs: [B, V], token_ids: [B]."""
    chosen = logprobs.gather(1, token_ids[:, None])  # [B, 1]
    return (logprobs > chosen).sum(dim=1) + 1


def top_logprobs(logprobs: Tensor, k: int) -> TopLogprobs:
    """The k most likely tokens of one row of logprobs [V], with ranks 1..k."""
    if k <= 0:
        return []
    values, ids = logprobs.topk(min(k, logprobs.shape[0]))
    return [(int(i), float(v), r + 1) for r, (i, v) in enumerate(zip(ids, values))]


def _plain_greedy(row: SamplingRow) -> bool:
    """Temperature 0 with nothing that changes the logits and no top logprobs asked."""
    p = row.params
    return (
        p.greedy
        and not p.has_penalties
        and p.logprobs is None
        and not (row.blocked_ids and row.counter < p.min_tokens)
    )


def _greedy(logits: Tensor) -> list[SampleResult]:
    """Argmax rows: rank 1 by definition, with the raw logprob of the argmax."""
    tokens, picked = greedy_with_logprob(logits)  # [B], [B]
    return [SampleResult(t, lp, 1) for t, lp in zip(tokens.tolist(), picked.tolist())]


class Sampler:
    """Stateless: everything a row needs travels in its :class:`SamplingRow`."""

    def __call__(self, logits: Tensor, rows: Sequence[SamplingRow]) -> list[SampleResult]:
        # logits: [B, V]
        if logits.dim() != 2 or logits.shape[0] != len(rows):
            raise ValueError(
                f"logits must be [len(rows)={len(rows)}, V], got {tuple(logits.shape)}"
            )
        if not rows:
            return []
        if all(_plain_greedy(row) for row in rows):
            return _greedy(logits.float())
        raw = logits.float().log_softmax(dim=-1)  # [B, V]
        x = self._process(logits.float().clone(), rows)
        tokens = self._choose(x, rows)  # [B]
        chosen = raw.gather(1, tokens[:, None]).squeeze(1).tolist()  # [B]
        ranks = rank_of(raw, tokens).tolist()
        out = []
        for b, (row, tok) in enumerate(zip(rows, tokens.tolist())):
            k = row.params.logprobs
            top = top_logprobs(raw[b], k) if k is not None else None
            out.append(SampleResult(tok, chosen[b], ranks[b], top))
        return out

    def _process(self, x: Tensor, rows: Sequence[SamplingRow]) -> Tensor:
        # x: [B, V] float32
        B, V = x.shape
        for b, row in enumerate(rows):
            if row.blocked_ids and row.counter < row.params.min_tokens:
                ids = [t for t in row.blocked_ids if 0 <= t < V]
                x[b, ids] = float("-inf")
        pres = [float(r.params.presence_penalty) for r in rows]
        freq = [float(r.params.frequency_penalty) for r in rows]
        rep = [float(r.params.repetition_penalty) for r in rows]
        if any(pres) or any(freq) or any(v != 1.0 for v in rep):
            prompt_mask = torch.zeros((B, V), dtype=torch.bool, device=x.device)
            counts = torch.zeros((B, V), dtype=torch.int64, device=x.device)
            for b, row in enumerate(rows):
                if row.prompt_token_ids:
                    prompt_mask[b, list(row.prompt_token_ids)] = True
                if row.output_token_ids:
                    ids = torch.tensor(list(row.output_token_ids), device=x.device)
                    counts[b].index_add_(0, ids, torch.ones_like(ids))
            f32 = torch.float32
            x = apply_penalties(
                x,
                prompt_mask,
                counts,
                _column(pres, f32, x.device),
                _column(freq, f32, x.device),
                _column(rep, f32, x.device),
            )
        return x

    def _choose(self, x: Tensor, rows: Sequence[SamplingRow]) -> Tensor:
        # x: [B, V] processed logits -> [B] int64 token ids
        if all(float(r.params.temperature) == 0 for r in rows):
            return x.argmax(dim=-1)
        dev, f32, i64 = x.device, torch.float32, torch.int64
        return choose_tokens(
            x,
            _column([float(r.params.temperature) for r in rows], f32, dev),
            _column([max(0, int(r.params.top_k or 0)) for r in rows], i64, dev),
            _column([float(r.params.top_p) for r in rows], f32, dev),
            _column([float(r.params.min_p) for r in rows], f32, dev),
            _column([r.seed for r in rows], i64, dev),
            _column([r.counter for r in rows], i64, dev),
        )

    def prompt_logprobs(
        self, logits: Tensor, next_ids: Sequence[int], k: int
    ) -> list[dict[int, tuple[float, int]]]:
        """Logprobs of each actual next prompt token plus the top ``k`` of its position.

        logits: [P, V] at prompt positions whose next tokens are ``next_ids`` ([P]).
        Returns one ``{token id: (logprob, rank)}`` per position.
        """
        if logits.shape[0] != len(next_ids):
            raise ValueError(
                f"logits rows ({logits.shape[0]}) must match next_ids ({len(next_ids)})"
            )
        if not next_ids:
            return []
        raw = logits.float().log_softmax(dim=-1)  # [P, V]
        ids = torch.tensor(list(next_ids), dtype=torch.int64, device=raw.device)
        chosen = raw.gather(1, ids[:, None]).squeeze(1)  # [P]
        ranks = rank_of(raw, ids)
        out = []
        for p, tok in enumerate(next_ids):
            entry = {int(tok): (float(chosen[p]), int(ranks[p]))}
            for tid, lp, rank in top_logprobs(raw[p], k):
                entry.setdefault(tid, (lp, rank))
            out.append(entry)
        return out
