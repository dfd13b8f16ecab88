"""``LLMEngine``: the synchronous v0 engine, running entirely in the caller's process.

``step()`` = schedule -> one forward pass -> sample -> detokenize / check stops ->
outputs of the requests that made progress. It takes requests the front door checked
(:mod:`tandem.core.inputs.processor`); a request the KV cache could never hold is refused before
it touches any queue, so it leaves the engine exactly as it was.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

from tandem.core.engine.context_fit import warn_shortened
from tandem.core.engine.stats import EngineStats
from tandem.core.inputs.engine_request import EngineRequest
from tandem.core.kv.cache import allocate_kv_caches
from tandem.core.kv.memory import available_memory
from tandem.core.outputs.request_output import RequestOutput, error_text
from tandem.core.structured.compiler import LazyGrammars
from tandem.core.text.tokenizer import Tokenizer, load_tokenizer
from tandem.kernels.sampling import derive_seed
from tandem.v0.grouped_blocks import block_manager
from tandem.v0.model_runner import ModelRunner, StepRequest
from tandem.v0.one_process import check_single_process
from tandem.v0.output_processor import OutputProcessor
from tandem.v0.sampler import Sampler
from tandem.v0.scheduler import Scheduler
from tandem.v0.sequence import Request, Sequence, SequenceStatus
from tandem.v0.speculator import Speculator


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
        check_single_process(config)
        self.config = config
        mc = config.model
        config.configure_process()
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(mc.tokenizer)
        from tandem.core.layers.attention_backend import for_device
        from tandem.core.models.plan import plan_model

        if model is None:
            from tandem.core.engine.loader import load_engine_model

            model = load_engine_model(config)
        if hasattr(model, "use_kernels"):  # a model given ready-made may not take them
            plan_model(model, config)  # names the attention backend in config.kernels
        else:
            config.kernels = for_device(config.kernels, config.device.type)
        self.attention_backend = config.kernels.attention  # EngineArgs', the env's, the best
        block_size = config.cache.block_size
        model_len = mc.max_model_len
        available = available_memory(config.device) if config.cache.needs_memory else None
        config.resolve_kv_cache(available)
        if mc.max_model_len != model_len:
            if hasattr(model, "set_max_model_len"):
                model.set_max_model_len(mc.max_model_len)
            warn_shortened(config, model_len)
        caches = allocate_kv_caches(
            mc.num_layers,
            mc.num_kv_heads,
            mc.head_dim,
            config.cache.layer_blocks(),  # with a window, each pool's null block too
            block_size,
            config.dtype,
            config.device,
        )
        grouped = config.cache.grouped
        self.runner = ModelRunner(
            model, caches, block_size, sampler or Sampler(), config.device, grouped
        )
        sc = config.scheduler
        self.scheduler = Scheduler(
            block_manager(config.cache),
            sc.max_num_seqs,
            sc.max_num_batched_tokens,
            sc.max_model_len,
            sc.enable_chunked_prefill,
        )
        self.outputs = OutputProcessor(self.tokenizer)
        self.requests: dict[str, Request] = {}
        self._refused: list[Request] = []  # failed on arrival: reported by the next step
        self._seq_ids = itertools.count()
        self._closed = False
        self.grammars = LazyGrammars(config, self.tokenizer)  # structured outputs
        self.speculator = Speculator.for_config(config)  # None: no speculative decoding

    @property
    def plan(self) -> str:
        """The model's execution plan (:class:`tandem.core.models.plan.ExecutionPlan`'s
        table); empty for a model given ready-made without kernels."""
        plan = self.config.plan
        return "" if plan is None else plan.table()

    @classmethod
    def from_engine_args(cls, engine_args: Any, **components: Any) -> LLMEngine:
        """Build from ``EngineArgs``; ``components`` may inject model, sampler, tokenizer."""
        from tandem.core.config.engine_args import EngineArgs

        if not isinstance(engine_args, EngineArgs):
            raise TypeError(f"engine_args must be an EngineArgs, got {type(engine_args).__name__}")
        check_single_process(engine_args)
        return cls(engine_args.create_config(), **components)

    # requests ------------------------------------------------------------------------
    def add(self, request: EngineRequest) -> None:
        """Queue a request the front door checked
        (:class:`~tandem.core.inputs.processor.InputProcessor`; its id is not one already
        running). Only the KV cache's size is checked here:
        a request it could never hold raises ValueError and nothing is queued."""
        self._check_open()
        assert request.request_id not in self.requests, request.request_id
        ids, max_tokens = request.prompt_token_ids, request.stop.max_tokens
        self.scheduler.check_fits(len(ids), max_tokens)
        base = request.sampling.seed
        seqs = [
            Sequence(
                next(self._seq_ids), request.request_id, i, ids, max_tokens, derive_seed(base, i)
            )
            for i in range(request.n)
        ]
        req = Request(request, seqs)
        if request.sampling.prompt_logprobs is not None:
            req.prompt_logprobs = [None]
        self.requests[request.request_id] = req
        try:
            self.outputs.start(req)
            if request.sampling.grammar is not None:
                for seq in seqs:
                    seq.grammar = self.grammars().matcher(request.sampling.grammar)
        except Exception as exc:  # its text cannot be set up: it fails alone, never queued
            for seq in seqs:
                seq.status, seq.finish_reason = SequenceStatus.FINISHED, "error"
            req.error = error_text(exc)
            self._refused.append(req)
            return
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
        sched, bm, spec = self.scheduler, self.scheduler.block_manager, self.speculator
        return EngineStats(
            num_running=len(sched.running),
            num_waiting=len(sched.waiting) + len(sched.preempted),
            num_preemptions=sched.num_preemptions,
            num_kv_blocks=bm.num_blocks,
            num_free_kv_blocks=bm.num_free_blocks,
            num_draft_tokens=spec.num_draft_tokens if spec else 0,
            num_accepted_tokens=spec.num_accepted_tokens if spec else 0,
        )

    # stepping ------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """Run one scheduling + forward step; outputs of requests that progressed."""
        self._check_open()
        refused, self._refused = self._refused, []
        outs = [self._emit(req) for req in refused if req.request_id in self.requests]
        if self.speculator is not None:
            self.speculator.propose(self.scheduler.running, self.requests)
        sched = self.scheduler.schedule()
        if sched.is_empty:
            return [out for out in outs if out is not None]
        batch: list[StepRequest] = []
        for item in sched.scheduled:
            req = self.requests[item.seq.request_id]
            self.outputs.mark_scheduled(req)
            batch.append(StepRequest.of(item, req))
        result = self.runner.execute(batch)
        self.scheduler.update(sched)

        touched: dict[str, Request] = {}
        by_id = {item.seq.seq_id: item.seq for item in sched.scheduled}
        for seq_id, (start, entries) in result.prompt_logprobs.items():
            req = self.requests[by_id[seq_id].request_id]
            self.outputs.add_prompt_logprobs(req, start, entries)
        for item in sched.scheduled:
            req = self.requests[item.seq.request_id]
            why = result.failed.get(item.seq.seq_id)
            sample = result.samples.get(item.seq.seq_id)
            accepted = result.accepted.get(item.seq.seq_id)
            if why is not None:  # it alone failed in this step: finished, its blocks freed
                self.scheduler.finish(item.seq)
                item.seq.finish_reason, item.seq.stop_reason = "error", None
                req.error = req.error or why
            elif accepted is not None and self.speculator is not None:
                append = functools.partial(self.outputs.append, req, item.seq)
                if self.speculator.settle(item, accepted, append, self.scheduler.block_manager):
                    self.scheduler.finish(item.seq)
            elif sample is None:
                continue
            elif self.outputs.append(req, item.seq, sample):
                self.scheduler.finish(item.seq)
            touched[req.request_id] = req
        outs += [self._emit(req) for req in touched.values()]
        return [out for out in outs if out is not None]

    def _emit(self, req: Request) -> RequestOutput | None:
        """The request's output of this step; a finished request leaves the engine."""
        out = self.outputs.make_output(req)
        if req.is_finished:
            self.outputs.drop(req)
            del self.requests[req.request_id]
        return out

    # lifetime ------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this engine was shut down")

    @property
    def is_dead(self) -> bool:
        """Always False: nothing outside this process can take a v0 engine down."""
        return False

    def check_health(self) -> None:
        """Nothing can fail outside this process: a v0 engine is healthy while open."""
        self._check_open()

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
