"""``LLMEngine``: the synchronous v0 engine, running entirely in the caller's process.

``step()`` = schedule -> one forward pass -> sample -> detokenize / check stops ->
outputs of the requests that made progress. Every input of :meth:`add_request` is
checked before the request touches any queue, so a rejected request leaves the engine
exactly as it was.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from tandem.core.kv_cache import allocate_kv_caches, kv_cache_bytes_per_block
from tandem.core.outputs import RequestOutput
from tandem.core.sampling_params import SamplingParams
from tandem.core.stats import EngineStats
from tandem.core.tokenizer import Tokenizer, load_tokenizer
from tandem.kernels.sampling import derive_seed
from tandem.v0.block_manager import BlockManager
from tandem.v0.model_runner import ModelRunner, StepRequest
from tandem.v0.output_processor import OutputProcessor
from tandem.v0.sampler import Sampler, SamplingRow
from tandem.v0.scheduler import Scheduler
from tandem.v0.sequence import Request, Sequence

SEED_MODULUS = 1 << 63  # sampling seeds live in [0, 2**63)


class LLMEngine:
    """The v0 engine. Build it with :meth:`from_engine_args`."""

    def __init__(
        self,
        config: Any,
        *,
        model: Any = None,
        sampler: Sampler | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        self.config = config
        mc = config.model
        config.configure_process()
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(mc.tokenizer)
        if model is None:
            from tandem.core.loader import load_model

            model = load_model(mc, config.device, config.dtype)
        block_size = config.cache.block_size
        per_block = kv_cache_bytes_per_block(
            mc.num_layers, mc.num_kv_heads, mc.head_dim, block_size, config.dtype
        )
        num_blocks = config.cache.resolve_num_blocks(per_block)
        caches = allocate_kv_caches(
            mc.num_layers,
            mc.num_kv_heads,
            mc.head_dim,
            num_blocks,
            block_size,
            config.dtype,
            config.device,
        )
        self.runner = ModelRunner(model, caches, block_size, sampler or Sampler(), config.device)
        sc = config.scheduler
        self.scheduler = Scheduler(
            BlockManager(num_blocks, block_size),
            sc.max_num_seqs,
            sc.max_num_batched_tokens,
            sc.max_model_len,
            sc.enable_chunked_prefill,
        )
        self.max_model_len = int(mc.max_model_len)
        self.vocab_size = int(mc.vocab_size)
        eos = list(mc.eos_token_ids)
        if not eos and self.tokenizer.eos_token_id is not None:
            eos = [self.tokenizer.eos_token_id]
        self.outputs = OutputProcessor(self.tokenizer, eos, self.max_model_len)
        self.requests: dict[str, Request] = {}
        self._rng = random.Random(config.seed)
        self._seq_ids = itertools.count()
        self._closed = False

    @classmethod
    def from_engine_args(cls, engine_args: Any, **components: Any) -> LLMEngine:
        """Build from ``EngineArgs``; ``components`` may inject model, sampler, tokenizer."""
        from tandem.core.config import EngineArgs

        if not isinstance(engine_args, EngineArgs):
            raise TypeError(f"engine_args must be an EngineArgs, got {type(engine_args).__name__}")
        return cls(engine_args.create_config(), **components)

    # requests ------------------------------------------------------------------------
    def _prompt_ids(self, prompt: Any) -> tuple[str | None, list[int]]:
        if isinstance(prompt, str):
            if not prompt:
                raise ValueError("prompt is empty: it must have at least one token")
            return prompt, self.tokenizer.encode(prompt)
        if isinstance(prompt, (list, tuple)):
            for t in prompt:
                if isinstance(t, bool) or not isinstance(t, int):
                    raise TypeError(f"prompt token ids must be ints, got {t!r}")
            bad = [t for t in prompt if not 0 <= t < self.vocab_size]
            if bad:
                raise ValueError(
                    f"prompt token id {bad[0]} is outside the vocabulary [0, {self.vocab_size})"
                )
            return None, list(prompt)
        raise TypeError(f"prompt must be a str or a list of token ids, got {type(prompt).__name__}")

    def add_request(
        self, request_id: str, prompt: str | list[int], params: SamplingParams | None = None
    ) -> None:
        """Queue a request; raises ValueError/TypeError (and queues nothing) on bad input."""
        self._check_open()
        if not isinstance(request_id, str) or not request_id:
            raise TypeError(f"request_id must be a non-empty str, got {request_id!r}")
        if request_id in self.requests:
            raise ValueError(f"request_id {request_id!r} is already in use")
        params = SamplingParams() if params is None else params
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
        text, ids = self._prompt_ids(prompt)
        if not ids:
            raise ValueError("prompt is empty: it must have at least one token")
        room = self.max_model_len - len(ids)
        if room < 1:
            raise ValueError(
                f"prompt has {len(ids)} tokens; it must be shorter than "
                f"max_model_len={self.max_model_len} to leave room for one generated token"
            )
        max_tokens = room if params.max_tokens is None else min(params.max_tokens, room)
        self.scheduler.check_fits(len(ids), max_tokens)
        base = (
            params.seed if params.seed is not None else self._rng.getrandbits(63)
        ) % SEED_MODULUS
        seqs = [
            Sequence(next(self._seq_ids), request_id, i, ids, max_tokens, derive_seed(base, i))
            for i in range(params.n)
        ]
        req = Request(request_id, text, ids, params, seqs)
        if params.prompt_logprobs is not None:
            req.prompt_logprobs = [None]
        self.requests[request_id] = req
        self.outputs.start(req)
        for seq in seqs:
            self.scheduler.add(seq)

    def abort_request(self, request_id: str | list[str]) -> None:
        """Drop requests (unknown or finished ids are ignored)."""
        ids = [request_id] if isinstance(request_id, str) else list(request_id)
        for rid in ids:
            req = self.requests.pop(rid, None)
            if req is None:
                continue
            for seq in req.seqs:
                if not seq.is_finished:
                    self.scheduler.finish(seq)
                    seq.finish_reason, seq.stop_reason = "abort", None
            self.outputs.drop(req)

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def get_num_unfinished_requests(self) -> int:
        return len(self.requests)

    def stats(self) -> EngineStats:
        """Scheduler and KV cache counts now (no prefix cache: cached prompt tokens are 0)."""
        self._check_open()
        sched, bm = self.scheduler, self.scheduler.block_manager
        return EngineStats(
            num_running=len(sched.running),
            num_waiting=len(sched.waiting) + len(sched.preempted),
            num_preemptions=sched.num_preemptions,
            num_kv_blocks=bm.num_blocks,
            num_free_kv_blocks=bm.num_free_blocks,
        )

    # stepping ------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Run one scheduling + forward step; outputs of requests that progressed."""
        self._check_open()
        sched = self.scheduler.schedule()
        if sched.is_empty:
            return []
        batch: list[StepRequest] = []
        for item in sched.scheduled:
            seq = item.seq
            req = self.requests[seq.request_id]
            self.outputs.mark_scheduled(req)
            row = None
            if item.completes:
                row = SamplingRow(
                    req.params,
                    req.prompt_token_ids,
                    seq.output_token_ids,
                    seq.seed,
                    self.outputs.blocked_ids(req.params),
                )
            plp = None
            end = item.start + item.num_new_tokens
            if (
                req.wants_prompt_logprobs
                and end >= req.num_prompt_logprobs_done
                and item.start < len(req.prompt_token_ids) - 1
            ):
                plp = req.params.prompt_logprobs
            batch.append(StepRequest(item, row, plp))
        result = self.runner.execute(batch)
        self.scheduler.update(sched)

        touched: dict[str, Request] = {}
        by_id = {item.seq.seq_id: item.seq for item in sched.scheduled}
        for seq_id, (start, entries) in result.prompt_logprobs.items():
            req = self.requests[by_id[seq_id].request_id]
            self._add_prompt_logprobs(req, start, entries)
        for item in sched.scheduled:
            sample = result.samples.get(item.seq.seq_id)
            if sample is None:
                continue
            req = self.requests[item.seq.request_id]
            if self.outputs.append(req, item.seq, sample):
                self.scheduler.finish(item.seq)
            touched[req.request_id] = req
        outs = []
        for rid, req in touched.items():
            outs.append(self.outputs.make_output(req))
            if req.is_finished:
                self.outputs.drop(req)
                del self.requests[rid]
        return outs

    def _add_prompt_logprobs(
        self, req: Request, start: int, entries: list[dict[int, tuple[float, int]]]
    ) -> None:
        # entries[i] scores prompt token start + 1 + i; keep only positions not yet scored
        assert req.prompt_logprobs is not None
        for i, entry in enumerate(entries):
            target = start + 1 + i
            if target == len(req.prompt_logprobs):
                req.prompt_logprobs.append(self.outputs.logprob_entry(entry))
        req.num_prompt_logprobs_done = len(req.prompt_logprobs)

    # lifetime ------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this engine was shut down")

    def shutdown(self) -> None:
        """Drop every request and free the model and caches. Safe to call twice."""
        if self._closed:
            return
        self.abort_request(list(self.requests))
        self._closed = True
        self.runner.kv_caches = []
        self.runner.model = None

    def __enter__(self) -> LLMEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
