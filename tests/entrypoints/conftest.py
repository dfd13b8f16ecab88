"""Front-door fixtures: one shared ``LLM`` per module and engine kind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tandem.core.llm import LLM

MAX_MODEL_LEN = 64


@pytest.fixture(scope="module")
def _shared_llms() -> Iterator[dict[str, LLM]]:
    llms: dict[str, LLM] = {}
    yield llms
    for llm in llms.values():
        llm.shutdown()


@pytest.fixture
def shared_llm(tiny_model: Path, engine: str, _shared_llms: dict[str, LLM]) -> Iterator[Any]:
    """An ``LLM`` on the tiny model for the current engine, shared by a module's tests.

    Built in the setup of the module's first test that asks for it, together with the
    module-scoped holder, so the harness books v1's child processes to the module.
    Tests must leave it idle (``generate`` always does, even when it raises).
    """
    if engine not in _shared_llms:
        _shared_llms[engine] = LLM(model=tiny_model, engine=engine, max_model_len=MAX_MODEL_LEN)
    llm = _shared_llms[engine]
    yield llm
    assert not llm.engine.has_unfinished_requests(), "a test left requests on the shared LLM"
