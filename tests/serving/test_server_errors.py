"""Error hygiene: every error in the OpenAI shape, no traceback or path in a body, and an
OpenAPI description of what is actually sent."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest


def send(url: str, method: str = "GET", data: bytes | None = None) -> tuple[int, dict, str]:
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read().decode()


def openai_error(text: str) -> dict:
    err = json.loads(text)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert "Traceback" not in text and "/work/" not in text and ".py" not in text
    return err


@pytest.mark.parametrize(
    ("method", "path", "data", "status"),
    [
        ("POST", "/v1/completions", b"{not json", 400),
        ("POST", "/v1/completions", b"", 400),
        ("POST", "/v1/completions", b"[1, 2]", 400),
        ("POST", "/v1/chat/completions", b'{"messages": "hi"}', 400),
        ("POST", "/tokenize", b'"text"', 400),
        ("GET", "/v1/nothing-here", None, 404),
        ("GET", "/", None, 404),
        ("GET", "/v1/completions", None, 405),
        ("DELETE", "/health", None, 405),
    ],
)
def test_every_error_is_openai_shaped(server_url, method, path, data, status) -> None:
    got, headers, text = send(f"{server_url}{path}", method, data)
    assert got == status, text
    assert headers["content-type"] == "application/json"
    openai_error(text)
    if status == 405:
        assert headers["allow"]


def test_a_server_fault_is_a_500_without_its_story(server_url, monkeypatch) -> None:
    svc = server_url.app.state.service

    def broken(name):
        raise RuntimeError("cannot open /work/secret/model/weights.py: Traceback (most recent")

    monkeypatch.setattr(svc, "check_model", broken)
    status, _, text = send(
        f"{server_url}/v1/completions", "POST", b'{"prompt": "a", "max_tokens": 1}'
    )
    assert status == 500, text
    err = openai_error(text)
    assert err["type"] == "server_error" and "RuntimeError" in err["message"]


def test_openapi_documents_what_is_sent(server_url) -> None:
    status, _, text = send(f"{server_url}/openapi.json")
    assert status == 200
    doc = json.loads(text)
    schemas = doc["components"]["schemas"]
    for name in ("CompletionRequest", "CompletionResponse", "ErrorResponse", "TokenizeResponse"):
        assert name in schemas
    completions = doc["paths"]["/v1/completions"]["post"]
    codes = set(completions["responses"])
    assert {"200", "400", "401", "404", "413", "415", "429", "503"} <= codes
    ok = completions["responses"]["200"]["content"]
    assert {"application/json", "text/event-stream"} <= set(ok)
    assert ok["application/json"]["schema"]["$ref"].endswith("/CompletionResponse")
    body = completions["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"].endswith("/CompletionRequest")
    assert "Retry-After" in completions["responses"]["429"]["headers"]
    metrics = doc["paths"]["/metrics"]["get"]["responses"]
    assert "text/plain" in metrics["200"]["content"] and "401" in metrics
    tokenize = doc["paths"]["/tokenize"]["post"]["requestBody"]["content"]["application/json"]
    assert len(tokenize["schema"]["anyOf"]) == 2
    model = schemas["CompletionRequest"]["properties"]["model"]
    assert {"type": "string", "enum": ["tiny"]} in model["anyOf"]
    # bounds of the served model: token ids in its vocabulary, integers in int64
    vocab = len(server_url.app.state.service.llm.get_tokenizer())
    ids = schemas["DetokenizeRequest"]["properties"]["tokens"]["items"]
    assert (ids["minimum"], ids["maximum"]) == (0, vocab - 1)
    top_k = schemas["CompletionRequest"]["properties"]["top_k"]["anyOf"][0]
    assert (top_k["minimum"], top_k["maximum"]) == (-1, 2**63 - 1)
    assert "x-tandem-bound" not in text
    for path, item in doc["paths"].items():
        for op in item.values():
            assert "422" not in op["responses"], path  # refused bodies are 400s here
