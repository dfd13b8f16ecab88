"""The reliability suite: bad input, faults, aborts and soak (``-m reliability`` runs it alone).

``served`` is one front-door ``LLM`` per engine, shared by the whole suite in that
engine's process, with the probe's greedy tokens recorded while it was fresh: a test
that sends it anything checks afterwards that the probe still answers the same.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from relhelpers import probe


@dataclass(slots=True)
class Served:
    llm: Any
    reference: list[int]  # the probe's tokens from the fresh engine

    def check(self) -> None:
        """The engine is idle, holds no block, and still answers the probe as when fresh."""
        engine = self.llm.engine
        assert not engine.has_unfinished_requests(), "requests were left on the engine"
        stats = self.llm.stats()
        assert stats.num_free_kv_blocks == stats.num_kv_blocks, stats
        assert probe(self.llm) == self.reference


@pytest.fixture(scope="session")
def _served(tiny_model: Path, engine: str) -> Iterator[Served]:
    """One front-door ``LLM`` per engine for the whole suite (``engine`` is session-scoped)."""
    from tandem.core import LLM

    llm = LLM(model=tiny_model, engine=engine, max_model_len=128)
    yield Served(llm, probe(llm))
    llm.shutdown()


@pytest.fixture
def served(_served: Served) -> Iterator[Served]:
    """The shared ``LLM`` of the current engine.

    Requests a failed test left behind are aborted afterwards, so one failure does not
    cascade into the next test.
    """
    yield _served
    eng = _served.llm.engine
    if eng.has_unfinished_requests() and not getattr(eng, "is_dead", False):
        eng.abort_request(list(getattr(eng, "requests", None) or getattr(eng, "_metrics", {})))
