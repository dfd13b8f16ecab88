"""The engine core: schedule -> execute -> update_from_output, one step at a time.

Runs in the core child process (or in the caller's process with the in-process
client). It knows token ids only; text and stop strings are the detokenizer's job.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tandem.core.inputs import EngineRequest
from tandem.kernels.sampling import derive_seed
from tandem.v1.core.kv_cache_manager import KVCacheManager
from tandem.v1.core.request import Request
from tandem.v1.core.scheduler import Scheduler
from tandem.v1.proc import messages as m
from tandem.v1.worker.model_runner import ModelRunner

if TYPE_CHECKING:
    from tandem.core.config import EngineConfig


class EngineCore:
    def __init__(self, config: EngineConfig) -> None:
        config.configure_process()
        self.config = config
        self.runner = ModelRunner(config)
        self.num_kv_blocks = self.runner.num_kv_blocks
        sc = config.scheduler
        self.kv = KVCacheManager(
            self.num_kv_blocks, config.cache.block_size, sc.enable_prefix_caching
        )
        self.scheduler = Scheduler(
            self.kv, sc.max_num_seqs, sc.max_num_batched_tokens, sc.enable_chunked_prefill
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
        )

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    # -- requests ------------------------------------------------------------------
    def handle(self, msg: m.AddRequest | m.Abort) -> list[m.CoreOutput]:
        if isinstance(msg, m.AddRequest):
            self.add(msg.request)
            return []
        if isinstance(msg, m.Abort):
            return self.scheduler.abort(msg.request_ids, msg.samples)
        raise TypeError(f"EngineCore.handle: expected AddRequest or Abort, got {msg!r}")

    def add(self, request: EngineRequest) -> None:
        """Queue the request's n samples (it was checked by the front door)."""
        if request.request_id in self.scheduler.samples:
            raise ValueError(f"request_id {request.request_id!r} is already running")
        for i in range(request.n):
            self.scheduler.add(
                Request(
                    key=f"{i}/{request.request_id}",
                    request_id=request.request_id,
                    index=i,
                    prompt_token_ids=list(request.prompt_token_ids),
                    sampling=request.sampling,
                    stop=request.stop,
                    seed=derive_seed(request.sampling.seed, i),
                    arrival=self.arrivals,
                )
            )
            self.arrivals += 1

    # -- one step ------------------------------------------------------------------
    def step(self) -> list[m.CoreOutput]:
        sched = self.scheduler.schedule()
        if not sched.requests:
            return []
        result = self.runner.execute(sched, self.kv)
        return self.scheduler.update_from_output(sched, result)
