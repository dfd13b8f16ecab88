"""Large bodies do not stop the server: ``/health`` answers while one is processed.

A 50 MB prompt (the body limit raised to let it in) is parsed off the event loop and
refused before it is tokenized (it cannot fit); a 1 MB text sent to ``/tokenize`` is
tokenized by a worker thread. Meanwhile ``/health`` is asked every 20 ms and each
answer's latency kept.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest
from servhelpers import MODEL_NAME

# seconds: /health's slowest answer while a large body is processed; a loop blocked by
# the body (as before) stalls it for tens of seconds, a busy shared machine for a few
LATENCY_LIMIT = 5.0


def _post(url: str, data: bytes) -> tuple[int, str]:
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _health_while(url: str, work) -> tuple[list[float], object]:
    latencies: list[float] = []
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(work()))
    worker.start()
    while worker.is_alive():
        start = time.perf_counter()
        with urllib.request.urlopen(f"{url}/health", timeout=60) as resp:
            assert resp.status == 200
        latencies.append(time.perf_counter() - start)
        time.sleep(0.02)
    worker.join()
    return latencies, result[0]


@pytest.fixture(scope="module")
def roomy(async_llm):
    from tandem.core.server import running_server

    with running_server(async_llm, MODEL_NAME, max_body_bytes=64 << 20) as url:
        yield url


@pytest.mark.slow
def test_health_answers_while_a_50_mb_prompt_is_refused(roomy) -> None:
    body = json.dumps({"prompt": "tok " * (50_000_000 // 4), "max_tokens": 1}).encode()
    assert len(body) > 50_000_000
    latencies, (status, text) = _health_while(roomy, lambda: _post(f"{roomy}/v1/completions", body))
    assert status == 400 and json.loads(text)["error"]["param"] == "prompt", text[:300]
    assert "max_model_len" in text
    print(f"/health during a 50 MB body: {len(latencies)} answers, max {max(latencies):.3f} s")
    assert max(latencies) < LATENCY_LIMIT, sorted(latencies)[-5:]


@pytest.mark.slow
def test_health_answers_while_a_large_text_is_tokenized(roomy) -> None:
    text = "the quick brown fox jumps over the lazy dog; " * (1_000_000 // 45)
    body = json.dumps({"prompt": text}).encode()
    latencies, (status, answer) = _health_while(roomy, lambda: _post(f"{roomy}/tokenize", body))
    assert status == 200 and json.loads(answer)["count"] > 100_000
    print(f"/health during a 1 MB /tokenize: {len(latencies)} answers, max {max(latencies):.3f} s")
    assert max(latencies) < LATENCY_LIMIT, sorted(latencies)[-5:]
