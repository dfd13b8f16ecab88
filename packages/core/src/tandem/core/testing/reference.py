"""transformers as the outside reference for tests: greedy tokens and log-softmax."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch


class HFReference:
    """Loads each checkpoint once (fp32, eager) and answers with transformers' own results."""

    def __init__(self) -> None:
        self._models: dict[str, Any] = {}

    def model(self, path: str | Path) -> Any:
        key = str(path)
        if key not in self._models:
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(
                key, dtype=torch.float32, attn_implementation="eager"
            )
            self._models[key] = model.eval()
        return self._models[key]

    def greedy(
        self, path: str | Path, prompt: list[int], max_new_tokens: int, ignore_eos: bool = False
    ) -> list[int]:
        """``generate(do_sample=False)`` for one prompt; stops at EOS unless ``ignore_eos``."""
        ids = torch.tensor([prompt])
        extra = {"min_new_tokens": max_new_tokens} if ignore_eos else {}
        with torch.no_grad():
            out = self.model(path).generate(
                ids,
                # explicit: prompts may contain the pad id, which generate would mask out
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=max_new_tokens,
                **extra,
            )
        return out[0, len(prompt) :].tolist()

    def logprobs(self, path: str | Path, tokens: list[int]) -> torch.Tensor:
        """log-softmax of the logits at every position of ``tokens``: [L, V]."""
        with torch.no_grad():
            logits = self.model(path)(torch.tensor([tokens])).logits[0]
        return logits.float().log_softmax(-1)


def run_to_completion(engine: Any, requests: list[tuple[str, Any, Any]]) -> dict[str, Any]:
    """Add every ``(request_id, prompt, params)``, step until all finish; final output per id."""
    for rid, prompt, params in requests:
        engine.add_request(rid, prompt, params)
    done: dict[str, Any] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
    return done
