"""Hostile input: every request the server must refuse is a 4xx in the OpenAI error
shape, never a 5xx: nesting, numbers at any range, content types a browser may send
cross-origin without asking, CORS, and the OpenAI API's own limits (``tools: []``).

These are refused before any engine work, so one engine answers for both.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse

import pytest
from servhelpers import MODEL_NAME

pytestmark = pytest.mark.engines("v0")

JSON_ROUTES = ("/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize")
BODIES = {
    "/v1/completions": {"prompt": "a b", "max_tokens": 1},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
    "/tokenize": {"prompt": "a b"},
    "/detokenize": {"tokens": [1, 2]},
}
EVIL = "http://evil.example"


def send(
    url: str,
    data: bytes | None,
    content_type: str | None = "application/json",
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], str]:
    """One request as given (no Content-Type at all when ``content_type`` is None)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    sent = dict(headers or {})
    if content_type is not None:
        sent["Content-Type"] = content_type
    try:
        conn.request(method, parts.path, body=data, headers=sent)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode()
    finally:
        conn.close()


def refusal(status: int, text: str, expected: int) -> dict:
    """The OpenAI error of a refusal with status ``expected``."""
    assert status == expected, text[:300]
    err = json.loads(text)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error"
    return err


def deep(levels: int, leaf: str = "1") -> bytes:
    return ("[" * levels + leaf + "]" * levels).encode()


@pytest.mark.parametrize(
    "body",
    [
        b'{"prompt": ' + deep(100_000) + b', "max_tokens": 1}',
        deep(100_000),
        b'{"a": ' * 100_000 + b"1" + b"}" * 100_000,
        b'{"prompt": "a", "note": ' + deep(65) + b"}",  # just past the depth allowed
    ],
    ids=["prompt", "body", "objects", "65-levels"],
)
def test_deeply_nested_json_is_a_400(server_url, body) -> None:
    for path in ("/v1/completions", "/tokenize"):
        err = refusal(*send(f"{server_url}{path}", body)[::2], 400)
        assert "nests" in err["message"] and "64" in err["message"], err


def test_nesting_within_the_limit_is_read(server_url) -> None:
    body = b'{"prompt": "a", "note": ' + deep(63) + b"}"  # 64 levels with the body
    status, _, text = send(f"{server_url}/tokenize", body)
    assert status == 200, text


@pytest.mark.parametrize(
    ("number", "why"),
    [
        (b"NaN", "not a JSON number"),
        (b"Infinity", "not a JSON number"),
        (b"-Infinity", "not a JSON number"),
        (b"1e400", "out of range"),
        (b"-1e400", "out of range"),
        (b"9" * 5000, "digits"),
    ],
)
def test_numbers_beyond_json_or_a_double_are_400s(server_url, number, why) -> None:
    body = b'{"prompt": "a", "max_tokens": 1, "temperature": ' + number + b"}"
    err = refusal(*send(f"{server_url}/v1/completions", body)[::2], 400)
    assert why in err["message"], err


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("top_k", 2**63),
        ("seed", 2**64),
        ("seed", -(2**63) - 1),
        ("n", 2**63),
        ("max_tokens", 2**63),
        ("min_tokens", 10**30),
        ("stop_token_ids", [2**63]),
        ("prompt", [2**63]),
        ("top_k", 1e19),
        ("n", 2.5),
        ("n", "2"),
        ("echo", 1),
    ],
)
def test_integers_are_checked_in_int64_and_by_type(server_url, field, value) -> None:
    body = {"prompt": "a", "max_tokens": 1, field: value}
    status, _, text = send(f"{server_url}/v1/completions", json.dumps(body).encode())
    err = refusal(status, text, 400)
    assert err["param"] == field, err


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"prompt": "\xff\xfe bad bytes", "max_tokens": 1}', None),
        (b'{"prompt": "\\ud800 alone", "max_tokens": 1}', "prompt"),  # escaped, lone
        ('{"prompt": "a", "temperature": 1}'.encode("utf-16"), None),  # not UTF-8
        (b'{"prompt": "a", "max_tokens": 2e0}', None),  # 2.0: an integer, any notation
    ],
    ids=["invalid-utf8", "lone-surrogate", "utf16", "exponent-integer"],
)
def test_text_and_number_encodings_are_refused_or_read(server_url, body, param) -> None:
    status, _, text = send(f"{server_url}/v1/completions", body)
    if body.endswith(b"2e0}"):
        assert status == 200 and json.loads(text)["usage"]["completion_tokens"] == 2, text
        return
    err = refusal(status, text, 400)
    assert err["param"] == param, err


def test_integers_in_range_are_taken_as_json_schema_reads_them(server_url) -> None:
    body = {"prompt": "a", "max_tokens": 1.0, "top_k": 2**63 - 1, "seed": -(2**63), "n": 2.0}
    status, _, text = send(f"{server_url}/v1/completions", json.dumps(body).encode())
    assert status == 200, text
    assert len(json.loads(text)["choices"]) == 2


def test_tools_must_not_be_an_empty_list(server_url) -> None:
    body = {**BODIES["/v1/chat/completions"], "tools": []}
    status, _, text = send(f"{server_url}/v1/chat/completions", json.dumps(body).encode())
    err = refusal(status, text, 400)
    assert err["param"] == "tools" and "at least 1 item" in err["message"], err


@pytest.mark.parametrize("path", JSON_ROUTES)
@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonx",
        None,
    ],
)
def test_a_body_not_sent_as_json_is_a_415(server_url, path, content_type) -> None:
    data = json.dumps(BODIES[path]).encode()
    err = refusal(*send(f"{server_url}{path}", data, content_type)[::2], 415)
    assert "application/json" in err["message"], err


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "Application/JSON"])
def test_json_with_parameters_or_any_case_is_json(server_url, content_type) -> None:
    data = json.dumps(BODIES["/tokenize"]).encode()
    status, _, text = send(f"{server_url}/tokenize", data, content_type)
    assert status == 200, text


def _generated(url: str) -> float:
    _, _, text = send(f"{url}/metrics", None, None, "GET")
    lines = [x for x in text.splitlines() if x.startswith("tandem_") and "generation_tokens" in x]
    return sum(float(x.split()[-1]) for x in lines)


def test_a_cross_origin_simple_request_cannot_run_a_completion(server_url) -> None:
    """What any web page can make a browser send, no preflight asked: refused, unread."""
    before = _generated(server_url)
    data = json.dumps({"prompt": "a b", "max_tokens": 4}).encode()
    status, headers, text = send(
        f"{server_url}/v1/completions", data, "text/plain", headers={"Origin": EVIL}
    )
    refusal(status, text, 415)
    assert "access-control-allow-origin" not in headers
    assert _generated(server_url) == before


def _preflight(url: str, origin: str, method: str = "POST") -> tuple[int, dict[str, str], str]:
    asked = {
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "content-type, authorization",
    }
    return send(f"{url}/v1/completions", None, None, "OPTIONS", asked)


def test_without_allowed_origins_a_preflight_gets_no_allow_header(server_url) -> None:
    status, headers, text = _preflight(server_url, EVIL)
    assert status == 405 and json.loads(text)["error"]
    assert not any(h.startswith("access-control-") for h in headers), headers
    _, headers, _ = send(f"{server_url}/health", None, None, "GET", {"Origin": EVIL})
    assert "access-control-allow-origin" not in headers


@pytest.fixture(scope="module")
def cors_url(async_llm):
    from tandem.core.server import running_server

    with running_server(
        async_llm, MODEL_NAME, allowed_origins=("http://good.example",), api_keys=("k",)
    ) as url:
        yield url


def test_allowed_origins_let_in_the_origins_named_and_no_other(cors_url) -> None:
    status, headers, _ = _preflight(cors_url, "http://good.example")
    assert status == 200  # no API key asked of a preflight: a browser sends none
    assert headers["access-control-allow-origin"] == "http://good.example"
    assert "access-control-allow-credentials" not in headers
    status, headers, text = _preflight(cors_url, EVIL)
    err = refusal(status, text, 400)
    assert "origin" in err["message"] and "access-control-allow-origin" not in headers
    data = json.dumps({"prompt": "a", "max_tokens": 1}).encode()
    auth = {"Origin": "http://good.example", "Authorization": "Bearer k"}
    status, headers, _ = send(f"{cors_url}/v1/completions", data, headers=auth)
    assert status == 200 and headers["access-control-allow-origin"] == "http://good.example"
    # a refusal carries the header too, so the page can read why
    status, headers, _ = send(f"{cors_url}/v1/completions", data, "text/plain", headers=auth)
    assert status == 415 and headers["access-control-allow-origin"] == "http://good.example"
    status, headers, _ = send(f"{cors_url}/v1/completions", data, headers={"Origin": EVIL})
    assert status == 401 and "access-control-allow-origin" not in headers


def test_credentials_with_any_origin_are_refused_at_start() -> None:
    from tandem.core.server.config import ServerConfig
    from tandem.core.validate import RequestError

    with pytest.raises(RequestError, match="allow_credentials"):
        ServerConfig(model_names=("m",), allowed_origins=("*",), allow_credentials=True)
    ServerConfig(model_names=("m",), allowed_origins=("https://a.example",), allow_credentials=True)
