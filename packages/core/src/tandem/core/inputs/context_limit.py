"""The one message for a prompt longer than the context, wherever it is found.

``LLM``, ``tandem generate`` (before the engine loads) and the server all refuse such a
prompt with its token count, the context it must fit and how to widen it: the flag
``--max-model-len`` (``max_model_len=`` in Python), up to the model's own maximum.
"""

from __future__ import annotations

from typing import Any


def model_context_limit(hf_config: Any) -> int | None:
    """The longest context the model itself allows (its ``max_position_embeddings``)."""
    limit = getattr(hf_config, "max_position_embeddings", None)
    return int(limit) if limit is not None else None


def longer_context(max_model_len: int, model_limit: int | None) -> str:
    """How to make room for a longer prompt, or why there is none."""
    if model_limit is not None and max_model_len >= model_limit:
        return f"{model_limit} tokens is the model's own maximum: shorten the prompt"
    most = f", up to the model's {model_limit}" if model_limit is not None else ""
    return f"a longer context: --max-model-len N (max_model_len=N in Python){most}"


def prompt_too_long(where: str, tokens: int, max_model_len: int, model_limit: int | None) -> str:
    """``where`` has ``tokens`` tokens and cannot fit a context of ``max_model_len``."""
    return (
        f"{where} has {tokens} tokens; it must be shorter than max_model_len={max_model_len} "
        f"to leave room for one generated token ({longer_context(max_model_len, model_limit)})"
    )
