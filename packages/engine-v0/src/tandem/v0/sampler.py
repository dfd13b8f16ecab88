"""The v0 sampler: logits of one position per sequence -> one token each.

Order of work per row: ``min_tokens`` masks the stop ids, a grammar (structured
output) masks every token it refuses (when it allows only stop ids, the output is
complete and they stay: the constraint ends the output before ``min_tokens``),
``logit_bias`` is added, penalties, then either
argmax (greedy, temperature 0) or temperature, top-k, top-p, min-p and a seeded draw
through :func:`tandem.kernels.sampling.sample_seeded` keyed by ``(seed, counter)``,
where the counter is the index of the output token being sampled. A draw therefore
depends on nothing but the row itself, which is what makes a seeded request
reproducible in any batch and in any engine built on the same op.

Logprobs (and their ranks, 1 = most likely) always come from the raw model
log-softmax, before any processing.

One row never fails the others: when the batched call raises, each row is sampled
alone and those that still raise fail (``SampleResult.error``); so does a row whose
processed logits have no finite maximum (NaN, +inf, or every token masked), and a row
whose parameters are no float32 the kernels can take (engine v1 refuses those when it
fills the request's row, with the same message).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from tandem.core.inputs.engine_request import SamplingSpec
from tandem.core.outputs.logprobs import TopEntry, entries, top_logprobs
from tandem.core.outputs.request_output import error_text
from tandem.core.structured.bitmask import GrammarMask, apply_mask, build_mask
from tandem.core.structured.state import GrammarState
from tandem.kernels.sampling import apply_penalties, choose_tokens, greedy_with_logprob


@dataclass(slots=True)
class SamplingRow:
    """What the sampler needs to know about one sequence."""

    spec: SamplingSpec
    prompt_token_ids: Sequence[int]
    output_token_ids: Sequence[int]
    seed: int  # this sample's seed (derived from the request's and the sample's index)
    min_tokens: int = 0
    banned: Sequence[int] = ()  # EOS / stop ids, masked while below min_tokens
    grammar: GrammarState | None = None  # the sample's structured-output state (None: free)

    @property
    def counter(self) -> int:
        return len(self.output_token_ids)

    @property
    def masks(self) -> bool:
        return bool(self.banned) and self.counter < self.min_tokens


@dataclass(slots=True)
class SampleResult:
    token_id: int
    logprob: float  # raw model logprob of token_id
    rank: int
    tops: list[TopEntry] | None = None  # the sampled token, then the top k (when asked)
    error: str | None = None  # why this row could not be sampled (then the rest is junk)
    ends: bool = False  # the token completed the row's grammar (set by the model runner)


INVALID = "ValueError: the sampler got no valid distribution (NaN or infinite logits)"


def _column(values: list[float] | list[int], dtype: torch.dtype, device: torch.device) -> Tensor:
    return torch.tensor(values, dtype=dtype, device=device)


def _plain_greedy(row: SamplingRow) -> bool:
    """Temperature 0 with nothing that changes the logits and no top logprobs asked."""
    p = row.spec
    plain = not p.has_penalties and not p.logit_bias and not row.masks and row.grammar is None
    return p.greedy and plain and p.logprobs is None


def _greedy(logits: Tensor) -> list[SampleResult]:
    """Argmax rows: rank 1 by definition, with the raw logprob of the argmax."""
    tokens, picked = greedy_with_logprob(logits)  # [B], [B]
    return [
        SampleResult(t, lp, 1, error=None if math.isfinite(lp) else INVALID)
        for t, lp in zip(tokens.tolist(), picked.tolist())
    ]


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
        try:
            return self._sample(logits.float(), rows)
        except Exception:
            return [self._alone(logits[b : b + 1].float(), row) for b, row in enumerate(rows)]

    def _alone(self, logits: Tensor, row: SamplingRow) -> SampleResult:
        try:
            return self._sample(logits, [row])[0]
        except Exception as exc:
            return SampleResult(-1, 0.0, 0, error=error_text(exc))

    def _sample(self, logits: Tensor, rows: Sequence[SamplingRow]) -> list[SampleResult]:
        # logits: [B, V] float32
        if all(_plain_greedy(row) for row in rows):
            return _greedy(logits)
        raw = logits.log_softmax(dim=-1)  # [B, V]
        mask = build_mask([row.grammar for row in rows], logits.shape[1])
        x = self._process(logits.clone(), rows, mask)
        tokens = self._choose(x, rows)  # [B]
        valid = torch.isfinite(x.amax(dim=-1)).tolist()  # [B]
        keep = [row.spec.logprobs or 0 for row in rows]
        tops = entries(*top_logprobs(raw, tokens, max(keep)), keep)
        failed = mask.failed if mask is not None else {}
        out = []
        for b, (row, top, ok) in enumerate(zip(rows, tops, valid)):
            tok, lp, rank = top[0]
            wanted = top if row.spec.logprobs is not None else None
            why = failed.get(b) or (None if ok else INVALID)
            out.append(SampleResult(tok, lp, rank, wanted, why))
        return out

    def process(self, logits: Tensor, rows: Sequence[SamplingRow]) -> Tensor:
        """The logits [B, V] the draw starts from: bans, logit_bias and penalties applied
        (no grammar: speculative verification, which uses it, skips grammar rows)."""
        return self._process(logits.float().clone(), rows, None)

    def _process(self, x: Tensor, rows: Sequence[SamplingRow], mask: GrammarMask | None) -> Tensor:
        # x: [B, V] float32
        B, V = x.shape
        if mask is not None:
            x = apply_mask(x, mask)
        for b, row in enumerate(rows):
            if row.masks:
                kept = x[b].clone() if mask is not None and row.grammar is not None else None
                x[b, list(row.banned)] = float("-inf")
                if kept is not None and not torch.isfinite(x[b].amax()):
                    x[b] = kept  # the constraint ends the output: min_tokens yields
            if row.spec.logit_bias:
                ids = torch.tensor(list(row.spec.logit_bias), dtype=torch.int64, device=x.device)
                bias = _column(list(row.spec.logit_bias.values()), x.dtype, x.device)
                x[b].index_add_(0, ids, bias)
        pres = [r.spec.presence_penalty for r in rows]
        freq = [r.spec.frequency_penalty for r in rows]
        rep = [r.spec.repetition_penalty for r in rows]
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
        if all(r.spec.greedy for r in rows):
            return x.argmax(dim=-1)
        dev, f32, i64 = x.device, torch.float32, torch.int64
        return choose_tokens(
            x,
            _column([r.spec.temperature for r in rows], f32, dev),
            # a k past the vocabulary keeps every token; below 0 stays invalid for the kernel
            _column([max(min(r.spec.top_k, x.shape[1]), -1) for r in rows], i64, dev),
            _column([r.spec.top_p for r in rows], f32, dev),
            _column([r.spec.min_p for r in rows], f32, dev),
            _column([r.seed for r in rows], i64, dev),
            _column([r.counter for r in rows], i64, dev),
        )

    def prompt_logprobs(
        self, logits: Tensor, next_ids: Sequence[int], k: int
    ) -> list[list[TopEntry]]:
        """Each actual next prompt token's entry, then the top ``k`` of its position.

        logits: [P, V] at prompt positions whose next tokens are ``next_ids`` ([P]).
        """
        if logits.shape[0] != len(next_ids):
            raise ValueError(
                f"logits rows ({logits.shape[0]}) must match next_ids ({len(next_ids)})"
            )
        if not next_ids:
            return []
        raw = logits.float().log_softmax(dim=-1)  # [P, V]
        ids = torch.tensor(list(next_ids), dtype=torch.int64, device=raw.device)  # [P]
        return entries(*top_logprobs(raw, ids, k), [k] * len(next_ids))
