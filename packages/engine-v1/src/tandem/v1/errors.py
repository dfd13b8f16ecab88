"""Errors raised by engine v1's client."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tandem.core.child_failure import ChildError


class EngineDeadError(RuntimeError):
    """A child process of the engine died or failed; the engine cannot serve any more.

    The message carries the exception the child raised (its type, message and the last
    lines of its traceback), or, when it raised none, its exit code or signal; ``error``
    holds that exception as a :class:`~tandem.core.child_failure.ChildError` (None when
    the child raised none). Build a new engine to go on.
    """

    def __init__(self, text: str, error: ChildError | None = None) -> None:
        super().__init__(text)
        self.error = error


class EngineStartupError(EngineDeadError):
    """A child process failed before it became ready (why is in the message)."""
