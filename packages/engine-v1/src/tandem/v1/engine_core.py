"""The engine core: scheduler -> model runner -> sampler -> token outputs.

Runs in the core child process (or in the caller's process with the in-process
client). It knows token ids only; text and stop strings are the detokenizer's job.
"""

from __future__ import annotations

from tandem.kernels.sampling import derive_seed
from tandem.v1 import messages as m
from tandem.v1.kv_cache_manager import KVCacheManager
from tandem.v1.model_runner import ModelRunner
from tandem.v1.request import Request
from tandem.v1.scheduler import Scheduler


class EngineCore:
    def __init__(self, config: object) -> None:
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
        self.max_model_len = sc.max_model_len
        self.eos_ids = set(config.model.eos_token_ids)
        self.samples: dict[str, list[Request]] = {}
        self.arrivals = 0
        self._cached_finished = 0  # prefix-cache hit tokens of samples that left

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
            num_cached_prompt_tokens=self._cached_finished + live,
        )

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    # -- requests ------------------------------------------------------------------
    def handle(self, msg: m.AddRequest | m.Abort) -> list[m.CoreOutput]:
        if isinstance(msg, m.AddRequest):
            self.add(msg)
            return []
        if isinstance(msg, m.Abort):
            return self.abort(msg.request_ids, msg.samples)
        raise TypeError(f"EngineCore.handle: expected AddRequest or Abort, got {msg!r}")

    def add(self, msg: m.AddRequest) -> None:
        if msg.request_id in self.samples:
            raise ValueError(f"request_id {msg.request_id!r} is already running")
        reqs = []
        for i in range(msg.n):
            req = Request(
                key=f"{i}/{msg.request_id}",
                request_id=msg.request_id,
                index=i,
                prompt_token_ids=list(msg.prompt_token_ids),
                sampling=msg.sampling,
                seed=derive_seed(msg.sampling.seed, i),
                arrival=self.arrivals,
            )
            self.arrivals += 1
            self.scheduler.add(req)
            reqs.append(req)
        self.samples[msg.request_id] = reqs

    def abort(
        self, request_ids: list[str], samples: list[tuple[str, int]] = ()
    ) -> list[m.CoreOutput]:
        targets = [r for rid in request_ids for r in self.samples.get(rid, ())]
        for rid, index in samples:
            reqs = self.samples.get(rid, [])
            targets += [r for r in reqs if r.index == index]
        outs = []
        for req in targets:
            if req.is_finished:
                continue
            self._finish(req, "abort")
            outs.append(
                m.CoreOutput(
                    req.request_id,
                    req.index,
                    [],
                    finish_reason="abort",
                    num_cached_tokens=max(req.num_cached_tokens, 0),
                )
            )
        return outs

    def _finish(self, req: Request, reason: str, stop_reason: int | str | None = None) -> None:
        if req.key in self.scheduler.requests:
            self._cached_finished += max(req.num_cached_tokens, 0)
        self.scheduler.finish(req, reason, stop_reason)
        self.runner.remove(req.key)
        reqs = self.samples.get(req.request_id, [])
        if all(r.is_finished for r in reqs):
            self.samples.pop(req.request_id, None)

    # -- one step ------------------------------------------------------------------
    def step(self) -> list[m.CoreOutput]:
        sched = self.scheduler.schedule()
        for req in sched.preempted:
            self.runner.remove(req.key)
        if not sched.requests:
            return []
        result = self.runner.execute(sched, self.kv)
        self.scheduler.advance(sched)
        outs = []
        for req in sched.requests:
            tok = result.sampled.get(req.key)
            plp = result.prompt_logprobs.get(req.key)
            if tok is None and plp is None:
                continue
            new = []
            reason = stop_reason = None
            if tok is not None:
                req.output_token_ids.append(tok)
                new = [tok]
                reason, stop_reason = self._check_stop(req, tok)
            lps = result.logprobs.get(req.key)
            outs.append(
                m.CoreOutput(
                    req.request_id,
                    req.index,
                    new,
                    new_logprobs=[result.sampled_logprob[req.key]] if tok is not None else [],
                    logprobs=[lps] if lps is not None else None,
                    prompt_logprobs=plp,
                    finish_reason=reason,
                    stop_reason=stop_reason,
                    num_cached_tokens=max(req.num_cached_tokens, 0),
                )
            )
            if reason is not None:
                self._finish(req, reason, stop_reason)
        return outs

    def _check_stop(self, req: Request, tok: int) -> tuple[str | None, int | None]:
        s = req.sampling
        n_out = len(req.output_token_ids)
        if n_out >= s.min_tokens:
            if not s.ignore_eos and tok in self.eos_ids:
                return "stop", None
            if tok in s.stop_token_ids:
                return "stop", tok
        if n_out >= s.max_tokens or req.num_tokens >= self.max_model_len:
            return "length", None
        return None, None
