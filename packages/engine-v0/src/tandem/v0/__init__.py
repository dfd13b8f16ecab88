"""Tandem engine v0: a synchronous engine that runs in the caller's process."""

from __future__ import annotations

from tandem.v0.engine import LLMEngine

__all__ = ["LLMEngine"]
