"""Engine v1 against transformers (greedy, every scheduling variant) and its prefix cache."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.testing import HFReference, run_to_completion
from tandem.v1 import LLMEngine

PROMPTS = [
    [5, 9, 14, 3, 22, 8, 31, 40, 2, 17, 6, 11, 29],
    [7, 7, 12],
    [50, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18],
    [33, 21],
]
NEW = 10
VARIANTS = {
    "default": {},
    "no_prefix_cache": {"enable_prefix_caching": False},
    "chunked": {"max_num_batched_tokens": 6},
    "preempt": {"num_kv_blocks": 9, "block_size": 4, "max_model_len": 36},
}


def assert_matches(hf: HFReference, path: Path, got: list[list[int]]) -> None:
    for prompt, tokens in zip(PROMPTS, got, strict=True):
        hf.assert_greedy(path, prompt, tokens, NEW, ignore_eos=True)


def greedy(engine: Any) -> list[list[int]]:
    params = SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True)
    done = run_to_completion(engine, [(str(i), p, params) for i, p in enumerate(PROMPTS)])
    return [done[str(i)].outputs[0].token_ids for i in range(len(PROMPTS))]


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_greedy_matches_transformers(
    variant: str, tiny_arch_model: Path, hf: HFReference, make_args: Any
) -> None:
    args = make_args(tiny_arch_model, max_num_seqs=4, **VARIANTS[variant])
    with LLMEngine.from_engine_args(args, multiprocess=False) as engine:
        assert_matches(hf, tiny_arch_model, greedy(engine))
        stats = engine.stats()
    assert (stats.num_preemptions > 0) is (variant == "preempt")
    assert stats.num_free_kv_blocks == stats.num_kv_blocks


def test_greedy_matches_transformers_multiprocess(
    tiny_dir: Path, hf: HFReference, make_args: Any
) -> None:
    with LLMEngine.from_engine_args(make_args(max_num_batched_tokens=8)) as engine:
        assert_matches(hf, tiny_dir, greedy(engine))


def test_prefix_hit_reports_cached_tokens_and_same_tokens(make_args: Any) -> None:
    prefix = list(range(40, 80))
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)

    def run(engine: Any, rid: str, prompt: list[int]) -> Any:
        return run_to_completion(engine, [(rid, prompt, params)])[rid]

    with LLMEngine.from_engine_args(make_args(block_size=8), multiprocess=False) as engine:
        first = run(engine, "a", [*prefix, 3])
        second = run(engine, "b", [*prefix, 3])
        third = run(engine, "c", [*prefix, 9, 9])
        stats = engine.stats()
    assert first.num_cached_tokens == 0
    assert second.num_cached_tokens == 40
    assert second.outputs[0].token_ids == first.outputs[0].token_ids
    assert third.num_cached_tokens == 40
    assert stats.num_cached_prompt_tokens == 80
    assert stats.num_free_kv_blocks == stats.num_kv_blocks  # cached blocks count as free
    args = make_args(enable_prefix_caching=False)
    with LLMEngine.from_engine_args(args, multiprocess=False) as fresh:
        ref = run(fresh, "c", [*prefix, 9, 9])
        assert fresh.stats().num_cached_prompt_tokens == 0
    assert ref.num_cached_tokens == 0
    assert third.outputs[0].token_ids == ref.outputs[0].token_ids


def test_stats_round_trip_sees_stop_string_abort(make_args: Any) -> None:
    """A stop string ends a sample in the detokenizer; the core's blocks are freed by an
    abort the detokenizer sends it. ``stats()`` is ordered after that abort."""
    params = SamplingParams(temperature=0.8, seed=3, max_tokens=40, stop=["e", "a", "o"])
    with LLMEngine.from_engine_args(make_args(max_model_len=64)) as engine:
        out = run_to_completion(engine, [("s", [1, 40, 41], params)])["s"].outputs[0]
        stats = engine.stats()
        assert engine.client.last_stats is not None  # also attached to every CoreOutputs
    assert out.finish_reason == "stop"
    assert (stats.num_running, stats.num_waiting) == (0, 0)
    assert stats.num_free_kv_blocks == stats.num_kv_blocks
