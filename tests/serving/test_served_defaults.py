"""``AsyncLLM`` and the server give a request the model's own sampling defaults for every
field it leaves out (its generation_config.json), as ``LLM`` does."""

from __future__ import annotations

import asyncio
import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tandem.core.entrypoints.async_llm import AsyncLLM
from tandem.core.inputs.sampling_params import SamplingParams

NAME = "sampler"
MODEL = {"temperature": 0.5, "top_k": 3, "repetition_penalty": 1.3}
CLASS_VALUES = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0}
ASK = {"max_tokens": 8, "seed": 11, "ignore_eos": True}


@pytest.fixture(scope="module")
def sampling_llm(tiny_model: Path, tmp_path_factory, engine: str) -> Iterator[AsyncLLM]:
    target = tmp_path_factory.mktemp("sampling") / "model"
    shutil.copytree(tiny_model, target)
    gen = json.loads((target / "generation_config.json").read_text())
    gen.update(do_sample=True, **MODEL)
    (target / "generation_config.json").write_text(json.dumps(gen))
    with AsyncLLM(target, engine=engine, max_model_len=64) as llm:
        yield llm


@pytest.fixture(scope="module")
def url(sampling_llm: AsyncLLM) -> Iterator[str]:
    pytest.importorskip("fastapi")
    from tandem.core.server import running_server

    with running_server(sampling_llm, NAME) as served:
        yield served


async def _last(llm: AsyncLLM, prompt: str, params: SamplingParams) -> list[int]:
    outs = [out async for out in llm.generate(prompt, params)]
    return list(outs[-1].outputs[0].token_ids)


def test_async_llm_fills_what_is_left_out(sampling_llm: AsyncLLM) -> None:
    given = asyncio.run(_last(sampling_llm, "a b", SamplingParams(**ASK)))
    want = asyncio.run(
        _last(sampling_llm, "a b", sampling_llm.default_sampling_params().replace(**ASK))
    )
    plain = SamplingParams(**ASK, **{**CLASS_VALUES, "top_k": 0})
    assert asyncio.run(_last(sampling_llm, "a b", plain)) != want  # the defaults show
    assert given == want


def _post(url: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(
        f"{url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


@pytest.mark.parametrize(
    ("path", "body", "text"),
    [
        ("/v1/completions", {"prompt": "a b"}, lambda r: r["choices"][0]["text"]),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "a b"}]},
            lambda r: r["choices"][0]["message"]["content"],
        ),
    ],
)
def test_a_request_without_sampling_fields_gets_the_model_defaults(url, path, body, text):
    base = {"model": NAME, **body, **ASK}
    left_out = text(_post(url, path, base))
    assert left_out == text(_post(url, path, {**base, **MODEL}))
    assert left_out != text(_post(url, path, {**base, **CLASS_VALUES}))
    # an explicit temperature 0 wins over the model's sampling
    greedy = text(_post(url, path, {**base, "temperature": 0}))
    assert greedy != left_out
    assert greedy == text(_post(url, path, {**base, **MODEL, "temperature": 0}))
