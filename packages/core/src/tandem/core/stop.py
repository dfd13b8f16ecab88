"""Stop strings, shared by both engines.

After each step the engine hands the whole output text and how many characters are new.
A stop string can only end inside the new characters, so only the tail is searched.
While the end of the text could still grow into a stop string, that end is held back
from streaming (unless the stop string is kept in the output anyway); on a match the
output is cut at the stop string, or just after it with ``include_in_output``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


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
