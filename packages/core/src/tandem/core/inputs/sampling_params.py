"""Per-request sampling parameters, validated when constructed.

Semantics follow the common OpenAI-style conventions: ``temperature=0`` is greedy,
``top_k`` of 0 or -1 disables top-k (stored as 0), ``max_tokens=None`` means "until the
model's length limit", ``stop`` may be one string or a list of them.

A field the caller leaves out takes the model's own default when the request reaches an
engine (:meth:`SamplingParams.over`, from its ``generation_config.json`` or GGUF
metadata); the values written below are what is left where the model says nothing. A
field given explicitly always wins, ``temperature=0`` included.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tandem.core.inputs.engine_request import has_penalties, is_greedy
from tandem.core.structured.params import StructuredOutputsParams
from tandem.core.validate import (
    FLOAT32_MAX,
    FLOAT32_TINY,
    INT64_MAX,
    RequestError,
    RequestTypeError,
    check_bool,
    check_float,
    check_int,
    check_logit_bias,
    check_range,
    check_text,
    type_name,
)

GREEDY_EPS = 1e-5
_PENALTY_LIMIT = 2.0
MAX_N = 1024  # samples per request: each is a sequence in the scheduler
# the sampler divides or multiplies float32 logits by it; the kernel refuses values
# outside this range, so the front door does too
REPETITION_PENALTY_RANGE = (1e-6, 1e6)
_F32 = "the sampler computes in float32"


@dataclass(slots=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None  # a list after construction
    stop_token_ids: list[int] | None = None  # a list after construction
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    skip_special_tokens: bool = True
    logit_bias: dict[int, float] | None = None  # token id -> added to its logit, [-100, 100]
    # the output must match this (JSON schema, regex, choice, grammar): see tandem.core.structured
    structured_outputs: StructuredOutputsParams | None = None
    # the names of the fields the caller gave (set by __new__, kept by replace)
    given: frozenset[str] = field(init=False, repr=False, compare=False)

    def __new__(cls, *args: Any, **kwargs: Any) -> SamplingParams:
        self = object.__new__(cls)
        self.given = frozenset(_INIT_NAMES[: len(args)]) | frozenset(kwargs)
        return self

    def __post_init__(self) -> None:
        check_int("n", self.n, lo=1, hi=MAX_N)
        self.temperature = check_float("temperature", self.temperature)
        check_range("temperature", self.temperature, 0.0, FLOAT32_MAX, why=_F32)
        if self.temperature < GREEDY_EPS:
            self.temperature = 0.0
        self.top_p = check_float("top_p", self.top_p)
        check_range("top_p", self.top_p, 0.0, 1.0, lo_open=True)
        if self.top_p < FLOAT32_TINY:
            raise RequestError(
                "top_p",
                f"top_p must be >= {FLOAT32_TINY:.3g} (the smallest normal float32; {_F32}), "
                f"got {self.top_p!r}",
            )
        check_int("top_k", self.top_k)
        if self.top_k < -1:
            raise RequestError(
                "top_k", f"top_k must be -1 or 0 (disabled) or >= 1, got {self.top_k}"
            )
        self.top_k = max(self.top_k, 0)
        self.min_p = check_float("min_p", self.min_p)
        check_range("min_p", self.min_p, 0.0, 1.0)
        check_int("seed", self.seed, none_ok=True)
        self.stop = _stop_list(self.stop)
        self.stop_token_ids = _id_list(self.stop_token_ids)
        for name in ("include_stop_str_in_output", "ignore_eos", "skip_special_tokens"):
            check_bool(name, getattr(self, name))
        check_int("max_tokens", self.max_tokens, lo=1, none_ok=True)
        check_int("min_tokens", self.min_tokens, lo=0)
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise RequestError(
                "min_tokens",
                f"min_tokens must be <= max_tokens={self.max_tokens}, got {self.min_tokens}",
            )
        check_int("logprobs", self.logprobs, lo=0, none_ok=True)
        check_int("prompt_logprobs", self.prompt_logprobs, lo=0, none_ok=True)
        for name in ("presence_penalty", "frequency_penalty"):
            value = check_float(name, getattr(self, name))
            check_range(name, value, -_PENALTY_LIMIT, _PENALTY_LIMIT)
            setattr(self, name, value)
        self.repetition_penalty = check_float("repetition_penalty", self.repetition_penalty)
        lo, hi = REPETITION_PENALTY_RANGE
        check_range("repetition_penalty", self.repetition_penalty, lo, hi, why=_F32)
        self.logit_bias = check_logit_bias("logit_bias", self.logit_bias)
        so = self.structured_outputs
        if so is not None and not isinstance(so, StructuredOutputsParams):
            raise RequestTypeError(
                "structured_outputs",
                "structured_outputs must be a StructuredOutputsParams or None, "
                f"got {type_name(so)}",
            )

    @property
    def greedy(self) -> bool:
        """Whether the request picks the most likely token (temperature 0)."""
        return is_greedy(self.temperature)

    @property
    def stop_strings(self) -> list[str]:
        """``stop`` as a list (always a list after construction)."""
        return list(self.stop or [])

    @property
    def has_penalties(self) -> bool:
        return has_penalties(self.presence_penalty, self.frequency_penalty, self.repetition_penalty)

    @classmethod
    def from_generation_config(cls, gen: Mapping[str, Any]) -> SamplingParams:
        """A model's own defaults, read from its ``generation_config.json`` as
        ``transformers`` reads it: greedy unless ``do_sample`` is true, then its
        temperature, top-p, top-k (50 when unset, as there) and min-p; its repetition
        penalty and ``max_new_tokens`` either way. Fields it does not set keep this
        class's defaults."""
        values: dict[str, Any] = {}
        if gen.get("do_sample"):
            values["temperature"] = gen.get("temperature", 1.0)
            values["top_p"] = gen.get("top_p", 1.0)
            values["top_k"] = gen.get("top_k", 50)
            values["min_p"] = gen.get("min_p") or 0.0
        else:
            values["temperature"] = 0.0
        if gen.get("repetition_penalty") is not None:
            values["repetition_penalty"] = gen["repetition_penalty"]
        if gen.get("max_new_tokens") is not None:
            values["max_tokens"] = gen["max_new_tokens"]
        try:
            return cls(**{k: v for k, v in values.items() if v is not None})
        except (TypeError, ValueError) as exc:
            raise RequestError(
                getattr(exc, "field", None), f"generation_config.json: {exc}"
            ) from None

    def over(self, defaults: SamplingParams) -> SamplingParams:
        """These params with every field the caller left out taken from ``defaults`` (the
        model's); the fields given keep their values. Refused (RequestError naming the
        field) only when the two together break a rule, e.g. ``min_tokens`` above the
        model's ``max_tokens``."""
        if self.given >= _INIT_SET:
            return self
        values = {name: getattr(defaults, name) for name in _INIT_NAMES}
        values.update({name: getattr(self, name) for name in self.given})
        merged = SamplingParams(**_copied(values))
        merged.given = self.given
        return merged

    def clone(self) -> SamplingParams:
        """An independent copy (its lists are not shared with this one)."""
        return self.replace()

    def replace(self, **changes: Any) -> SamplingParams:
        """A validated copy with ``changes`` applied."""
        names = _INIT_SET
        unknown = sorted(set(changes) - names)
        if unknown:
            raise RequestTypeError(
                unknown[0],
                f"SamplingParams has no field {', '.join(unknown)}; "
                f"allowed: {', '.join(sorted(names))}",
            )
        values = _copied({name: getattr(self, name) for name in names})
        values.update(changes)
        copy = SamplingParams(**values)
        copy.given = self.given | frozenset(changes)
        return copy


def _copied(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with its lists and dict copied, so two params never share one."""
    values["stop"] = list(values["stop"] or [])
    values["stop_token_ids"] = list(values["stop_token_ids"] or [])
    values["logit_bias"] = dict(values["logit_bias"] or {})
    return values


_INIT_NAMES = tuple(f.name for f in dataclasses.fields(SamplingParams) if f.init)
_INIT_SET = frozenset(_INIT_NAMES)


def _stop_list(value: Any) -> list[str]:
    if value is None:
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise RequestTypeError(
            "stop", f"stop must be a str, a list of str or None, got {type_name(value)}"
        )
    out: list[str] = []
    for k, s in enumerate(items):
        if not isinstance(s, str):
            raise RequestTypeError(
                f"stop[{k}]", f"stop must contain only str, got {type_name(s)} ({s!r})"
            )
        if not s:
            raise RequestError(f"stop[{k}]", "stop strings must be non-empty, got ''")
        check_text(f"stop[{k}]", s)
        out.append(s)
    return out


def _id_list(value: Any) -> list[int]:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise RequestTypeError(
            "stop_token_ids",
            f"stop_token_ids must be a list of int or None, got {type_name(value)}",
        )
    for k, i in enumerate(value):
        check_int(f"stop_token_ids[{k}]", i, lo=0, hi=INT64_MAX)
    return list(value)
