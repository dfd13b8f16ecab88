"""Both engines against transformers: greedy tokens and logprobs (fp32)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tandem.core.inputs.sampling_params import SamplingParams

PROMPT_LENS = (3, 9, 17, 30, 5)
NEW = 24


def prompts(seed: int = 0, lens: tuple[int, ...] = PROMPT_LENS) -> list[list[int]]:
    rng = random.Random(seed)
    return [[1] + [rng.randrange(4, 500) for _ in range(n - 1)] for n in lens]


def test_greedy_matches_transformers_smoke(tiny_model: Path, hf, shared_engine, run) -> None:
    """The fast check kept in every run: a small batch on the default engine."""
    batch = prompts(3, (4, 11, 7))
    outs = run(shared_engine, batch, SamplingParams(temperature=0.0, max_tokens=8))
    for i, prompt in enumerate(batch):
        hf.assert_greedy(tiny_model, prompt, outs[i].outputs[0].token_ids, 8)


@pytest.mark.slow
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        # 16 blocks of 4 slots for 5 sequences growing to 40+ tokens: preemption
        {"max_model_len": 64, "block_size": 4, "num_kv_blocks": 16},
        # chunked prefill: prompts split over steps, mixed with decodes
        {"max_num_batched_tokens": 8},
    ],
    ids=["plain", "preempt", "chunked"],
)
def test_greedy_matches_transformers(
    tiny_arch_model: Path, kwargs: dict, hf, new_engine, run
) -> None:
    engine = new_engine(tiny_arch_model, **kwargs)
    batch = prompts()
    outs = run(engine, batch, SamplingParams(temperature=0.0, max_tokens=NEW))
    for i, prompt in enumerate(batch):
        hf.assert_greedy(tiny_arch_model, prompt, outs[i].outputs[0].token_ids, NEW)
    stats = engine.stats()
    if "num_kv_blocks" in kwargs:
        assert stats.num_preemptions > 0
    assert stats.num_running == stats.num_waiting == 0
    assert stats.num_free_kv_blocks == stats.num_kv_blocks


def test_logprobs_match_transformers(tiny_model: Path, hf, shared_engine, run) -> None:
    batch = prompts(1, (6, 11))
    params = SamplingParams(temperature=0.0, max_tokens=6, logprobs=3, prompt_logprobs=2)
    outs = run(shared_engine, batch, params)
    for i, prompt in enumerate(batch):
        out = outs[i]
        comp = out.outputs[0]
        ref = hf.logprobs(tiny_model, prompt + comp.token_ids)  # [L, V]
        total = 0.0
        for j, tok in enumerate(comp.token_ids):
            row = ref[len(prompt) - 1 + j]  # [V]
            entry = comp.logprobs[j]
            assert entry[tok].logprob == pytest.approx(float(row[tok]), abs=1e-4)
            assert entry[tok].rank == int((row > row[tok]).sum()) + 1
            top = row.topk(3).indices.tolist()
            assert set(top) <= set(entry)
            for rank, t in enumerate(top, 1):
                assert entry[t].logprob == pytest.approx(float(row[t]), abs=1e-4)
                assert entry[t].rank == rank
            total += float(row[tok])
        assert comp.cumulative_logprob == pytest.approx(total, abs=1e-3)
        assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(prompt)
        for p in range(1, len(prompt)):
            row = ref[p - 1]  # [V]
            entry = out.prompt_logprobs[p]
            assert entry[prompt[p]].logprob == pytest.approx(float(row[prompt[p]]), abs=1e-4)
            assert set(row.topk(2).indices.tolist()) <= set(entry)


def test_prompt_logprobs_survive_chunking(shared_engine, new_engine, run) -> None:
    chunked = new_engine(max_num_batched_tokens=4)
    batch = prompts(2, (13,))
    params = SamplingParams(temperature=0.0, max_tokens=2, prompt_logprobs=1)
    a = run(shared_engine, batch, params)[0].prompt_logprobs
    b = run(chunked, batch, params)[0].prompt_logprobs
    assert len(a) == len(b) == 13
    for x, y in zip(a[1:], b[1:]):
        assert x.keys() == y.keys()
        for t in x:
            assert x[t].logprob == pytest.approx(y[t].logprob, abs=1e-5)
