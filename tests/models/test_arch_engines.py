"""Both engines against transformers on every architecture past the Llama family:
greedy tokens and top-k logprobs, with prompts longer than the windows, chunked prefill
(8-token steps) and prefix caching (prompts sharing their first 12 tokens)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from tandem.core.config.engine_args import EngineArgs
from tandem.core.engine.protocol import load_engine_class
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.testing import make_model, run_to_completion
from tandem.core.testing.archs import TRAPS

pytestmark = pytest.mark.engines("v0", "v1")

NEW = 12
TOP = 3
# Phi-3's longrope keeps its short factors within its pretraining length (64)
MAX_LEN = {"phi3": 64}


def prompts(seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    shared = [1] + [rng.randrange(4, 500) for _ in range(11)]
    own = [[rng.randrange(4, 500) for _ in range(n)] for n in (9, 17, 3)]
    return [shared + own[0], shared + own[1], [1] + own[2], shared]


@pytest.fixture
def arch_engine(request: pytest.FixtureRequest, engine: str) -> Iterator[Any]:
    path = make_model(arch=request.param)
    args = EngineArgs(
        model=str(path),
        dtype="float32",
        max_model_len=MAX_LEN.get(request.param, 128),
        block_size=4,
        max_num_batched_tokens=8,
    )
    eng = load_engine_class(engine).from_engine_args(args)
    yield path, eng
    eng.shutdown()


def check_logprobs(hf: Any, path: Any, prompt: list[int], out: Any) -> None:
    comp = out.outputs[0]
    ref = hf.logprobs(path, prompt + comp.token_ids)  # [L, V]
    for j, tok in enumerate(comp.token_ids):
        row = ref[len(prompt) - 1 + j]
        entry = comp.logprobs[j]
        assert entry[tok].logprob == pytest.approx(float(row[tok]), abs=1e-4), (j, tok)
        for alt, lp in entry.items():
            assert lp.logprob == pytest.approx(float(row[alt]), abs=1e-4), (j, alt)
        assert len(entry) >= TOP


@pytest.mark.slow
@pytest.mark.parametrize("arch_engine", list(TRAPS), indirect=True)
def test_greedy_and_logprobs_match_transformers(arch_engine, hf) -> None:
    path, eng = arch_engine
    batch = prompts(7)
    params = SamplingParams(temperature=0.0, max_tokens=NEW, logprobs=TOP, ignore_eos=True)
    first = run_to_completion(eng, [(f"a{i}", p, params) for i, p in enumerate(batch[:3])])
    # the shared prefix is cached by now: this one starts from its blocks
    second = run_to_completion(eng, [("b", batch[3], params)])
    outs = [first[f"a{i}"] for i in range(3)] + [second["b"]]
    for prompt, out in zip(batch, outs):
        hf.assert_greedy(path, prompt, out.outputs[0].token_ids, NEW, ignore_eos=True)
        check_logprobs(hf, path, prompt, out)
