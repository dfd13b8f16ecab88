"""SmolLM2-135M-Instruct, a real trained model (30 layers, tied LM head, vocab 49152).

Both engines must give transformers' greedy tokens on the same checkpoint (token for
token, but for fp32 near-ties), and say something sensible about France.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tandem.core import LLM, SamplingParams

pytestmark = pytest.mark.slow
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
]
NEW = 24


@pytest.fixture(scope="module")
def real_llm(smollm2: Path, engine: str) -> Iterator[LLM]:
    with LLM(model=smollm2, engine=engine, dtype="float32", max_model_len=256) as llm:
        yield llm


def test_greedy_matches_transformers(real_llm: LLM, smollm2: Path, hf) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=NEW, ignore_eos=True)
    tokenizer = real_llm.get_tokenizer()
    outs = real_llm.generate(PROMPTS, params, use_tqdm=False)
    for prompt, out in zip(PROMPTS, outs):
        ids = tokenizer.encode(prompt)
        assert out.prompt_token_ids == ids
        hf.assert_greedy(smollm2, ids, out.outputs[0].token_ids, NEW, ignore_eos=True)


def test_it_knows_the_capital_of_france(real_llm: LLM) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=8)
    text = real_llm.generate("The capital of France is", params, use_tqdm=False)[0].outputs[0]
    assert "Paris" in text.text
    chat = real_llm.chat(
        [{"role": "user", "content": "What is the capital of France?"}],
        SamplingParams(temperature=0.0, max_tokens=24),
        use_tqdm=False,
    )[0].outputs[0]
    assert "Paris" in chat.text and chat.finish_reason == "stop"
