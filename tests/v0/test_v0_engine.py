"""v0-only engine checks: injected components and the stats they are read from."""

from __future__ import annotations

import torch

from tandem.core.config.engine_args import EngineArgs
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.testing import add_request, run_to_completion
from tandem.v0 import LLMEngine
from tandem.v0.sampler import Sampler

PROMPTS = [[1, 40, 41, 42], [1, 300, 7, 8, 9, 10, 11], [1, 99]]
GREEDY = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=4)


class CountingSampler(Sampler):
    """A v0 sampler that counts the rows it sampled."""

    def __init__(self) -> None:
        self.rows = 0

    def __call__(self, logits: torch.Tensor, rows):
        self.rows += len(rows)
        return super().__call__(logits, rows)


def test_sampler_is_injected(tiny_model) -> None:
    sampler = CountingSampler()
    eng = LLMEngine.from_engine_args(
        EngineArgs(model=str(tiny_model), max_model_len=64), sampler=sampler
    )
    try:
        run_to_completion(eng, [("a", PROMPTS[0], GREEDY), ("b", PROMPTS[1], GREEDY)])
        assert eng.runner.sampler is sampler and sampler.rows == 8
    finally:
        eng.shutdown()


def test_stats_mirror_scheduler_and_block_manager(tiny_model) -> None:
    args = EngineArgs(model=str(tiny_model), max_model_len=32, block_size=4, num_kv_blocks=8)
    with LLMEngine.from_engine_args(args) as eng:
        long = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=20)
        for i, prompt in enumerate(PROMPTS):
            add_request(eng, f"r{i}", prompt, long)
        saw_preemption = False
        while eng.has_unfinished_requests():
            eng.step()
            stats, sched = eng.stats(), eng.scheduler
            bm = sched.block_manager
            assert stats.num_running == len(sched.running)
            assert stats.num_waiting == len(sched.waiting) + len(sched.preempted)
            assert stats.num_free_kv_blocks == bm.num_free_blocks
            assert stats.num_preemptions == sched.num_preemptions
            assert stats.num_cached_prompt_tokens == 0
            saw_preemption |= bool(sched.preempted)
        assert saw_preemption and eng.stats().num_free_kv_blocks == 8


def test_a_request_is_checked_against_the_cache_once(tiny_model, monkeypatch) -> None:
    """One check per request, however many samples it has, before any is queued."""
    args = EngineArgs(model=str(tiny_model), max_model_len=32, block_size=4, num_kv_blocks=8)
    with LLMEngine.from_engine_args(args) as eng:
        calls = []
        original = eng.scheduler.check_fits

        def counted(num_prompt_tokens: int, max_tokens: int) -> None:
            calls.append((num_prompt_tokens, max_tokens))
            original(num_prompt_tokens, max_tokens)

        monkeypatch.setattr(eng.scheduler, "check_fits", counted)
        three = SamplingParams(n=3, temperature=1.0, ignore_eos=True, max_tokens=4)
        done = run_to_completion(eng, [("a", PROMPTS[0], three)])
        assert calls == [(4, 4)] and len(done["a"].outputs) == 3
