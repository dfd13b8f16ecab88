"""Fixtures for engine v1's own tests: tiny checkpoints and engine builders."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tandem.core.config import EngineArgs
from tandem.core.testing import make_model

ARCHS = ("llama", "mistral", "qwen2")


@pytest.fixture(scope="session")
def model_dirs() -> dict[str, Path]:
    return {arch: make_model(arch=arch) for arch in ARCHS}


@pytest.fixture(scope="session")
def tiny_dir(model_dirs: dict[str, Path]) -> Path:
    return model_dirs["llama"]


def _run_all(engine: Any, requests: list[tuple[str, Any, Any]]) -> dict[str, Any]:
    """Add every request, step until all finish; the final RequestOutput per id."""
    for rid, prompt, params in requests:
        engine.add_request(rid, prompt, params)
    done: dict[str, Any] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
    return done


@pytest.fixture
def run_all() -> Callable[[Any, list[tuple[str, Any, Any]]], dict[str, Any]]:
    return _run_all


@pytest.fixture
def make_args(tiny_dir: Path) -> Callable[..., EngineArgs]:
    def make(model: Path | None = None, **kw: Any) -> EngineArgs:
        return EngineArgs(model=str(model or tiny_dir), device="cpu", **kw)

    return make
