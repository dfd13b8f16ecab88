"""Field checks shared by every public entry: errors name the field, the rule and the value.

A refused value raises :class:`RequestError` (a ``ValueError``) or
:class:`RequestTypeError` (also a ``TypeError``), both carrying ``field``: the server
reports it as the error's ``param`` instead of guessing it from the message.

Numbers are checked in the units the kernels compute in: a sampling parameter is a
float32 and a token id an int64 there, so a value that is finite as a Python float but
not as a float32 (``3.5e38``, ``1e-300``) is refused here, not inside a batched step.
"""

from __future__ import annotations

import math
from typing import Any

FLOAT32_MAX = 3.4028234663852886e38  # the largest finite float32
FLOAT32_TINY = 1.1754943508222875e-38  # the smallest normal float32
INT64_MAX = 2**63 - 1
LOGIT_BIAS_RANGE = (-100.0, 100.0)  # as OpenAI's API: added to the logit before sampling


class RequestError(ValueError):
    """A refused input; ``field`` names it (``"top_p"``, ``"stop_token_ids[2]"``, ...)."""

    def __init__(self, field: str | None, message: str) -> None:
        super().__init__(message)
        self.field = field

    @property
    def root(self) -> str | None:
        """The field without its index or sub-path: ``stop_token_ids[2]`` -> ``stop_token_ids``."""
        if self.field is None:
            return None
        return self.field.split("[", 1)[0].split(".", 1)[0]


class RequestTypeError(RequestError, TypeError):
    """A refused input of the wrong type (catchable as ``TypeError`` too)."""


class ContextLengthExceeded(RequestError):
    """A prompt, with the tokens asked for, longer than the context window (the OpenAI
    API's ``context_length_exceeded``): well formed, but too long for this model."""


def type_name(value: Any) -> str:
    return type(value).__name__


def check_int(
    name: str, value: Any, lo: int | None = None, none_ok: bool = False, hi: int | None = None
) -> None:
    """RequestTypeError unless ``value`` is an int (bool is not); RequestError outside
    [``lo``, ``hi``]."""
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "an int or None" if none_ok else "an int"
        raise RequestTypeError(name, f"{name} must be {kind}, got {type_name(value)} ({value!r})")
    if lo is not None and value < lo:
        raise RequestError(name, f"{name} must be >= {lo}, got {value}")
    if hi is not None and value > hi:
        raise RequestError(name, f"{name} must be <= {hi}, got {value}")


def check_float(name: str, value: Any) -> float:
    """RequestTypeError unless ``value`` is a real number; RequestError for NaN or infinity."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestTypeError(name, f"{name} must be a float, got {type_name(value)} ({value!r})")
    try:
        out = float(value)
    except OverflowError:  # an int beyond any float
        out = math.inf if value > 0 else -math.inf
    if not math.isfinite(out):
        raise RequestError(name, f"{name} must be a finite number, got {value!r}")
    return out


def check_range(
    name: str, value: float, lo: float, hi: float, lo_open: bool = False, why: str = ""
) -> None:
    """RequestError unless ``lo <= value <= hi`` (``lo < value`` when ``lo_open``)."""
    below = value <= lo if lo_open else value < lo
    if below or value > hi:
        bracket = "(" if lo_open else "["
        tail = f" ({why})" if why else ""
        raise RequestError(name, f"{name} must be in {bracket}{lo:g}, {hi:g}]{tail}, got {value!r}")


def check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise RequestTypeError(name, f"{name} must be a bool, got {type_name(value)} ({value!r})")


def check_text(name: str, value: str) -> None:
    """RequestError unless ``value`` is valid Unicode (a lone surrogate cannot be encoded,
    tokenized or sent to another process)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start : exc.end]
        raise RequestError(
            name,
            f"{name} must be valid Unicode text; it holds the lone surrogate "
            f"{bad.encode('unicode_escape').decode()!s} at index {exc.start}",
        ) from None


def check_logit_bias(name: str, value: Any) -> dict[int, float] | None:
    """``value`` (``{token id: bias}``; ids as ints or as decimal strings, the OpenAI
    shape) as a dict of int ids to floats in :data:`LOGIT_BIAS_RANGE`; None when empty.

    Ids are checked against the vocabulary by the engine's input processor."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RequestTypeError(
            name, f"{name} must be a dict of token id -> bias, got {type_name(value)} ({value!r})"
        )
    lo, hi = LOGIT_BIAS_RANGE
    out: dict[int, float] = {}
    for key, bias in value.items():
        if isinstance(key, str) and key.strip().isdigit():
            token = int(key)
        elif isinstance(key, int) and not isinstance(key, bool):
            token = key
        else:
            raise RequestTypeError(
                name, f"{name} keys must be token ids (ints or decimal strings), got {key!r}"
            )
        where = f"{name}[{token}]"
        check_int(where, token, lo=0, hi=INT64_MAX)
        out[token] = check_float(where, bias)
        check_range(where, out[token], lo, hi)
    return out or None
