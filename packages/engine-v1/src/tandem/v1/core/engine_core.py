"""The engine core: schedule -> execute -> update_from_output, one step at a time.

Runs in the core child process (or in the caller's process with the in-process
client). It knows token ids only; text and stop strings are the detokenizer's job. The
worker is handed in (anything that runs a :class:`~tandem.v1.core.step.SchedulerOutput`),
so the core never imports it: whoever starts a core builds both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tandem.core.inputs.engine_request import EngineRequest
from tandem.core.outputs.request_output import error_text
from tandem.kernels.sampling import derive_seed
from tandem.v1 import messages as m
from tandem.v1.core.grouped_kv import GroupedKVCacheManager
from tandem.v1.core.kv_cache_manager import KVCacheManager
from tandem.v1.core.request import Request
from tandem.v1.core.scheduler import Scheduler

if TYPE_CHECKING:
    from tandem.core.config.engine_args import EngineConfig
    from tandem.v1.core.step import Executor


def kv_manager(config: EngineConfig) -> KVCacheManager | GroupedKVCacheManager:
    """The KV cache manager of a resolved cache: one pool, or the global and local
    layers' pools where the model mixes windows."""
    cc, caching = config.cache, config.scheduler.enable_prefix_caching
    blocks, size = cc.num_blocks_resolved, cc.block_size
    if not cc.grouped:
        return KVCacheManager(blocks, size, caching, cc.sliding_window)
    local = KVCacheManager(cc.num_local_blocks or 0, size, caching, cc.local_window)
    return GroupedKVCacheManager(KVCacheManager(blocks, size, caching), local)


class EngineCore:
    def __init__(self, config: EngineConfig, runner: Executor) -> None:
        self.config = config
        self.runner = runner
        self.num_kv_blocks = runner.num_kv_blocks
        # a runner in another process (tensor-parallel ranks) sized the cache there
        config.adopt_kv_cache(
            runner.num_kv_blocks,
            runner.num_local_kv_blocks,
            runner.max_model_len,
            runner.kv_source,
        )
        self.kv = kv_manager(config)
        sc, spec = config.scheduler, config.speculative
        self.scheduler = Scheduler(
            self.kv,
            sc.max_num_seqs,
            sc.max_num_batched_tokens,
            sc.enable_chunked_prefill,
            spec.num_speculative_tokens if spec is not None else 0,
        )
        self.arrivals = 0

    def stats(self) -> m.CoreStats:
        """Counts now; ``num_free_kv_blocks`` includes blocks only the prefix cache holds."""
        sched = self.scheduler
        live = sum(max(r.num_cached_tokens, 0) for r in sched.requests.values())
        return m.CoreStats(
            num_running=len(sched.running),
            num_waiting=len(sched.waiting),
            num_preemptions=sched.num_preemptions,
            num_kv_blocks=self.kv.num_blocks,
            num_free_kv_blocks=self.kv.num_free,
            num_cached_prompt_tokens=sched.num_cached_finished + live,
            num_draft_tokens=sched.verified.num_draft_tokens,
            num_accepted_tokens=sched.verified.num_accepted_tokens,
        )

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    # -- requests ------------------------------------------------------------------
    def handle(self, msg: m.AddRequest | m.Abort) -> list[m.CoreOutput]:
        if isinstance(msg, m.AddRequest):
            return self.add(msg.request)
        if isinstance(msg, m.Abort):
            return self.scheduler.abort(msg.request_ids, msg.samples)
        raise TypeError(f"EngineCore.handle: expected AddRequest or Abort, got {msg!r}")

    def add(self, request: EngineRequest) -> list[m.CoreOutput]:
        """Queue the request's n samples (it was checked by the front door); a request
        the core cannot take fails alone: an ``"error"`` output per sample."""
        rid = request.request_id
        assert rid not in self.scheduler.samples, rid  # the front door's check
        try:
            samples = [
                Request(
                    key=f"{i}/{rid}",
                    request_id=rid,
                    index=i,
                    prompt_token_ids=list(request.prompt_token_ids),
                    sampling=request.sampling,
                    stop=request.stop,
                    seed=derive_seed(request.sampling.seed, i),
                    arrival=self.arrivals + i,
                )
                for i in range(request.n)
            ]
        except Exception as exc:
            why = error_text(exc)
            return [
                m.CoreOutput(rid, i, [], finish_reason="error", error=why) for i in range(request.n)
            ]
        for sample in samples:
            self.scheduler.add(sample)
        self.arrivals += len(samples)
        return []

    # -- one step ------------------------------------------------------------------
    def step(self) -> list[m.CoreOutput]:
        sched = self.scheduler.schedule()
        if not sched.scheduled:
            return []
        result = self.runner.execute(sched)
        return self.scheduler.update_from_output(sched, result)
