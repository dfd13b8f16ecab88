"""Engine v1 against transformers (greedy) and against engine v0 (seeded sampling)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tandem.core.sampling_params import SamplingParams
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
_HF: dict[tuple[str, int], list[int]] = {}


def hf_greedy(model_dir: Path, prompt: list[int]) -> list[int]:
    key = (str(model_dir), len(_HF))
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.tensor([prompt])
    # an explicit mask: the prompts contain the pad id, which generate would mask out
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=NEW,
        do_sample=False,
        min_new_tokens=NEW,
    )
    _HF[key] = out[0, len(prompt) :].tolist()
    return _HF[key]


@pytest.fixture(scope="module")
def hf_reference(model_dirs: dict[str, Path]) -> dict[str, list[list[int]]]:
    return {arch: [hf_greedy(d, p) for p in PROMPTS] for arch, d in model_dirs.items()}


def greedy(engine: Any, run_all: Any) -> list[list[int]]:
    params = SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True)
    done = run_all(engine, [(str(i), p, params) for i, p in enumerate(PROMPTS)])
    return [done[str(i)].outputs[0].token_ids for i in range(len(PROMPTS))]


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen2"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_greedy_matches_transformers(
    arch: str,
    variant: str,
    model_dirs: dict[str, Path],
    hf_reference: dict[str, list[list[int]]],
    make_args: Any,
    run_all: Any,
) -> None:
    args = make_args(model_dirs[arch], max_num_seqs=4, **VARIANTS[variant])
    engine = LLMEngine.from_engine_args(args, multiprocess=False)
    try:
        assert greedy(engine, run_all) == hf_reference[arch]
        if variant == "preempt":
            assert engine.client.core.scheduler.num_preemptions > 0
    finally:
        engine.shutdown()


def test_greedy_matches_transformers_multiprocess(
    model_dirs: dict[str, Path],
    hf_reference: dict[str, list[list[int]]],
    make_args: Any,
    run_all: Any,
) -> None:
    with LLMEngine.from_engine_args(make_args(max_num_batched_tokens=8)) as engine:
        assert greedy(engine, run_all) == hf_reference["llama"]


def test_prefix_hit_reports_cached_tokens_and_same_tokens(make_args: Any, run_all: Any) -> None:
    prefix = list(range(40, 80))
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    engine = LLMEngine.from_engine_args(make_args(block_size=8), multiprocess=False)
    try:
        first = run_all(engine, [("a", [*prefix, 3], params)])["a"]
        second = run_all(engine, [("b", [*prefix, 3], params)])["b"]
        third = run_all(engine, [("c", [*prefix, 9, 9], params)])["c"]
    finally:
        engine.shutdown()
    assert first.num_cached_tokens == 0
    assert second.num_cached_tokens == 40
    assert second.outputs[0].token_ids == first.outputs[0].token_ids
    assert third.num_cached_tokens == 40
    fresh = LLMEngine.from_engine_args(make_args(enable_prefix_caching=False), multiprocess=False)
    try:
        ref = run_all(fresh, [("c", [*prefix, 9, 9], params)])["c"]
    finally:
        fresh.shutdown()
    assert ref.num_cached_tokens == 0
    assert third.outputs[0].token_ids == ref.outputs[0].token_ids


SAMPLED = [
    SamplingParams(temperature=0.9, top_p=0.8, max_tokens=12, seed=11, n=2, logprobs=2),
    SamplingParams(temperature=1.2, top_k=15, max_tokens=12, seed=5, presence_penalty=0.4),
    SamplingParams(
        temperature=0.7,
        min_p=0.05,
        max_tokens=12,
        repetition_penalty=1.3,
        min_tokens=4,
        prompt_logprobs=1,
    ),
    SamplingParams(temperature=0.8, max_tokens=12, stop=["e", "a"]),  # unseeded: drawn seed
    SamplingParams(temperature=0, max_tokens=12, frequency_penalty=0.5),
]


def summary(out: Any) -> tuple[Any, ...]:
    comps = [
        (
            c.token_ids,
            c.text,
            c.finish_reason,
            c.stop_reason,
            None if c.logprobs is None else [sorted(d) for d in c.logprobs],
        )
        for c in out.outputs
    ]
    plp = (
        None
        if out.prompt_logprobs is None
        else [None if d is None else sorted(d) for d in out.prompt_logprobs]
    )
    return comps, plp


@pytest.mark.parametrize("multiprocess", [False, True], ids=["inproc", "mp"])
def test_seeded_sampling_equals_v0(multiprocess: bool, make_args: Any, run_all: Any) -> None:
    v0 = pytest.importorskip("tandem.v0")
    reqs = [(str(i), PROMPTS[i % len(PROMPTS)], p) for i, p in enumerate(SAMPLED)]
    ref_engine = v0.LLMEngine.from_engine_args(make_args(seed=3))
    try:
        ref = run_all(ref_engine, reqs)
    finally:
        ref_engine.shutdown()
    with LLMEngine.from_engine_args(
        make_args(seed=3, max_num_batched_tokens=8), multiprocess=multiprocess
    ) as engine:
        got = run_all(engine, reqs)
    for rid in ref:
        assert summary(got[rid]) == summary(ref[rid]), rid
        for a, b in zip(got[rid].outputs, ref[rid].outputs):
            assert a.cumulative_logprob == pytest.approx(b.cumulative_logprob, abs=1e-3)
