"""Project-wide fixtures: the tiny checkpoints, the transformers reference, an `LLM`.

The harness plugin provides ``engine`` (the current engine's name), ``isolated_env`` and
``scoped_ops``; suites that face the engines declare ``pytest.mark.engines`` in their own
``conftest.py``.

The run writes to a cache folder of its own (``$TANDEM_CACHE_DIR``, removed at its end),
never to the user's: see :func:`pytest_configure`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tandem.core.testing import HFReference, make_model

ARCHS = ("llama", "mistral", "qwen2")
CACHE_ENV = "TANDEM_CACHE_DIR"
_made_cache: list[Path] = []  # the folder this process made, removed when the run ends


def pytest_configure(config: pytest.Config) -> None:
    """Point ``$TANDEM_CACHE_DIR`` at a fresh folder for this run, started with the
    default model's file and the compiled kernels (:mod:`tandem.core.testing.session_cache`).

    It is set here, before any test process starts, so every process of the run inherits
    it: the harness's children (forked or spawned), xdist's workers, the interpreters
    tests start. A ``$TANDEM_CACHE_DIR`` already set is kept: the caller chose it (an
    xdist worker sees its controller's this way; a CI job may keep one between runs).
    """
    if os.environ.get(CACHE_ENV):
        return
    from tandem.core.testing.session_cache import session_cache

    root = session_cache()
    _made_cache.append(root)
    os.environ[CACHE_ENV] = str(root)


def pytest_unconfigure(config: pytest.Config) -> None:
    while _made_cache:
        os.environ.pop(CACHE_ENV, None)
        shutil.rmtree(_made_cache.pop(), ignore_errors=True)


@pytest.fixture(scope="session")
def fresh_python() -> Callable[[str], None]:
    """Runs ``code`` in a new interpreter (this one has imported everything already) and
    fails the test with its stderr unless it exits 0."""

    def run(code: str) -> None:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr

    return run


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The tiny Llama checkpoint (GQA, llama3 rope scaling) with its BPE tokenizer."""
    return make_model(size="tiny", arch="llama")


@pytest.fixture(scope="session", params=ARCHS)
def tiny_arch_model(request: pytest.FixtureRequest) -> Path:
    """Each architecture's tiny checkpoint, with the traps that architecture carries."""
    return make_model(size="tiny", arch=request.param)


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The real default model's GGUF file (installed, or linked from the user's cache by
    :func:`pytest_configure`; else fetched once into this run's cache)."""
    from tandem.core.catalog.default_model import gguf_file

    return gguf_file()


@pytest.fixture(scope="session")
def smollm2(smollm2_gguf: Path) -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face directory in float32 (the GGUF file's
    weights dequantized, exported once and cached): the reference the file is held to."""
    from tandem.core.gguf.export import exported

    return exported(smollm2_gguf)


@pytest.fixture(scope="session")
def hf() -> HFReference:
    return HFReference()


@pytest.fixture
def llm(tiny_model: Path, engine: str) -> Iterator[object]:
    """An ``LLM`` on the tiny model for the engine the harness is running."""
    from tandem.core import LLM

    with LLM(model=tiny_model, engine=engine, max_model_len=128) as instance:
        yield instance
