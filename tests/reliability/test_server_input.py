"""Hostile bodies through ``tandem serve``: each one a clear 4xx naming its field (or served),
never a 500 or a dead engine; the server answers a plain request afterwards.

These bodies were found by a schema fuzzer; several of them once killed the engine for
every later request (a 503 forever, a 500 on ``/metrics``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.reliability, pytest.mark.engines("v0", "v1")]


@pytest.fixture(scope="module")
def server(tiny_model: Path, engine: str) -> Iterator[str]:
    pytest.importorskip("fastapi")
    from tandem.core.entrypoints.async_llm import AsyncLLM
    from tandem.core.server import running_server

    with (
        AsyncLLM(tiny_model, engine=engine, max_model_len=128) as llm,
        running_server(llm, "tiny") as url,
    ):
        yield url


def post(url: str, body: Any, raw: bytes | None = None) -> tuple[int, str]:
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def still_serving(url: str) -> None:
    with urllib.request.urlopen(f"{url}/health", timeout=10) as resp:
        assert resp.status == 200
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        assert "tandem_engine_alive 1" in resp.read().decode()
    status, text = post(f"{url}/v1/completions", {"prompt": "a b", "max_tokens": 2})
    assert status == 200, text


BAD = [
    ({"repetition_penalty": 3.5e38}, "repetition_penalty"),
    ({"repetition_penalty": 1e-7}, "repetition_penalty"),
    ({"top_p": 1e-300}, "top_p"),
    ({"stop_token_ids": [2**64]}, "stop_token_ids"),
    ({"stop_token_ids": [2**64 + 5, 1]}, "stop_token_ids"),
    ({"min_tokens": 2**64}, "min_tokens"),  # beyond max_tokens=16
    ({"prompt": []}, "prompt"),
    ({"max_tokens": 2**64}, "max_tokens"),  # beyond int64
    # every integer of a body is an int64, as the published schema says
    ({"top_k": 2**63}, "top_k"),
    ({"top_k": 2**64}, "top_k"),
    ({"seed": 2**64}, "seed"),
    ({"min_tokens": 2**64, "max_tokens": None}, "min_tokens"),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("fields", "param"), BAD)
def test_refused_with_a_4xx_naming_the_field(server: str, fields, param, stream) -> None:
    body = {"prompt": "a b", "stream": stream, **fields}
    status, text = post(f"{server}/v1/completions", body)
    assert status == 400, text
    error = json.loads(text)["error"]
    assert error["param"] == param, error
    still_serving(server)


def test_lone_surrogate_stop_string_is_a_400(server: str) -> None:
    # json.dumps writes the lone surrogate as the escape a client would send
    for stream in (False, True):
        raw = b'{"prompt": "a b", "stop": ["ok", "\\ud800"], "stream": %s}' % (
            b"true" if stream else b"false"
        )
        status, text = post(f"{server}/v1/completions", None, raw)
        assert status == 400, text
        assert json.loads(text)["error"]["param"] == "stop"
    still_serving(server)


@pytest.mark.parametrize(
    "fields",
    [
        {"repetition_penalty": 1e-6},  # float32(1e-6) < 1e-6: once killed the engine
        {"top_k": 2**63 - 1, "seed": 2**63 - 1},  # the largest int64: no overflow further in
        {"min_tokens": 2**63 - 1, "max_tokens": None},  # cut to the room left
        {"temperature": 2.0, "top_p": 1.2e-38, "seed": 1},
    ],
)
def test_served_without_harm(server: str, fields) -> None:
    status, text = post(f"{server}/v1/completions", {"prompt": "a b", "max_tokens": 3, **fields})
    assert status == 200, text
    choice = json.loads(text)["choices"][0]
    assert choice["finish_reason"] in ("length", "stop")
    still_serving(server)
