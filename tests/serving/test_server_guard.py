"""A server that guards itself: API keys, body size, per-request limits, the waiting
queue (429, 503 while draining), fair admission between clients, the access log."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from servhelpers import MODEL_NAME

openai = pytest.importorskip("openai")

KEYS = ("key-one", "key-two")


def call(
    url: str, body: dict | None = None, key: str | None = None, timeout: float = 60
) -> tuple[int, dict[str, str], str]:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data, headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read().decode()


def error_of(text: str) -> dict:
    err = json.loads(text)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


@pytest.fixture(scope="module")
def guarded(async_llm):
    from tandem.core.server import running_server

    with running_server(
        async_llm, MODEL_NAME, api_keys=KEYS, max_body_bytes=4096, max_prompts=4, max_sequences=8
    ) as url:
        yield url


def test_api_key_is_asked_on_the_api_but_not_on_health(guarded) -> None:
    assert call(f"{guarded}/health")[0] == 200
    for path, body in [
        ("/v1/models", None),
        ("/v1/completions", {"prompt": "a", "max_tokens": 1}),
        ("/tokenize", {"prompt": "a"}),
        ("/metrics", None),
    ]:
        for key in (None, "wrong", KEYS[0][:-1]):
            status, headers, text = call(f"{guarded}{path}", body, key)
            assert status == 401, (path, key, text)
            assert error_of(text)["type"] == "authentication_error"
            assert headers["www-authenticate"] == "Bearer"
        assert call(f"{guarded}{path}", body, KEYS[1])[0] == 200
    with (
        openai.OpenAI(base_url=f"{guarded}/v1", api_key="nope", max_retries=0) as bad,
        pytest.raises(openai.AuthenticationError),
    ):
        bad.models.list()
    with openai.OpenAI(base_url=f"{guarded}/v1", api_key=KEYS[0], max_retries=0) as good:
        assert [m.id for m in good.models.list().data] == [MODEL_NAME]


def _raw(url: str, head: list[str], chunks: list[bytes]) -> tuple[int, str]:
    """A request written by hand (a huge Content-Length, or chunked); the answer."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    conn.putrequest("POST", "/v1/completions")
    for line in [*head, f"Authorization: Bearer {KEYS[0]}", "Content-Type: application/json"]:
        name, value = line.split(": ", 1)
        conn.putheader(name, value)
    conn.endheaders()
    try:
        for chunk in chunks:
            conn.send(chunk)
    except OSError:  # the server answered and closed before the body was all sent
        pass
    resp = conn.getresponse()
    text = resp.read().decode()
    conn.close()
    return resp.status, text


def test_a_body_over_the_limit_is_refused_before_it_is_read(guarded) -> None:
    # told by Content-Length: refused with none of the body sent
    status, text = _raw(guarded, ["Content-Length: 1000000000"], [])
    assert status == 413 and "too large" in error_of(text)["message"]
    # chunked, no length told: counted as it comes, refused once past the limit
    body = json.dumps({"prompt": "a " * 4000, "max_tokens": 1}).encode()
    chunks = [
        b"%x\r\n%s\r\n" % (len(body[i : i + 1000]), body[i : i + 1000])
        for i in range(0, len(body), 1000)
    ]
    status, text = _raw(guarded, ["Transfer-Encoding: chunked"], [*chunks, b"0\r\n\r\n"])
    assert status == 413, text
    small = {"prompt": "a b", "max_tokens": 1}
    assert call(f"{guarded}/v1/completions", small, KEYS[0])[0] == 200


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"prompt": ["a"] * 5}, "prompt"),
        ({"prompt": ["a", "b", "c"], "n": 3}, "n"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 9}, "n"),
    ],
)
def test_per_request_limits_name_the_field(guarded, body, param) -> None:
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    status, _, text = call(f"{guarded}{path}", {**body, "max_tokens": 1}, KEYS[0])
    assert status == 400 and error_of(text)["param"] == param, text


@pytest.fixture(scope="module")
def narrow(async_llm):
    """One sequence in the engine at a time, four waiting at most."""
    from tandem.core.server import running_server

    with running_server(
        async_llm, MODEL_NAME, engine_window=1, max_waiting=4, max_sequences=4
    ) as url:
        yield url


def _gauge(url: str, name: str, key: str | None = None) -> float:
    _, _, text = call(f"{url}/metrics", key=key)
    return next(float(x.split()[1]) for x in text.splitlines() if x.startswith(name + " "))


def _wait_for(check, limit: float = 30) -> None:
    end = time.monotonic() + limit
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def test_a_full_queue_is_a_429_with_retry_after_and_draining_a_503(narrow) -> None:
    long = {"prompt": ["a", "b", "c", "d"], "max_tokens": 100, "ignore_eos": True}
    results: list = []
    worker = threading.Thread(target=lambda: results.append(call(f"{narrow}/v1/completions", long)))
    worker.start()
    try:
        _wait_for(lambda: _gauge(narrow, "tandem_admission_waiting_sequences") == 3)
        # four more sequences than the one or more still waiting: past the four allowed
        status, headers, text = call(f"{narrow}/v1/completions", {"prompt": ["x"] * 4})
        assert status == 429 and headers["retry-after"] == "1", text
        assert error_of(text)["type"] == "rate_limit_error"
        narrow.app.state.service.drain()
        status, _, text = call(f"{narrow}/v1/completions", {"prompt": "x", "max_tokens": 1})
        assert status == 503 and "stopping" in error_of(text)["message"]
    finally:
        narrow.app.state.service.admission.draining = False
        worker.join(120)
    assert results[0][0] == 200  # what was admitted before the drain ran to its end
    assert _gauge(narrow, "tandem_admission_waiting_sequences") == 0


@pytest.fixture(scope="module")
def shared(async_llm):
    """Four sequences in the engine at a time, two clients."""
    from tandem.core.server import running_server

    with running_server(
        async_llm, MODEL_NAME, engine_window=4, api_keys=KEYS, max_prompts=64, max_sequences=64
    ) as url:
        yield url


def test_a_flood_does_not_hold_back_another_client(shared) -> None:
    flood = {"prompt": [f"p {i}" for i in range(48)], "max_tokens": 24, "ignore_eos": True}
    small = {"prompt": "hello", "max_tokens": 4, "ignore_eos": True}
    call(f"{shared}/v1/completions", small, KEYS[1])
    done: dict[str, float] = {}

    def flooding() -> None:
        call(f"{shared}/v1/completions", flood, KEYS[0], timeout=300)
        done["flood"] = time.monotonic()

    worker = threading.Thread(target=flooding)
    worker.start()
    _wait_for(lambda: _gauge(shared, "tandem_admission_waiting_sequences", KEYS[1]) > 0)
    status, _, _ = call(f"{shared}/v1/completions", small, KEYS[1])
    done["small"] = time.monotonic()
    worker.join(300)
    assert status == 200
    # the small request went in at the next turn, not after the 48 prompts (how long that
    # takes is benchmarks/serve_fairness.py's to measure, not a test's)
    assert done["small"] < done["flood"]


def test_one_access_log_line_per_request(server_url, async_llm, caplog) -> None:
    from tandem.core.server import running_server

    with caplog.at_level("INFO", logger="tandem"):
        status, headers, _ = call(
            f"{server_url}/v1/completions", {"prompt": "a b", "max_tokens": 3}
        )
        assert status == 200
        rid = headers["x-request-id"]
        _wait_for(lambda: any(rid in r.getMessage() for r in caplog.records))
    lines = [r.getMessage() for r in caplog.records if rid in r.getMessage()]
    assert len(lines) == 1
    line = lines[0]
    assert "POST /v1/completions 200" in line and "output_tokens=3" in line
    assert "prompt_tokens=" in line and "ttft=0." in line and "total=" in line
    caplog.clear()
    with (
        running_server(async_llm, MODEL_NAME, quiet=True) as quiet,
        caplog.at_level("INFO", logger="tandem"),
    ):
        _, headers, _ = call(f"{quiet}/v1/completions", {"prompt": "a b", "max_tokens": 1})
        time.sleep(0.2)
    assert not any(headers["x-request-id"] in r.getMessage() for r in caplog.records)


def test_a_stream_left_early_gives_its_place_back(narrow) -> None:
    body = {"prompt": ["a", "b", "c", "d"], "max_tokens": 100, "ignore_eos": True, "stream": True}
    req = urllib.request.Request(
        f"{narrow}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.readline().startswith(b"data: ")  # generating, three prompts waiting
    for gauge in ("tandem_admission_waiting_sequences", "tandem_admission_engine_sequences"):
        _wait_for(lambda g=gauge: _gauge(narrow, g) == 0)
