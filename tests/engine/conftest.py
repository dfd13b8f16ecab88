"""Engine-agnostic behaviour: every test here runs once on each engine (``[v0]``, ``[v1]``).

Engines are built the way the front door builds them: the class registered under the
current engine's name, ``from_engine_args(EngineArgs(...))`` (v1: multi-process).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tandem.core.config.engine_args import EngineArgs
from tandem.core.engine.protocol import load_engine_class
from tandem.core.outputs.request_output import RequestOutput
from tandem.core.testing import run_to_completion

pytestmark = pytest.mark.engines("v0", "v1")


def build(name: str, path: Path, **kwargs: Any) -> Any:
    """An engine ``name`` on the checkpoint at ``path`` (fp32, ``max_model_len`` 128)."""
    kwargs.setdefault("max_model_len", 128)
    args = EngineArgs(model=str(path), dtype="float32", **kwargs)
    return load_engine_class(name).from_engine_args(args)


def run_all(engine: Any, prompts: list[Any], params: Any) -> list[RequestOutput]:
    """Add every prompt (one params for all, or one each), step until done; prompt order."""
    plist = params if isinstance(params, list) else [params] * len(prompts)
    ids = [f"t{i}" for i in range(len(prompts))]
    done = run_to_completion(engine, list(zip(ids, prompts, plist)))
    return [done[rid] for rid in ids]


@pytest.fixture(scope="session")
def run() -> Callable[..., list[RequestOutput]]:
    return run_all


@pytest.fixture(scope="session")
def build_engine() -> Callable[..., Any]:
    """``build(name, path, **engine_args)``: an engine of any kind (the caller shuts it down)."""
    return build


@pytest.fixture
def new_engine(tiny_model: Path, engine: str) -> Iterator[Callable[..., Any]]:
    """A factory of engines of the current kind (tiny llama by default), shut down after."""
    made: list[Any] = []

    def make(path: Path | None = None, **kwargs: Any) -> Any:
        made.append(build(engine, path or tiny_model, **kwargs))
        return made[-1]

    yield make
    for eng in made:
        eng.shutdown()


@pytest.fixture(scope="module")
def _module_engine(tiny_model: Path, engine: str) -> Iterator[Any]:
    """One default engine per module and engine kind (``engine`` is a session-scoped param)."""
    eng = build(engine, tiny_model)
    yield eng
    eng.shutdown()


@pytest.fixture
def shared_engine(_module_engine: Any) -> Iterator[Any]:
    """The module's default engine, for tests that leave it idle.

    It is a module-scoped fixture of its own, so the harness books its child processes to
    the module, not to the first test. A test using it must finish or abort what it adds.
    """
    yield _module_engine
    assert not _module_engine.has_unfinished_requests(), "a test left requests on the shared engine"
