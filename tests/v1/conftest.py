"""Engine v1's own tests: they run under engine v1 only (``--engines v0`` drops them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tandem.core.config.engine_args import EngineArgs

pytestmark = pytest.mark.engines("v1")


@pytest.fixture(scope="session")
def tiny_dir(tiny_model: Path) -> Path:
    """The tiny llama checkpoint (the project-wide ``tiny_model``)."""
    return tiny_model


@pytest.fixture
def make_args(tiny_dir: Path) -> Callable[..., EngineArgs]:
    """``EngineArgs`` on the tiny llama (or ``model``) for the CPU, with overrides."""

    def make(model: Path | None = None, **kw: Any) -> EngineArgs:
        return EngineArgs(model=str(model or tiny_dir), device="cpu", **kw)

    return make
