"""A server answers to the names its model was opened by, and a prompt it cannot fit is
refused with the flag that widens the context."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from servhelpers import MAX_MODEL_LEN

pytest.importorskip("fastapi")


def _call(url: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_a_named_model_is_served_under_its_name_and_aliases(
    monkeypatch, tiny_model: Path, engine: str
) -> None:
    from tandem.core.catalog import default_model
    from tandem.core.entrypoints.async_llm import AsyncLLM
    from tandem.core.server import running_server

    # "smollm2" resolves to its file; here the tiny model stands in for it
    monkeypatch.setattr(default_model, "default_model", lambda say: str(tiny_model))
    with AsyncLLM("smollm2", engine=engine, max_model_len=64) as llm:
        assert llm.model_names == ("smollm2", "SmolLM2-135M-Instruct")
        with running_server(llm) as url:  # no names given: the ones it was opened by
            status, models = _call(f"{url}/v1/models")
            assert status == 200 and [m["id"] for m in models["data"]] == ["smollm2"]
            for name in ("smollm2", "SmolLM2-135M-Instruct"):
                body = {"model": name, "prompt": "a b", "max_tokens": 2}
                status, got = _call(f"{url}/v1/completions", body)
                assert status == 200 and got["model"] == "smollm2", got
            body = {"model": "smolm2", "prompt": "a b", "max_tokens": 2}
            status, got = _call(f"{url}/v1/completions", body)
    assert status == 404 and got["error"]["param"] == "model"
    assert "did you mean 'smollm2'?" in got["error"]["message"]


def test_a_prompt_too_long_names_the_flag(server_url: str, tiny_model: Path) -> None:
    from tandem.core.text.tokenizer import load_tokenizer

    prompt = "a b " * MAX_MODEL_LEN
    count = len(load_tokenizer(tiny_model).encode(prompt))
    status, got = _call(f"{server_url}/v1/completions", {"prompt": prompt, "max_tokens": 1})
    message = got["error"]["message"]
    assert status == 400 and got["error"]["param"] == "prompt", got
    assert f"has {count} tokens" in message and f"max_model_len={MAX_MODEL_LEN}" in message
    assert "--max-model-len N" in message and "up to the model's 512" in message


def test_a_prompt_past_the_character_bound_names_the_flag(server_url: str) -> None:
    prompt = "x" * 2_000_000  # refused by its length alone, before it is tokenized
    status, got = _call(f"{server_url}/v1/completions", {"prompt": prompt, "max_tokens": 1})
    assert status == 400 and "characters: more than" in got["error"]["message"], got
    assert "--max-model-len N" in got["error"]["message"]
