"""Seeded sampling gives the same samples on engine v0 and engine v1.

Both engines run in this one process (v1 with its children), so the test is declared
for v1 only, and the v0 reference is built inside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.testing import run_to_completion

PROMPTS = [
    [5, 9, 14, 3, 22, 8, 31, 40, 2, 17, 6, 11, 29],
    [7, 7, 12],
    [50, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18],
    [33, 21],
]
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
    """Everything of a RequestOutput that must match exactly (logprob values aside)."""
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


def run_on(build: Any, name: str, path: Path, **kwargs: Any) -> dict[str, Any]:
    reqs = [(str(i), PROMPTS[i % len(PROMPTS)], p) for i, p in enumerate(SAMPLED)]
    eng = build(name, path, seed=3, **kwargs)
    try:
        return run_to_completion(eng, reqs)
    finally:
        eng.shutdown()


@pytest.mark.engines("v1")
def test_seeded_samples_equal_across_engines(
    tiny_model: Path, engine: str, build_engine: Any
) -> None:
    ref = run_on(build_engine, "v0", tiny_model)
    # v1 with a small token budget: prompts chunked, batches mixed differently than v0's
    got = run_on(build_engine, engine, tiny_model, max_num_batched_tokens=8)
    assert got.keys() == ref.keys()
    for rid in ref:
        assert summary(got[rid]) == summary(ref[rid]), rid
        for a, b in zip(got[rid].outputs, ref[rid].outputs):
            assert a.cumulative_logprob == pytest.approx(b.cumulative_logprob, abs=1e-3)
