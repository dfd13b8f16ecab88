"""Tandem engine v1: engine core and detokenizer in their own processes."""

from __future__ import annotations

from tandem.v1.errors import EngineDeadError, EngineStartupError
from tandem.v1.frontend.engine import LLMEngine


def __getattr__(name: str) -> object:
    # EngineCore pulls in the model code; load it only when asked for
    if name == "EngineCore":
        from tandem.v1.core.engine_core import EngineCore

        return EngineCore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["EngineCore", "EngineDeadError", "EngineStartupError", "LLMEngine"]
