"""When a sample ends, shared by both engines: the token rules and stop strings.

Rules, checked after every token in this order (as vLLM users expect):

* nothing stops a sample before it has ``min_tokens`` output tokens (the sampler also
  keeps the ``banned`` ids, EOS and ``stop_token_ids``, from being drawn until then);
* EOS (unless ``ignore_eos``): ``finish_reason="stop"``, ``stop_reason=None``;
* a ``stop_token_ids`` entry: ``"stop"`` with that id as ``stop_reason``; the token stays
  in ``token_ids`` but its text is left out unless ``include_stop_str_in_output``;
* ``max_tokens`` (clamped to the room ``max_model_len`` leaves): ``"length"``;
* a ``stop`` string in the text: ``"stop"`` with the string as ``stop_reason``; the text
  ends before it (or after it with ``include_stop_str_in_output``).

:func:`token_stop` applies the token rules (engine v1 runs it in its core process, where
only ids are known); :class:`SampleText` turns tokens into text and applies the stop
strings (v1 runs it in its detokenizer). While a sample runs, the end of its text that
could still grow into a stop string is held back, so a streamed text never shows part of
a stop string: only the tail is searched, as a stop string can only end in new text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tandem.core.text.detokenizer import IncrementalDetokenizer

if TYPE_CHECKING:
    from tandem.core.inputs.processor import StopRules
    from tandem.core.text.tokenizer import Tokenizer

Verdict = tuple[str, int | None]  # (finish_reason, stop_reason) of a token rule


@dataclass(frozen=True, slots=True)
class StopCheck:
    """The outcome of one check.

    ``text`` is the output text (cut at the stop string on a match) and ``releasable``
    the prefix of it that may be shown to a streaming client now.
    """

    stop: str | None
    text: str
    releasable: str

    @property
    def matched(self) -> bool:
        return self.stop is not None


class StopStringMatcher:
    """Find the first stop string in a growing text."""

    __slots__ = ("_longest", "include_in_output", "stops")

    def __init__(self, stops: Sequence[str], include_in_output: bool = False) -> None:
        if isinstance(stops, str) or not isinstance(stops, Sequence):
            raise TypeError(f"stops must be a list of str, got {type(stops).__name__}")
        for s in stops:
            if not isinstance(s, str):
                raise TypeError(f"stops must contain str, got {type(s).__name__} ({s!r})")
            if not s:
                raise ValueError("stops must not contain the empty string, got ''")
        if not isinstance(include_in_output, bool):
            raise TypeError(
                f"include_in_output must be a bool, got {type(include_in_output).__name__}"
            )
        self.stops = list(dict.fromkeys(stops))
        self.include_in_output = include_in_output
        self._longest = max((len(s) for s in self.stops), default=0)

    def find(self, text: str, num_new: int) -> tuple[int, str] | None:
        """The earliest stop string that ends in the last ``num_new`` chars: (start, stop).

        At equal starts the longer stop string wins (it contains the shorter one).
        """
        if not self.stops or num_new <= 0:
            return None
        best: tuple[int, str] | None = None
        for stop in self.stops:
            lo = max(0, len(text) - num_new - len(stop) + 1)
            at = text.find(stop, lo)
            if at < 0:
                continue
            if best is None or at < best[0] or (at == best[0] and len(stop) > len(best[1])):
                best = (at, stop)
        return best

    def check(self, text: str, num_new: int) -> StopCheck:
        """Check ``text``, whose last ``num_new`` characters arrived since the last check."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        if isinstance(num_new, bool) or not isinstance(num_new, int):
            raise TypeError(f"num_new must be an int, got {type(num_new).__name__}")
        if not 0 <= num_new <= len(text):
            raise ValueError(f"num_new must be in [0, len(text)={len(text)}], got {num_new}")
        hit = self.find(text, num_new)
        if hit is None:
            return StopCheck(None, text, self.releasable_text(text))
        at, stop = hit
        cut = text[: at + len(stop)] if self.include_in_output else text[:at]
        return StopCheck(stop, cut, cut)

    def releasable_text(self, text: str) -> str:
        """``text`` without its longest suffix that is a proper prefix of a stop string."""
        if self.include_in_output or not self.stops:
            return text
        for k in range(min(self._longest - 1, len(text)), 0, -1):
            tail = text[-k:]
            if any(len(s) > k and s.startswith(tail) for s in self.stops):
                return text[:-k]
        return text

    def __repr__(self) -> str:
        return f"StopStringMatcher({self.stops!r}, include_in_output={self.include_in_output})"


def token_stop(rules: StopRules, token: int, num_output: int) -> Verdict | None:
    """The token rules after ``token`` became output token number ``num_output``."""
    if num_output >= rules.min_tokens:
        if token in rules.eos_token_ids:
            return "stop", None
        if token in rules.stop_token_ids:
            return "stop", token
    if num_output >= rules.max_tokens:
        return "length", None
    return None


class SampleText:
    """One sample's text: its tokens decoded incrementally, cut at the first stop string.

    ``text`` is the whole text so far (cut once a stop string matched); ``shown`` what may
    be streamed now (a possible stop-string prefix at the end held back until the end).
    """

    __slots__ = ("detok", "include", "matcher", "min_tokens", "num_tokens", "shown", "text")

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_token_ids: list[int],
        rules: StopRules,
        skip_special_tokens: bool,
    ) -> None:
        self.detok = IncrementalDetokenizer(tokenizer, prompt_token_ids, skip_special_tokens)
        self.include = rules.include_stop_str_in_output
        self.matcher = StopStringMatcher(rules.stop, self.include) if rules.stop else None
        self.min_tokens = rules.min_tokens
        self.num_tokens = 0
        self.text = ""
        self.shown = ""

    def add(self, token: int, reason: str | None) -> str | None:
        """Append ``token``, which ended the sample with ``reason`` (None: it goes on).

        Returns the stop string when one ends the sample here (the text is cut at it).
        """
        self.num_tokens += 1
        delta = ""
        if reason != "stop" or self.include:  # a stop token's text is left out
            delta = self.detok.add([token])
        if reason is not None:
            delta += self.detok.flush()
        full = self.detok.text
        if (
            self.matcher is not None
            and self.num_tokens >= self.min_tokens
            and reason in (None, "length")
        ):
            check = self.matcher.check(full, len(delta))
            if check.matched:
                self.text = self.shown = check.text
                return check.stop
        self.text = full
        if reason is not None or self.matcher is None:
            self.shown = full
        else:
            self.shown = self.matcher.releasable_text(full)
        return None
