"""What a request returns: one ``RequestOutput`` holding ``n`` ``CompletionOutput``s.

Logprobs are per position: ``logprobs[i]`` maps token id -> ``Logprob`` for the i-th
generated token, holding the sampled token plus the top-k alternatives.
``prompt_logprobs`` has the same shape per prompt token, with ``None`` for the first
token (nothing precedes it to predict it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import msgspec

# "error": the request failed inside the engine (``RequestOutput.error`` says why); the
# engine goes on serving the other requests
FINISH_REASONS = ("stop", "length", "abort", "error")

_PATH = re.compile(r"(?<![\w.])(?:[A-Za-z]:)?(?:[\\/][\w.@+-]+){2,}")  # a file path

SampleLogprobs = list[dict[int, "Logprob"]]
PromptLogprobs = list["dict[int, Logprob] | None"]


class Logprob(msgspec.Struct, array_like=True):
    """One token's logprob at one position (a msgspec Struct: engine v1 sends it as is)."""

    logprob: float
    rank: int | None = None  # 1 = the most likely token
    decoded_token: str | None = None


@dataclass(slots=True)
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None = None
    logprobs: SampleLogprobs | None = None
    finish_reason: str | None = None  # one of FINISH_REASONS, or None while running
    stop_reason: int | str | None = None  # the stop string or stop token id; None for EOS

    def __post_init__(self) -> None:
        if self.finish_reason is not None and self.finish_reason not in FINISH_REASONS:
            raise ValueError(
                f"finish_reason must be one of {', '.join(FINISH_REASONS)} or None, "
                f"got {self.finish_reason!r}"
            )

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(slots=True)
class RequestMetrics:
    """Wall-clock times (``time.monotonic()``) of a request's milestones."""

    arrival_time: float
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: PromptLogprobs | None
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = False
    num_cached_tokens: int = 0
    metrics: RequestMetrics | None = None
    error: str | None = None  # why the request failed (finish_reason "error"), else None

    def __post_init__(self) -> None:
        if self.num_cached_tokens < 0:
            raise ValueError(f"num_cached_tokens must be >= 0, got {self.num_cached_tokens}")


def mask_paths(text: str) -> str:
    """``text`` with every file path replaced by ``<path>`` (it may reach a client)."""
    return _PATH.sub("<path>", text)


def error_text(exc: BaseException, limit: int = 200) -> str:
    """What ``RequestOutput.error`` says of ``exc``: its type and the first line of its
    message, file paths masked, at most ``limit`` characters (never a traceback: the
    text goes to whoever sent the request)."""
    lines = str(exc).strip().splitlines()
    first = mask_paths(lines[0]) if lines else ""
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
