"""Runs one scheduled step: batch -> model forward -> draws (:mod:`tandem.v1.worker.draw`).

Rows are laid out prefills first (whole prompts, chunks, recomputes, decodes that
verify drafts), then plain decodes, as the attention metadata requires. Only requests
whose every known token is computed after this step are sampled; a partial chunk only
fills the cache.

A failure fails the requests it concerns, never the step's others: a request whose
state does not fit the batch, or whose draw or prompt logprobs fail, fails alone; a
forward that raises fails the requests of that step. The scheduler finishes them with
``"error"`` and the engine goes on. A failed collective of a tensor-parallel rank is not a
request's failure: it propagates, and the rank (then the engine) stops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tandem.core.engine.loader import load_engine_model
from tandem.core.kv.cache import allocate_kv_caches
from tandem.core.kv.memory import available_memory
from tandem.core.layers.attention_metadata import build_metadata
from tandem.core.models.plan import plan_model
from tandem.core.outputs.logprobs import TopEntry, entries, top_logprobs
from tandem.core.outputs.request_output import error_text
from tandem.core.parallel.group import CollectiveError, TensorParallel
from tandem.core.structured.compiler import LazyGrammars
from tandem.v1.core.step import ScheduledRequest, SchedulerOutput, StepOutput
from tandem.v1.worker.draw import Drawer
from tandem.v1.worker.input_batch import InputBatch
from tandem.v1.worker.propose import make_proposer
from tandem.v1.worker.sampler import Sampler
from tandem.v1.worker.spec import place_drafts

if TYPE_CHECKING:
    from tandem.core.config.engine_args import EngineConfig


def _available(config: EngineConfig, tp: TensorParallel | None) -> int | None:
    """The memory left after the weights where the KV cache takes a share of it: once
    every rank of a tensor-parallel group has loaded its shard, the least any rank sees,
    so that every rank sizes the same cache."""
    if not config.cache.needs_memory:
        return None
    if tp is not None:
        tp.barrier()
    available = available_memory(config.device)
    return available if tp is None else tp.least(available)


class ModelRunner:
    """The worker of one process: the whole model, or (``tp``) this rank's shard of it."""

    def __init__(
        self, config: EngineConfig, sampler: Sampler | None = None, tp: TensorParallel | None = None
    ) -> None:
        config.configure_process()
        self.config = config
        mc = config.model
        self.device = config.device
        self.model = load_engine_model(config, tp)
        self.plan = plan_model(self.model, config).table()  # for the front (Ready)
        self.attention_backend = config.kernels.attention  # EngineArgs', the env's, or the best
        self.block_size = config.cache.block_size
        model_len = mc.max_model_len
        self.num_kv_blocks = config.resolve_kv_cache(_available(config, tp))
        if mc.max_model_len != model_len:  # the front warns: it learns it from Ready
            self.model.set_max_model_len(mc.max_model_len)
        self.kv_caches = allocate_kv_caches(
            mc.num_layers,
            config.kv_heads_per_rank,
            mc.head_dim,
            config.cache.layer_blocks(),  # with a window, each pool's null block too
            self.block_size,
            config.dtype,
            config.device,
        )
        # structured outputs: this process samples, so it owns the grammars
        grammars = LazyGrammars(config)
        self.batch = InputBatch(
            config.scheduler.max_num_seqs, mc.max_model_len, mc.vocab_size, grammars
        )
        self.sampler = sampler if sampler is not None else Sampler()
        self.proposer = make_proposer(config)
        self.draw = Drawer(self.model, self.batch, self.sampler, self.proposer)

    @property
    def max_model_len(self) -> int:
        """The context this runner's cache was sized for (shortened where the model's
        did not fit and max_model_len was not given)."""
        return self.config.model.max_model_len

    @property
    def num_local_kv_blocks(self) -> int:
        """The local layers' pool where they have one (Gemma 2 and 3), else 0."""
        return self.config.cache.num_local_blocks or 0

    @property
    def kv_source(self) -> str:
        """What sized the cache (for messages)."""
        return self.config.cache.kv_source

    @torch.inference_mode()
    def execute(self, step: SchedulerOutput) -> StepOutput:
        result = StepOutput()
        for key in step.dropped:  # requests that left since the last step free their rows
            self.batch.remove(key)
            if self.proposer is not None:
                self.proposer.drop(key)
        for new in step.new:
            try:
                self.batch.add(new)
            except Exception as exc:
                result.failed[new.key] = error_text(exc)
        rows = sorted(
            (r for r in step.scheduled if r.key not in result.failed), key=lambda r: r.is_decode
        )
        if not rows:
            return result
        place_drafts(self.batch, rows)
        try:
            hidden = self._forward(rows)  # [T, C]
        except CollectiveError:
            raise
        except Exception as exc:
            why = error_text(exc)
            result.failed.update((r.key, why) for r in rows)
            return result
        self._prompt_logprobs(rows, hidden, result)
        self.draw(rows, hidden, result)
        return result

    def check_health(self) -> None:
        """Nothing to watch: the model runs in this process."""

    def shutdown(self) -> None:
        """Nothing to stop: the model's memory goes with this object."""

    def _forward(self, rows: list[ScheduledRequest]) -> Tensor:
        query_lens = [r.num_tokens for r in rows]
        starts = [r.start for r in rows]
        seq_lens = [r.start + r.num_tokens for r in rows]
        tables = [r.block_table for r in rows]
        meta = build_metadata(query_lens, seq_lens, tables, self.block_size, self.device)
        local = [r.local_table for r in rows]
        if local[0] is not None:  # the local layers' own pool
            meta.local = build_metadata(query_lens, seq_lens, local, self.block_size, self.device)
        batch_rows = [self.batch.rows[r.key] for r in rows]
        input_ids, pos = self._gather_inputs(batch_rows, starts, query_lens)  # [T], [T]
        return self.model(input_ids, pos, self.kv_caches, meta)  # [T, C]

    def _gather_inputs(
        self, rows: list[int], starts: list[int], counts: list[int]
    ) -> tuple[Tensor, Tensor]:
        """Token ids and positions of every scheduled token, one gather for the batch:
        row b contributes positions starts[b] .. starts[b] + counts[b] - 1."""
        start = torch.tensor(starts, dtype=torch.int64)  # [B]
        row = torch.tensor(rows, dtype=torch.int64)  # [B]
        if all(n == 1 for n in counts):  # decodes only
            pos = start
        else:
            n = torch.tensor(counts, dtype=torch.int64)  # [B]
            first = n.cumsum(0) - n  # [B] index of each row's first token in the step
            pos = torch.arange(int(n.sum())) + (start - first).repeat_interleave(n)  # [T]
            row = row.repeat_interleave(n)  # [T]
        return self.batch.token_ids[row, pos].to(self.device), pos.to(self.device)

    def _prompt_logprobs(
        self, rows: list[ScheduledRequest], hidden: Tensor, result: StepOutput
    ) -> None:
        offset = 0
        for r in rows:
            lo, offset = offset, offset + r.num_tokens
            span = r.prompt_logprobs
            if span is None:
                continue
            out: list[list[TopEntry]] = [[]] if span.lead else []
            try:
                if span.end > span.first:
                    h = hidden[lo + span.first - r.start : lo + span.end - r.start]  # [P, C]
                    lp = self.model.compute_logits(h).float().log_softmax(dim=-1)  # [P, V]
                    ids = self.batch.token_ids[self.batch.rows[r.key]]
                    target = ids[span.first + 1 : span.end + 1].to(lp.device)  # [P]
                    out += entries(*top_logprobs(lp, target, span.k), [span.k] * len(target))
            except CollectiveError:
                raise
            except Exception as exc:
                result.failed[r.key] = error_text(exc)
                continue
            result.prompt_logprobs[r.key] = out
