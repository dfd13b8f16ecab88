"""The field types of request bodies: what each accepts is what the schema says.

Bodies are validated strictly (no ``"5"`` for 5, no ``1`` for true), with one exception
JSON Schema itself makes: an integer may be written ``5.0``. Every integer is held to
int64, whatever else bounds it, so that a value the schema calls valid never overflows
further in.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from tandem.core.server.served_bounds import PROMPT_LIST, TOKEN_ID

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _integral(value: Any) -> Any:
    """``5.0`` as ``5`` (an integer to JSON Schema); any other value as it is."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


def Int(lo: int = INT64_MIN, hi: int = INT64_MAX, **extra: Any) -> Any:
    """An integer field held to ``[lo, hi]`` within int64; ``extra``: schema keywords."""
    bounds = Field(ge=max(lo, INT64_MIN), le=min(hi, INT64_MAX), json_schema_extra=extra or None)
    return Annotated[int, bounds, BeforeValidator(_integral)]  # bounds first: documented


TokenId = Int(0, **TOKEN_ID)  # the published schema bounds it by the served vocabulary
NonEmptyText = Annotated[str, Field(min_length=1)]


def PromptList(item: Any) -> Any:
    """A batch of prompts: at least one, at most the server's ``max_prompts`` (published)."""
    return Annotated[list[item], Field(min_length=1, json_schema_extra=PROMPT_LIST)]
