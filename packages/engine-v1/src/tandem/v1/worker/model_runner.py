"""Runs one scheduled step: batch -> model forward -> sampler.

Rows are laid out prefills first (whole prompts, chunks, recomputes), then decodes,
as the attention metadata requires. Only requests whose every known token is computed
after this step are sampled; a partial chunk only fills the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from tandem.core.attention_metadata import build_metadata
from tandem.core.kv_cache import allocate_kv_caches
from tandem.core.loader import load_model
from tandem.core.logprobs import TopEntry, entries, top_logprobs
from tandem.v1.core.request import Request
from tandem.v1.worker.input_batch import InputBatch
from tandem.v1.worker.sampler import Sampler, SamplingBatch

if TYPE_CHECKING:
    from tandem.core.config import EngineConfig
    from tandem.v1.core.kv_cache_manager import KVCacheManager
    from tandem.v1.core.scheduler import SchedulerOutput


@dataclass(slots=True)
class StepResult:
    sampled: dict[str, int]  # request key -> new token
    sampled_logprob: dict[str, float]  # request key -> raw logprob of the new token
    logprobs: dict[str, list[TopEntry]]  # request key -> sampled token first, then top-k
    prompt_logprobs: dict[str, list[list[TopEntry]]]  # request key -> new prompt positions


class ModelRunner:
    def __init__(self, config: EngineConfig, sampler: Sampler | None = None) -> None:
        self.config = config
        mc = config.model
        self.device = config.device
        self.model = load_model(mc, config.device, config.dtype, config.quantization)
        self.block_size = config.cache.block_size
        self.num_kv_blocks = config.cache.resolve_num_blocks(config.kv_bytes_per_block)
        self.kv_caches = allocate_kv_caches(
            mc.num_layers,
            mc.num_kv_heads,
            mc.head_dim,
            self.num_kv_blocks,
            self.block_size,
            config.dtype,
            config.device,
        )
        self.batch = InputBatch(config.scheduler.max_num_seqs, mc.max_model_len, mc.vocab_size)
        self.sampler = sampler if sampler is not None else Sampler()

    @torch.inference_mode()
    def execute(self, sched: SchedulerOutput, kv: KVCacheManager) -> StepResult:
        for key in sched.dropped:  # requests that left since the last step free their rows
            self.batch.remove(key)
        reqs = sorted(sched.requests, key=lambda r: self._is_decode(r, sched))
        query_lens = [sched.num_tokens[r.key] for r in reqs]
        starts = [r.num_computed_tokens for r in reqs]
        seq_lens = [a + n for a, n in zip(starts, query_lens)]
        rows = [self.batch.row(r) for r in reqs]
        tables = [kv.table(r.key) for r in reqs]
        meta = build_metadata(query_lens, seq_lens, tables, self.block_size, self.device)
        input_ids, pos = self._gather_inputs(rows, starts, query_lens)  # [T], [T]
        hidden = self.model(input_ids, pos, self.kv_caches, meta)  # [T, C]

        ends = torch.tensor(query_lens).cumsum(0) - 1  # [B] last token of each row
        done = [i for i, r in enumerate(reqs) if seq_lens[i] == r.num_tokens]
        result = StepResult({}, {}, {}, {})
        self._prompt_logprobs(reqs, query_lens, hidden, result)
        if not done:
            return result
        chosen = [reqs[i] for i in done]
        logits = self.model.compute_logits(hidden[ends[done].to(self.device)])  # [B, V]
        sb = self._sampling_batch(chosen)
        out = self.sampler(logits, self.batch, sb)
        tokens = out.tokens.cpu()
        self.batch.append(sb.rows, tokens)
        token_list = tokens.tolist()
        for req, tok in zip(chosen, token_list):
            result.sampled[req.key] = tok
        keep = [req.sampling.logprobs or 0 for req in chosen]
        for req, tops in zip(chosen, entries(out.logprobs, out.token_ids, out.ranks, keep)):
            result.sampled_logprob[req.key] = tops[0][1]
            if req.sampling.logprobs is not None:
                result.logprobs[req.key] = tops
        return result

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

    @staticmethod
    def _is_decode(req: Request, sched: SchedulerOutput) -> bool:
        return sched.num_tokens[req.key] == 1 and req.num_computed_tokens > 0

    def _sampling_batch(self, reqs: list[Request]) -> SamplingBatch:
        rows = torch.tensor([self.batch.rows[r.key] for r in reqs], dtype=torch.int64)
        counters = torch.tensor([len(r.output_token_ids) for r in reqs], dtype=torch.int64)
        mask_rows: list[int] = []
        mask_tokens: list[int] = []
        for i, r in enumerate(reqs):
            if len(r.output_token_ids) < r.stop.min_tokens:
                mask_rows += [i] * len(r.stop.banned)
                mask_tokens += r.stop.banned
        asked = [r.sampling.logprobs for r in reqs if r.sampling.logprobs is not None]
        return SamplingBatch(
            rows=rows,
            counters=counters,
            mask_rows=torch.tensor(mask_rows, dtype=torch.int64),
            mask_tokens=torch.tensor(mask_tokens, dtype=torch.int64),
            max_logprobs=max(asked, default=-1),
            any_penalties=any(r.sampling.has_penalties for r in reqs),
            any_sampling=any(not r.sampling.greedy for r in reqs),
        )

    def _prompt_logprobs(
        self, reqs: list[Request], query_lens: list[int], hidden: Tensor, result: StepResult
    ) -> None:
        offset = 0
        for req, n in zip(reqs, query_lens):
            lo = offset
            offset += n
            k = req.sampling.prompt_logprobs
            start = req.num_computed_tokens
            plen = req.num_prompt_tokens
            if k is None or start + n <= req.prompt_logprobs_sent or start >= plen:
                continue
            rows: list[list[TopEntry]] = [] if req.prompt_logprobs_sent else [[]]
            # positions p in [start, end) predict prompt token p + 1
            first = max(start, req.prompt_logprobs_sent - 1 if req.prompt_logprobs_sent else 0)
            end = min(start + n, plen - 1)
            if end > first:
                h = hidden[lo + first - start : lo + end - start]
                lp = self.model.compute_logits(h).float().log_softmax(dim=-1)  # [P, V]
                target = torch.tensor(req.prompt_token_ids[first + 1 : end + 1], device=lp.device)
                rows += entries(*top_logprobs(lp, target, k), [k] * (end - first))
            req.prompt_logprobs_sent = max(end + 1, 1)
            result.prompt_logprobs[req.key] = rows
