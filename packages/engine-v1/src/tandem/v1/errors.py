"""Errors raised by engine v1's client."""

from __future__ import annotations


class EngineDeadError(RuntimeError):
    """A child process of the engine died or failed; the engine cannot serve any more.

    The message carries the child's exit reason (exit code or signal) and, when the
    child could report it, its traceback. Build a new engine to go on.
    """


class EngineStartupError(EngineDeadError):
    """A child process failed before it became ready (its traceback is in the message)."""
