"""A step's draws: the sampled rows' logits -> the sampler -> their new tokens.

A sampled row draws one token at its last computed token; a row verifying drafts
draws at each of its ``1 + k`` last tokens, all in the same sampler call, and keeps
the tokens :mod:`tandem.v1.worker.spec` says (1 .. k + 1). The kept tokens join the
input batch, a grammar (structured outputs) takes them, and the proposer (when
speculative decoding is on) guesses the next step's drafts from them.

A failure fails the requests it concerns only: a draw that comes out invalid fails its
request when it is one of the kept positions (a rejected draft's position is never
used, whatever it drew).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import torch
from torch import Tensor

from tandem.core.inputs.engine_request import SamplingSpec
from tandem.core.outputs.logprobs import TopEntry, entries, top_logprobs
from tandem.core.outputs.request_output import error_text
from tandem.core.parallel.group import CollectiveError
from tandem.core.structured.bitmask import build_mask
from tandem.v1.core.step import ScheduledRequest, StepOutput
from tandem.v1.worker import spec
from tandem.v1.worker.input_batch import InputBatch
from tandem.v1.worker.propose import Ask, Proposer
from tandem.v1.worker.sampler import NO_IDS, Sampler, SamplingBatch, process

I64 = torch.int64


class Drawer:
    def __init__(
        self, model: Any, batch: InputBatch, sampler: Sampler, proposer: Proposer | None
    ) -> None:
        self.model = model
        self.batch = batch
        self.sampler = sampler
        self.proposer = proposer

    def __call__(self, rows: list[ScheduledRequest], hidden: Tensor, result: StepOutput) -> None:
        """Draw for the sampled ``rows`` of a step whose hidden states are ``hidden``."""
        ends = [n - 1 for n in accumulate(r.num_tokens for r in rows)]
        done = [i for i, r in enumerate(rows) if r.sample and r.key not in result.failed]
        if not done:
            return
        chosen = [rows[i] for i in done]
        draws = spec.layout(chosen, [ends[i] for i in done])
        try:
            logits = self.model.compute_logits(hidden[draws.positions.to(hidden.device)])
        except CollectiveError:
            raise
        except Exception as exc:
            why = error_text(exc)
            result.failed.update((r.key, why) for r in chosen)
            return
        batch = self.batch
        specs = [batch.specs[batch.rows[r.key]] for r in chosen]
        sb = self._sampling_batch(chosen, specs, draws)
        out = self.sampler(logits, batch, sb)  # logits: [P, V]
        drawn = out.tokens.cpu().tolist()
        asked = [specs[i].logprobs or 0 for i in draws.owners]
        tops = entries(out.logprobs, out.token_ids, out.ranks, asked)
        kept: list[tuple[int, list[int]]] = []  # (batch row, its new tokens)
        x = None  # every draw's processed logits, when a sampled row verifies drafts
        for i, r in enumerate(chosen):
            lo, n = draws.first[i], draws.count[i]
            try:
                if r.spec_tokens and not specs[i].greedy:
                    if x is None:
                        x = process(logits.float(), batch, sb)
                    new, row_tops = self._verify(r, x[lo : lo + n], logits[lo : lo + n], specs[i])
                else:
                    new = drawn[lo : lo + 1 + spec.kept(r.spec_tokens, drawn[lo : lo + n])]
                    row_tops = tops[lo : lo + len(new)]
            except CollectiveError:
                raise
            except Exception as exc:
                result.failed[r.key] = error_text(exc)
                continue
            bad = [out.failed[p] for p in range(lo, lo + len(new)) if p in out.failed]
            if bad:
                result.failed[r.key] = bad[0]
                continue
            if not self._advance(r.key, new, result):
                continue
            kept.append((batch.rows[r.key], new))
            result.sampled[r.key] = new
            result.sampled_logprob[r.key] = [t[0][1] for t in row_tops]
            if specs[i].logprobs is not None:
                result.logprobs[r.key] = row_tops
        self._append(kept)
        if self.proposer is not None:
            self._propose(chosen, result)

    def _verify(
        self, r: ScheduledRequest, x: Tensor, logits: Tensor, s: SamplingSpec
    ) -> tuple[list[int], list[list[TopEntry]]]:
        """A sampled row's verify (:func:`spec.verify_row`): its new tokens and their
        entries from the raw log-softmax at their positions. x, logits: [k + 1, V]."""
        q = self.proposer.probs(r.key, len(r.spec_tokens)) if self.proposer else None
        b = self.batch.rows[r.key]
        new = spec.verify_row(x, self.batch, b, r.spec_tokens, q, r.counter)
        raw = logits[: len(new)].float().log_softmax(dim=-1)
        keep = s.logprobs or 0
        chosen = torch.tensor(new, dtype=I64, device=raw.device)
        return new, entries(*top_logprobs(raw, chosen, keep), [keep] * len(new))

    def _append(self, kept: list[tuple[int, list[int]]]) -> None:
        """Record the new tokens in the input batch, one batched call per position."""
        for j in range(max((len(new) for _, new in kept), default=0)):
            at = [(b, new[j]) for b, new in kept if len(new) > j]
            self.batch.append(
                torch.tensor([b for b, _ in at], dtype=I64),
                torch.tensor([t for _, t in at], dtype=I64),
            )

    def _propose(self, rows: list[ScheduledRequest], result: StepOutput) -> None:
        """Drafts for the next step of each row that drew and may speculate: never past
        its room (the next step yields one token more than the drafts it keeps)."""
        go = [r for r in rows if r.draft_room > 0 and r.key in result.sampled]
        if not go:
            return
        asks = []
        for r in go:
            n = len(result.sampled[r.key])
            asks.append(Ask(r.key, r.draft_room - n - 1, r.counter + n))
        drafts = self.proposer.propose(self.batch, asks)
        for r, d in zip(go, drafts):
            if d:
                result.drafts[r.key] = d

    def _advance(self, key: str, tokens: list[int], result: StepOutput) -> bool:
        """The request's grammar (if any) takes ``tokens``; False when it refused one."""
        state = self.batch.grammars[self.batch.rows[key]]
        if state is None:
            return True
        try:
            for tok in tokens:
                state.accept(tok)
        except Exception as exc:
            result.failed[key] = error_text(exc)
            return False
        if state.terminated:
            result.ended.add(key)
        return True

    def _sampling_batch(
        self, rows: list[ScheduledRequest], specs: list[SamplingSpec], draws: spec.Draws
    ) -> SamplingBatch:
        """The sampler's view of every draw. The masks, biases and grammar states are
        gathered only when some row has them (a plain decode step builds none)."""
        counters = [r.counter for r in rows]
        history = None
        if draws.speculative:
            rows = [rows[i] for i in draws.owners]
            specs = [specs[i] for i in draws.owners]
            counters = [r.counter + j for r, j in zip(rows, draws.steps)]
            if any(s.has_penalties for s in specs):
                history = spec.history(draws, rows, self.batch.vocab_size)
        sb = SamplingBatch(
            rows=torch.tensor([self.batch.rows[r.key] for r in rows], dtype=I64),
            counters=torch.tensor(counters, dtype=I64),
            mask_rows=_ids([i for i, r in enumerate(rows) for _ in r.banned]),
            mask_tokens=_ids([t for r in rows for t in r.banned]),
            max_logprobs=max((s.logprobs for s in specs if s.logprobs is not None), default=-1),
            any_penalties=any(s.has_penalties for s in specs),
            any_sampling=any(not s.greedy for s in specs),
            history=history,
        )
        if any(s.logit_bias for s in specs):
            sb.bias_rows = _ids([i for i, s in enumerate(specs) for _ in s.logit_bias])
            sb.bias_tokens = _ids([t for s in specs for t in s.logit_bias])
            values = [v for s in specs for v in s.logit_bias.values()]
            sb.bias_values = torch.tensor(values, dtype=torch.float32)
        if any(s.grammar is not None for s in specs):
            states = [self.batch.grammars[self.batch.rows[r.key]] for r in rows]
            sb.grammar = build_mask(states, self.batch.vocab_size)
        return sb


def _ids(values: Sequence[int]) -> Tensor:
    return torch.tensor(values, dtype=I64) if values else NO_IDS
