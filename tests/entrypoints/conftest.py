from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tandem.core.llm import LLM
from tandem.core.testing import make_model


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    return make_model(size="tiny", arch="llama")


@pytest.fixture()
def v0_llm(tiny_model_dir: Path) -> Iterator[LLM]:
    with LLM(model=tiny_model_dir, engine="v0", max_model_len=64) as llm:
        yield llm
