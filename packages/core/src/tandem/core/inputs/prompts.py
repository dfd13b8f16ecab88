"""The arguments of ``LLM.generate`` / ``chat`` in every accepted form, made uniform.

Prompts become what an engine's input processor takes (text or token ids) and sampling
parameters one :class:`SamplingParams` per prompt; anything else is a
:class:`~tandem.core.validate.RequestError` naming the argument, before any request reaches
an engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.validate import RequestError, RequestTypeError


def _token_list(value: Any, where: str) -> list[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise RequestTypeError(
            "prompt_token_ids",
            f"{where}: prompt_token_ids must be a list of ints, got {type(value).__name__}",
        )
    return list(value)


def _one_prompt(value: Any, i: int) -> str | list[int]:
    where = f"prompt {i}"
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        keys = set(value)
        if keys == {"prompt"}:
            return _one_prompt(value["prompt"], i)
        if keys == {"prompt_token_ids"}:
            return _token_list(value["prompt_token_ids"], where)
        raise RequestTypeError(
            "prompt",
            f"{where}: a dict prompt must have exactly one key, 'prompt' or "
            f"'prompt_token_ids'; got keys {sorted(map(str, keys))}",
        )
    raise RequestTypeError(
        "prompt",
        f"{where} must be a str or a dict with 'prompt' or 'prompt_token_ids', "
        f"got {type(value).__name__}",
    )


def normalize_prompts(prompts: Any) -> list[str | list[int]]:
    """Every accepted prompt form as what the engine's input processor takes: text or ids."""
    if isinstance(prompts, (str, Mapping)):
        prompts = [prompts]
    elif not isinstance(prompts, (list, tuple)):
        raise RequestTypeError(
            "prompts",
            "prompts must be a str, a dict {'prompt': ...} / {'prompt_token_ids': [...]}, "
            f"or a list of those; got {type(prompts).__name__}",
        )
    if not prompts:
        raise RequestError("prompts", "prompts is empty: give at least one prompt")
    return [_one_prompt(p, i) for i, p in enumerate(prompts)]


def one_conversation(messages: Any) -> bool:
    """Whether ``messages`` is one conversation (a list of turns), not a list of them."""
    first = messages[0] if isinstance(messages, (list, tuple)) and messages else None
    return isinstance(first, Mapping)


def normalize_params(
    params: Any, count: int, defaults: SamplingParams | None = None
) -> list[SamplingParams]:
    """One SamplingParams per prompt: ``defaults`` (the model's), one shared, or a list.

    Each was checked when it was made; none is copied (a copy would check it again), as
    nothing on the way to the engine changes one."""
    if params is None:
        return [defaults if defaults is not None else SamplingParams()] * count
    if isinstance(params, SamplingParams):
        return [params] * count
    if isinstance(params, (list, tuple)):
        if len(params) != count:
            raise RequestError(
                "sampling_params",
                f"sampling_params has {len(params)} entries but there are {count} prompts; "
                f"give one SamplingParams or exactly one per prompt",
            )
        for i, p in enumerate(params):
            if not isinstance(p, SamplingParams):
                raise RequestTypeError(
                    f"sampling_params[{i}]",
                    f"sampling_params[{i}] must be a SamplingParams, got {type(p).__name__}",
                )
        return list(params)
    raise RequestTypeError(
        "sampling_params",
        "sampling_params must be None, a SamplingParams or a list of them, "
        f"got {type(params).__name__}",
    )
