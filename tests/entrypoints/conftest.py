"""Front-door fixtures: one shared ``LLM`` per module and engine kind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tandem.core.entrypoints.llm import LLM

MAX_MODEL_LEN = 64


@pytest.fixture(scope="module")
def _module_llm(tiny_model: Path, engine: str) -> Iterator[LLM]:
    """One ``LLM`` per module and engine kind (``engine`` is a session-scoped param)."""
    llm = LLM(model=tiny_model, engine=engine, max_model_len=MAX_MODEL_LEN)
    yield llm
    llm.shutdown()


@pytest.fixture
def shared_llm(_module_llm: LLM) -> Iterator[Any]:
    """An ``LLM`` on the tiny model for the current engine, shared by a module's tests.

    Its own module-scoped fixture owns it, so the harness books v1's child processes to
    the module. Tests must leave it idle (``generate`` always does, even when it raises).
    """
    yield _module_llm
    assert not _module_llm.engine.has_unfinished_requests(), "a test left requests on the LLM"
