"""Requests for engine v1's unit tests, built the way the front door builds them."""

from __future__ import annotations

from typing import Any

from tandem.core.inputs.processor import EngineRequest, InputProcessor
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.v1.core.request import Request

# token-id prompts only (no tokenizer), a vocabulary and length no test reaches
INPUTS = InputProcessor(None, 1 << 16, 1 << 16, [])


def engine_request(request_id: str, tokens: list[int], **params: Any) -> EngineRequest:
    return INPUTS.process(request_id, list(tokens), SamplingParams(**params))


def sample(key: str, tokens: list[int], arrival: int = 0, **params: Any) -> Request:
    """Sample 0 of a request ``key`` (its scheduler key is ``key`` itself)."""
    r = engine_request(key, tokens, **params)
    return Request(key, key, 0, list(tokens), r.sampling, r.stop, r.sampling.seed, arrival)
