"""The request contract: (request id, prompt, SamplingParams) -> one checked ``EngineRequest``.

The front door (``LLM``, ``AsyncLLM`` and the server through it) owns one
:class:`InputProcessor` per engine and turns a prompt and its params into an
:class:`EngineRequest` here, once: the prompt is tokenized, every id is checked against
the vocabulary, ``max_tokens`` is clamped to the room ``max_model_len`` leaves, a seed is
drawn when none is given, and the stop rules (EOS, stop ids, stop strings, the ids banned
under ``min_tokens``) are resolved. The values themselves were checked when the
``SamplingParams`` was made. Engines never import this module: they consume the struct
as it is, and neither re-validate nor re-tokenize. The struct and its parts are defined in
:mod:`tandem.core.inputs.engine_request` and imported from here as well.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from typing import Any

from tandem.core.inputs.context_limit import model_context_limit, prompt_too_long
from tandem.core.inputs.engine_request import EngineRequest, OutputKind, SamplingSpec, StopRules
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.structured.spec import GrammarSpec
from tandem.core.validate import (
    ContextLengthExceeded,
    RequestError,
    RequestTypeError,
    check_text,
)

SEED_MODULUS = 1 << 63  # sampling seeds live in [0, 2**63); a given seed wraps into it
LOGGER = logging.getLogger("tandem")

__all__ = ["EngineRequest", "InputProcessor", "OutputKind", "SamplingSpec", "StopRules"]


class InputProcessor:
    """Builds the requests of one engine: its vocabulary, length limit, EOS ids and seeds.

    A request without a seed gets the next one of a generator seeded by the engine's
    seed, in arrival order, so both engines draw the same seeds for the same requests.
    """

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int,
        max_model_len: int,
        eos_token_ids: Sequence[int],
        seed: int = 0,
        defaults: SamplingParams | None = None,
        model_limit: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.model_limit = model_limit  # the model's own longest context, for messages
        # what a request without params gets: the model's generation_config defaults
        self.defaults = defaults if defaults is not None else SamplingParams()
        # the last params merged with the defaults: a batch shares one params object
        self._last_merge: tuple[SamplingParams, SamplingParams] | None = None
        self.vocab_size = int(vocab_size)
        self.max_model_len = int(max_model_len)
        eos = list(eos_token_ids)
        if not eos and getattr(tokenizer, "eos_token_id", None) is not None:
            eos = [int(tokenizer.eos_token_id)]
        self.eos_token_ids = eos
        self._rng = random.Random(seed)

    @classmethod
    def for_config(cls, config: Any, tokenizer: Any) -> InputProcessor:
        """The processor of an engine built on ``config`` (an ``EngineConfig``)."""
        mc = config.model
        defaults = SamplingParams.from_generation_config(mc.generation_config)
        limit = model_context_limit(mc.hf_config)
        return cls(
            tokenizer,
            mc.vocab_size,
            mc.max_model_len,
            mc.eos_token_ids,
            config.seed,
            defaults,
            limit,
        )

    def process(
        self,
        request_id: Any,
        prompt: Any,
        params: Any = None,
        where: str | None = None,
        strict: bool = False,
        output_kind: OutputKind = OutputKind.CUMULATIVE,
    ) -> EngineRequest:
        """The checked request; TypeError/ValueError naming ``where`` (default: the id).

        A ``max_tokens`` larger than the room ``max_model_len`` leaves after the prompt is
        cut to that room, with a warning on the ``tandem`` logger (the sample then ends
        with ``finish_reason="length"``); ``strict=True`` refuses it instead (ValueError),
        as an OpenAI-style server must.
        """
        if not isinstance(request_id, str) or not request_id:
            raise RequestTypeError(
                "request_id", f"request_id must be a non-empty str, got {request_id!r}"
            )
        where = where or f"request {request_id!r}"
        if params is None:
            params = self.defaults
        if not isinstance(params, SamplingParams):
            raise RequestTypeError(
                "params", f"{where}: params must be a SamplingParams, got {type(params).__name__}"
            )
        params = self._merged(params)
        text, ids = self._tokens(prompt, where)
        room = self.max_model_len - len(ids)
        max_tokens = room if params.max_tokens is None else min(params.max_tokens, room)
        if params.max_tokens is not None and params.max_tokens > room:
            why = (
                f"{where}: max_tokens={params.max_tokens} does not fit: the prompt has "
                f"{len(ids)} tokens and max_model_len={self.max_model_len} leaves room for {room}"
            )
            if strict:
                raise ContextLengthExceeded("max_tokens", why)
            LOGGER.warning("%s; generating at most %d tokens", why, room)
        return EngineRequest(
            request_id=request_id,
            prompt=text,
            prompt_token_ids=ids,
            n=params.n,
            sampling=self._sampling(params),
            stop=self._stop(params, max_tokens),
            skip_special_tokens=params.skip_special_tokens,
            output_kind=OutputKind(output_kind),
        )

    def process_all(
        self,
        batch: Sequence[tuple[str, Any, Any, str | None]],
        output_kind: OutputKind = OutputKind.CUMULATIVE,
    ) -> list[EngineRequest]:
        """:meth:`process` each ``(request_id, prompt, params, where)``; all or none.

        When one is refused, no seed was drawn for any of them (the next request gets
        the seed it would have got).
        """
        state = self._rng.getstate()
        try:
            return [self.process(*args, output_kind=output_kind) for args in batch]
        except BaseException:
            self._rng.setstate(state)
            raise

    def _merged(self, params: SamplingParams) -> SamplingParams:
        """``params`` with the fields left out taken from the model's defaults, merged
        (and so checked) once for a batch that shares one params object."""
        if params is self.defaults:
            return params
        last = self._last_merge
        if last is not None and last[0] is params:
            return last[1]
        merged = params.over(self.defaults)
        self._last_merge = (params, merged)
        return merged

    def _tokens(self, prompt: Any, where: str) -> tuple[str | None, list[int]]:
        if isinstance(prompt, str):
            check_text("prompt", prompt)
            text, ids = prompt, (self.tokenizer.encode(prompt) if prompt else [])
        elif isinstance(prompt, (list, tuple)):
            for t in prompt:
                if isinstance(t, bool) or not isinstance(t, int):
                    raise RequestTypeError(
                        "prompt", f"{where}: prompt token ids must be ints, got {t!r}"
                    )
            text, ids = None, list(prompt)
        else:
            raise RequestTypeError(
                "prompt",
                f"{where}: prompt must be a str or a list of token ids (int), "
                f"got {type(prompt).__name__}",
            )
        if not ids:
            raise RequestError("prompt", f"{where} is empty: it must have at least one token")
        outside = [t for t in ids if not 0 <= t < self.vocab_size]
        if outside:
            raise RequestError(
                "prompt",
                f"{where}: token id {outside[0]} is outside the vocabulary [0, {self.vocab_size})",
            )
        if len(ids) >= self.max_model_len:
            raise ContextLengthExceeded(
                "prompt", prompt_too_long(where, len(ids), self.max_model_len, self.model_limit)
            )
        return text, ids

    def _sampling(self, p: SamplingParams) -> SamplingSpec:
        bias = dict(p.logit_bias or {})
        outside = [t for t in bias if t >= self.vocab_size]
        if outside:
            raise RequestError(
                "logit_bias",
                f"logit_bias: token id {outside[0]} is outside the vocabulary "
                f"[0, {self.vocab_size})",
            )
        seed = p.seed if p.seed is not None else self._rng.getrandbits(63)
        return SamplingSpec(
            seed=seed % SEED_MODULUS,
            temperature=float(p.temperature),
            top_p=float(p.top_p),
            top_k=min(int(p.top_k), self.vocab_size),  # more than the vocabulary: all
            min_p=float(p.min_p),
            presence_penalty=float(p.presence_penalty),
            frequency_penalty=float(p.frequency_penalty),
            repetition_penalty=float(p.repetition_penalty),
            # more top entries than the vocabulary has means all of them
            logprobs=None if p.logprobs is None else min(p.logprobs, self.vocab_size),
            prompt_logprobs=(
                None if p.prompt_logprobs is None else min(p.prompt_logprobs, self.vocab_size)
            ),
            logit_bias=bias,
            grammar=_grammar(p),
        )

    def _stop(self, p: SamplingParams, max_tokens: int) -> StopRules:
        eos = [] if p.ignore_eos else list(self.eos_token_ids)
        stop_ids = list(p.stop_token_ids or [])
        banned = [t for t in dict.fromkeys([*stop_ids, *eos]) if 0 <= t < self.vocab_size]
        return StopRules(
            max_tokens=max_tokens,
            min_tokens=min(int(p.min_tokens), max_tokens),
            eos_token_ids=eos,
            stop_token_ids=stop_ids,
            stop=p.stop_strings,
            include_stop_str_in_output=p.include_stop_str_in_output,
            banned=sorted(banned),
        )


def _grammar(p: SamplingParams) -> GrammarSpec | None:
    """The request's constraint, checked (RequestError when it does not compile)."""
    if p.structured_outputs is None:
        return None
    from tandem.core.structured.check import check_spec

    spec = p.structured_outputs.spec()
    check_spec(spec, p.structured_outputs.name)
    return spec
