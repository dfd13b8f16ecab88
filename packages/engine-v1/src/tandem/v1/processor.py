"""The front end's processor: (request id, prompt, params) -> a checked ``AddRequest``.

Everything is validated here, in the caller's process, before anything is sent, so a
bad request raises at once and the engine stays usable. A request without a seed
gets one drawn from the engine's generator (seeded by ``EngineArgs.seed``) in
arrival order, the same way engine v0 draws it.
"""

from __future__ import annotations

import random
from typing import Any

from tandem.core.sampling_params import SamplingParams
from tandem.v1 import messages as m

SEED_LIMIT = 1 << 63


class Processor:
    def __init__(self, config: Any, tokenizer: Any) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.max_model_len = int(config.model.max_model_len)
        self.vocab_size = int(config.model.vocab_size)
        self.rng = random.Random(config.seed)

    def draw_seed(self) -> int:
        return self.rng.getrandbits(63)

    def process(self, request_id: Any, prompt: Any, params: Any) -> m.AddRequest:
        if not isinstance(request_id, str) or not request_id:
            raise TypeError(f"request_id must be a non-empty str, got {request_id!r}")
        if params is None:
            params = SamplingParams()
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
        text, ids = self._prompt(prompt)
        n = len(ids)
        if n == 0:
            raise ValueError(f"request {request_id!r}: the prompt is empty; it needs >= 1 token")
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(
                f"request {request_id!r}: prompt token id {bad[0]} is outside "
                f"the vocabulary [0, {self.vocab_size})"
            )
        if n >= self.max_model_len:
            raise ValueError(
                f"request {request_id!r}: the prompt has {n} tokens; it must be "
                f"shorter than max_model_len={self.max_model_len}"
            )
        room = self.max_model_len - n
        max_tokens = room if params.max_tokens is None else min(params.max_tokens, room)
        # a negative or huge seed wraps into [0, 2**63) as in engine v0
        seed = (params.seed if params.seed is not None else self.draw_seed()) % SEED_LIMIT
        spec = m.SamplingSpec(
            seed=seed,
            temperature=float(params.temperature),
            top_p=float(params.top_p),
            top_k=int(params.top_k),
            min_p=float(params.min_p),
            presence_penalty=float(params.presence_penalty),
            frequency_penalty=float(params.frequency_penalty),
            repetition_penalty=float(params.repetition_penalty),
            max_tokens=max_tokens,
            min_tokens=int(params.min_tokens),
            ignore_eos=bool(params.ignore_eos),
            stop_token_ids=list(params.stop_token_ids or []),
            # more top entries than the vocabulary has means all of them, as in engine v0
            logprobs=self._top_count(params.logprobs),
            prompt_logprobs=self._top_count(params.prompt_logprobs),
        )
        detok = m.DetokSpec(
            prompt=text,
            stop=params.stop_strings,
            include_stop_str_in_output=params.include_stop_str_in_output,
            skip_special_tokens=params.skip_special_tokens,
            min_tokens=int(params.min_tokens),
        )
        return m.AddRequest(request_id, ids, int(params.n), spec, detok)

    def _top_count(self, k: int | None) -> int | None:
        return None if k is None else min(k, self.vocab_size)

    def _prompt(self, prompt: Any) -> tuple[str | None, list[int]]:
        if isinstance(prompt, str):
            return prompt, self.tokenizer.encode(prompt) if prompt else []
        if isinstance(prompt, (list, tuple)):
            for t in prompt:
                if isinstance(t, bool) or not isinstance(t, int):
                    raise TypeError(f"prompt token ids must be ints, got {t!r}")
            return None, list(prompt)
        raise TypeError(
            f"prompt must be a str or a list of token ids (int), got {type(prompt).__name__}"
        )
