"""transformers as the outside reference for tests: greedy tokens and log-softmax."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tandem.core.testing.requests import add_request

# fp32 logits of two correct implementations agree to ~1e-5; a smaller gap is a tie
TIE_TOLERANCE = 1e-4


class HFReference:
    """Loads each checkpoint once (fp32, eager) and answers with transformers' own results."""

    def __init__(self) -> None:
        self._models: dict[str, Any] = {}
        self._greedy: dict[tuple[str, tuple[int, ...], int, bool], list[int]] = {}

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
        key = (str(path), tuple(prompt), max_new_tokens, ignore_eos)
        if key not in self._greedy:
            self._greedy[key] = self._generate(path, prompt, max_new_tokens, ignore_eos)
        return list(self._greedy[key])

    def _generate(
        self, path: str | Path, prompt: list[int], max_new_tokens: int, ignore_eos: bool
    ) -> list[int]:
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

    def assert_greedy(
        self,
        path: str | Path,
        prompt: list[int],
        got: list[int],
        max_new_tokens: int,
        ignore_eos: bool = False,
        tie: float = TIE_TOLERANCE,
    ) -> None:
        """``got`` must be transformers' greedy continuation of ``prompt``.

        Two correct fp32 implementations sum in different orders, so where the top two
        logits are closer than that noise, either may win. At the first differing token
        the two candidates' log-probabilities (transformers', given the shared prefix)
        must then be within ``tie``; after it the sequences rightly go separate ways.
        Any other difference fails, naming the position and both tokens.
        """
        want = self.greedy(path, prompt, max_new_tokens, ignore_eos)
        if got == want:
            return
        j = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
        if j is None:
            raise AssertionError(
                f"greedy lengths differ: got {len(got)} tokens, transformers {len(want)}; "
                f"got={got} want={want}"
            )
        row = self.logprobs(path, prompt + got[:j])[-1]  # [V]
        gap = float(row[want[j]] - row[got[j]])
        if gap > tie:
            raise AssertionError(
                f"greedy token {j} differs: got {got[j]}, transformers {want[j]} "
                f"(logprob gap {gap:.3g} > {tie}); got={got} want={want}"
            )

    def logprobs(self, path: str | Path, tokens: list[int]) -> torch.Tensor:
        """log-softmax of the logits at every position of ``tokens``: [L, V]."""
        with torch.no_grad():
            logits = self.model(path)(torch.tensor([tokens])).logits[0]
        return logits.float().log_softmax(-1)


def run_to_completion(engine: Any, requests: list[tuple[str, Any, Any]]) -> dict[str, Any]:
    """Add every ``(request_id, prompt, params)``, step until all finish; final output per id."""
    for rid, prompt, params in requests:
        add_request(engine, rid, prompt, params)
    done: dict[str, Any] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
    return done
