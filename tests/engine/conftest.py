from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from tandem.core.config import EngineArgs
from tandem.core.outputs import RequestOutput
from tandem.core.testing import make_model
from tandem.v0 import LLMEngine


@pytest.fixture(scope="session")
def tiny_llama() -> Path:
    return make_model(size="tiny", arch="llama")


@pytest.fixture(scope="session", params=["llama", "mistral", "qwen2"])
def tiny_arch_model(request: pytest.FixtureRequest) -> Path:
    return make_model(size="tiny", arch=request.param)


def make_engine(path: Path, **kwargs: Any) -> LLMEngine:
    kwargs.setdefault("max_model_len", 128)
    return LLMEngine.from_engine_args(EngineArgs(model=str(path), dtype="float32", **kwargs))


def run_all(engine: LLMEngine, prompts: list[Any], params: Any) -> list[RequestOutput]:
    """Add every prompt, step until done; the final outputs in prompt order."""
    ids = [f"t{i}" for i in range(len(prompts))]
    plist = params if isinstance(params, list) else [params] * len(prompts)
    for rid, prompt, p in zip(ids, prompts, plist):
        engine.add_request(rid, prompt, p)
    done: dict[str, RequestOutput] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
    return [done[rid] for rid in ids]


@pytest.fixture()
def new_engine(tiny_llama: Path) -> Iterator[Callable[..., LLMEngine]]:
    """A factory of v0 engines on the tiny llama model, all shut down after the test."""
    made: list[LLMEngine] = []

    def make(path: Path | None = None, **kwargs: Any) -> LLMEngine:
        made.append(make_engine(path or tiny_llama, **kwargs))
        return made[-1]

    yield make
    for eng in made:
        eng.shutdown()


@pytest.fixture()
def engine(new_engine: Callable[..., LLMEngine]) -> LLMEngine:
    return new_engine()


@pytest.fixture(scope="session")
def run() -> Callable[..., list[RequestOutput]]:
    return run_all


class HFReference:
    """transformers as the outside reference (fp32 models cached per path)."""

    def __init__(self) -> None:
        self._models: dict[Path, object] = {}

    def model(self, path: Path) -> Any:
        if path not in self._models:
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
            self._models[path] = model.eval()
        return self._models[path]

    def greedy(self, path: Path, prompt: list[int], max_new_tokens: int) -> list[int]:
        """transformers' greedy ``generate`` for one prompt (stops at the model's EOS)."""
        model = self.model(path)
        ids = torch.tensor([prompt])
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=max_new_tokens,
            )
        return out[0, len(prompt) :].tolist()

    def logprobs(self, path: Path, tokens: list[int]) -> torch.Tensor:
        """log-softmax of transformers' logits at every position of ``tokens``: [L, V]."""
        model = self.model(path)
        with torch.no_grad():
            logits = model(torch.tensor([tokens])).logits[0]
        return logits.float().log_softmax(-1)


@pytest.fixture(scope="session")
def hf() -> HFReference:
    return HFReference()
