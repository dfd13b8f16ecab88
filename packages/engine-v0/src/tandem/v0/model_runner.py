"""The v0 model runner: owns the model, the paged KV caches and the sampler.

One :meth:`ModelRunner.execute` call is one forward pass over the scheduled batch
(prefills first, then decodes, as the scheduler returns it): it flattens the new tokens,
builds the attention metadata, runs the model, computes logits only where they are
needed (the last position of every sequence that samples, plus the prompt positions of
requests that asked for prompt logprobs) and samples. The sampler is passed in by the
owner, so swapping it never needs a patch.

A failure fails the sequences it concerns, never the step's others: a forward that
raises fails every sequence of the step; a draw or prompt logprobs that fail, that
sequence alone (``StepResult.failed``). The engine finishes them with ``"error"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from tandem.core.layers.attention_metadata import build_metadata
from tandem.core.outputs.logprobs import TopEntry
from tandem.core.outputs.request_output import error_text
from tandem.v0.sampler import Sampler, SampleResult, SamplingRow
from tandem.v0.scheduler import ScheduledSeq
from tandem.v0.sequence import Request
from tandem.v0.spec_verify import verify_drafts


@dataclass(slots=True)
class StepRequest:
    """What the runner does with one scheduled sequence beyond computing its K/V."""

    item: ScheduledSeq
    row: SamplingRow | None = None  # set when this step ends the sequence's known tokens
    prompt_logprobs: int | None = None  # top-k of prompt logprobs wanted for this chunk
    drafts: list[int] = field(default_factory=list)  # speculative tokens fed after the row's
    draft_probs: Tensor | None = None  # their draft-model probabilities (None: certain)

    @classmethod
    def of(cls, item: ScheduledSeq, req: Request) -> StepRequest:
        """What ``item`` (a sequence of ``req``) needs this step."""
        seq, r = item.seq, req.request
        row = None
        if item.completes:
            row = SamplingRow(
                r.sampling,
                r.prompt_token_ids,
                seq.output_token_ids,
                seq.seed,
                r.stop.min_tokens,
                r.stop.banned,
                seq.grammar,
            )
        plp = None
        end = item.start + item.num_new_tokens
        if (
            req.wants_prompt_logprobs
            and end >= req.num_prompt_logprobs_done
            and item.start < len(req.prompt_token_ids) - 1
        ):
            plp = r.sampling.prompt_logprobs
        drafts = seq.draft_token_ids[: item.num_drafts]
        return cls(item, row, plp, drafts, seq.draft_probs if drafts else None)


@dataclass(slots=True)
class StepResult:
    samples: dict[int, SampleResult] = field(default_factory=dict)  # seq_id -> sample
    # seq_id -> (first prompt position, entries); entry i scores the token at position+1
    prompt_logprobs: dict[int, tuple[int, list[list[TopEntry]]]] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)  # seq_id -> why it failed this step
    # seq_id -> the accepted drafts and the token after them (speculative rows only)
    accepted: dict[int, list[SampleResult]] = field(default_factory=dict)


class ModelRunner:
    def __init__(
        self,
        model: Any,
        kv_caches: list[tuple[Tensor, Tensor]],
        block_size: int,
        sampler: Sampler,
        device: torch.device | str = "cpu",
        grouped: bool = False,
    ) -> None:
        if not callable(getattr(model, "compute_logits", None)):
            raise TypeError(f"model must have compute_logits(), got {type(model).__name__}")
        if not callable(sampler):
            raise TypeError(f"sampler must be callable, got {type(sampler).__name__}")
        self.model = model
        self.kv_caches = kv_caches
        self.block_size = block_size
        self.sampler = sampler
        self.device = torch.device(device)
        # the local layers read their own pool through seq.local_table
        self.grouped = grouped

    @torch.inference_mode()
    def execute(self, batch: Sequence[StepRequest]) -> StepResult:
        result = StepResult()
        if not batch:
            return result
        ids: list[int] = []
        positions: list[int] = []
        query_lens: list[int] = []
        seq_lens: list[int] = []
        tables: list[list[int]] = []
        local: list[list[int]] = []
        for req in batch:
            it = req.item
            end = it.start + it.num_new_tokens
            ids += it.seq.token_slice(it.start, end - len(req.drafts)) + req.drafts
            positions += range(it.start, end)
            query_lens.append(it.num_new_tokens)
            seq_lens.append(end)
            tables.append(it.seq.block_table)
            local.append(it.seq.local_table)
        try:
            hidden = self._forward(ids, positions, query_lens, seq_lens, tables, local)  # [T, C]
        except Exception as exc:
            why = error_text(exc)
            result.failed.update((req.item.seq.seq_id, why) for req in batch)
            return result
        offsets = [0]
        for q in query_lens:
            offsets.append(offsets[-1] + q)
        for b, req in enumerate(batch):
            if req.prompt_logprobs is not None:
                try:
                    self._prompt_logprobs(req, hidden[offsets[b] : offsets[b + 1]], result)
                except Exception as exc:
                    result.failed[req.item.seq.seq_id] = error_text(exc)
        failed = result.failed
        chosen = [
            (b, r)
            for b, r in enumerate(batch)
            if r.row is not None and r.item.seq.seq_id not in failed
        ]
        spec = [(b, r) for b, r in chosen if r.drafts]
        chosen = [(b, r) for b, r in chosen if not r.drafts]
        if chosen:
            last = torch.tensor([offsets[b + 1] - 1 for b, _ in chosen], device=self.device)
            self._sample([r for _, r in chosen], hidden[last], result)
        if spec:
            self._verify(spec, offsets, hidden, result)
        return result

    def _verify(
        self,
        spec: list[tuple[int, StepRequest]],
        offsets: list[int],
        hidden: Tensor,
        result: StepResult,
    ) -> None:
        # every position of a speculative row: its last known token's, then each draft's
        rows = [i for b, _ in spec for i in range(offsets[b], offsets[b + 1])]
        try:
            logits = self.model.compute_logits(hidden[torch.tensor(rows, device=self.device)])
        except Exception as exc:
            why = error_text(exc)
            result.failed.update((r.item.seq.seq_id, why) for _, r in spec)
            return
        at = 0
        for _, r in spec:
            n = len(r.drafts) + 1
            assert r.row is not None
            out = verify_drafts(self.sampler, logits[at : at + n], r.row, r.drafts, r.draft_probs)
            at += n
            if out[0].error is not None:
                result.failed[r.item.seq.seq_id] = out[0].error
            else:
                result.accepted[r.item.seq.seq_id] = out

    def _forward(
        self,
        ids: list[int],
        positions: list[int],
        query_lens: list[int],
        seq_lens: list[int],
        tables: list[list[int]],
        local: list[list[int]],
    ) -> Tensor:
        dev = self.device
        meta = build_metadata(query_lens, seq_lens, tables, self.block_size, device=dev)
        if self.grouped:
            meta.local = build_metadata(query_lens, seq_lens, local, self.block_size, device=dev)
        input_ids = torch.tensor(ids, dtype=torch.int64, device=dev)  # [T]
        pos = torch.tensor(positions, dtype=torch.int64, device=dev)  # [T]
        return self.model.forward(input_ids, pos, self.kv_caches, meta)  # [T, C]

    def _sample(self, batch: list[StepRequest], hidden: Tensor, result: StepResult) -> None:
        # hidden: [S, C] at the last position of each sampling sequence
        try:
            logits = self.model.compute_logits(hidden)  # [S, V]
        except Exception as exc:
            why = error_text(exc)
            result.failed.update((r.item.seq.seq_id, why) for r in batch)
            return
        for r, sample in zip(batch, self.sampler(logits, [r.row for r in batch])):
            seq = r.item.seq
            if sample.error is None and seq.grammar is not None:
                try:  # the grammar advances over the token; a refusal fails this sequence
                    seq.grammar.accept(sample.token_id)
                    sample.ends = seq.grammar.terminated
                except Exception as exc:
                    sample.error = error_text(exc)
            if sample.error is not None:
                result.failed[seq.seq_id] = sample.error
            else:
                result.samples[seq.seq_id] = sample

    def _prompt_logprobs(self, req: StepRequest, hidden: Tensor, result: StepResult) -> None:
        # hidden: [Q, C] for positions start .. start+Q-1; position p predicts token p+1
        it = req.item
        seq = it.seq
        stop = min(it.start + it.num_new_tokens, seq.num_prompt_tokens - 1)
        count = stop - it.start
        if count <= 0:
            return
        logits = self.model.compute_logits(hidden[:count])  # [count, V]
        nxt = seq.prompt_token_ids[it.start + 1 : stop + 1]
        entries = self.sampler.prompt_logprobs(logits, nxt, req.prompt_logprobs)
        result.prompt_logprobs[seq.seq_id] = (it.start, entries)
