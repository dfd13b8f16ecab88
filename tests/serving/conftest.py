"""Serving on both engines: ``AsyncLLM`` and the OpenAI-compatible server over it.

One server per module and engine (``engine`` is a session-scoped parameter, so the
module-scoped fixtures below are built once per engine and own their processes).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from servhelpers import MAX_MODEL_LEN, MODEL_NAME

pytestmark = pytest.mark.engines("v0", "v1")


@pytest.fixture(scope="module")
def async_llm(tiny_model: Path, engine: str) -> Iterator[object]:
    from tandem.core.entrypoints.async_llm import AsyncLLM

    with AsyncLLM(tiny_model, engine=engine, max_model_len=MAX_MODEL_LEN) as llm:
        yield llm


@pytest.fixture(scope="module")
def server_url(async_llm: object) -> Iterator[str]:
    pytest.importorskip("fastapi")
    from tandem.core.server import running_server

    with running_server(async_llm, MODEL_NAME) as url:  # type: ignore[arg-type]
        yield url


@pytest.fixture(scope="module")
def client(server_url: str) -> Iterator[object]:
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=f"{server_url}/v1", api_key="none", max_retries=0) as c:
        yield c
