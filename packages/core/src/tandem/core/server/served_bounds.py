"""Bounds of a request that depend on the model served, written into its published schema.

A token id must lie in the served vocabulary, which the request models cannot know: they
mark such fields (:data:`TOKEN_ID`, :data:`TOKEN_ID_KEYS`) and :func:`bind` replaces each
mark in the OpenAPI description with the served range, so that what the description
calls valid is what the engine accepts (the engine checks the range itself).
"""

from __future__ import annotations

from typing import Any

MARK = "x-tandem-bound"
TOKEN_ID = {MARK: "token_id"}  # an integer: a token id of the served vocabulary
TOKEN_ID_KEYS = {MARK: "token_id_keys"}  # an object whose keys are token ids (as text)
PROMPT_LIST = {MARK: "prompt_list"}  # a batch of prompts: at most max_prompts


def range_pattern(top: int) -> str:
    """A regular expression matching the decimal numbers 0..``top`` (no leading zeros)."""
    if top < 0:
        raise ValueError(f"top must be >= 0, got {top}")
    digits = str(top)
    width = len(digits)
    alternatives = ["0"]
    if width >= 2:  # every number shorter than top
        alternatives.append("[1-9]" if width == 2 else f"[1-9][0-9]{{0,{width - 2}}}")
    for i, digit in enumerate(digits):  # same width: a smaller digit at i, then anything
        lo, hi = (1 if i == 0 else 0), int(digit) - 1
        if hi < lo:
            continue
        rest = width - i - 1
        tail = "" if rest == 0 else "[0-9]" if rest == 1 else f"[0-9]{{{rest}}}"
        span = str(lo) if lo == hi else f"[{lo}-{hi}]"
        alternatives.append(f"{digits[:i]}{span}{tail}")
    if top:
        alternatives.append(digits)
    return "^(?:" + "|".join(alternatives) + ")$"


def bind(node: Any, vocab_size: int, max_prompts: int) -> None:
    """Replace every mark under ``node`` (a JSON schema, changed in place) with its bound:
    token ids of a vocabulary of ``vocab_size``, batches of ``max_prompts``."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
            continue
        if not isinstance(item, dict):
            continue
        kind = item.pop(MARK, None)
        if kind == "token_id":
            item["maximum"] = vocab_size - 1
        elif kind == "prompt_list":
            item["maxItems"] = max_prompts
        elif kind == "token_id_keys":
            values = item.pop("patternProperties", {})
            item["propertyNames"] = {"pattern": range_pattern(vocab_size - 1)}
            item["additionalProperties"] = next(iter(values.values()), True)
        stack.extend(item.values())
