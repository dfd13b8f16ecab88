"""``tandem serve`` answered by the official ``openai`` client, on both engines."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request

import pytest
from servhelpers import MAX_MODEL_LEN, MODEL_NAME

openai = pytest.importorskip("openai")

CHAT = [{"role": "user", "content": "hello there"}]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _idle(server_url: str) -> dict[str, float]:
    for _ in range(300):
        _, text = _get(f"{server_url}/metrics")
        values = {
            line.split()[0]: float(line.split()[1])
            for line in text.splitlines()
            if line and not line.startswith("#")
        }
        running = values["tandem_requests_running"] + values["tandem_requests_waiting"]
        if running == 0 and values["tandem_kv_cache_usage"] == 0:
            return values
        time.sleep(0.02)
    raise AssertionError(f"the engine never went idle: {values}")


def test_health_models_and_metrics(server_url, client) -> None:
    assert _get(f"{server_url}/health") == (200, '{"status":"ok"}')
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL_NAME]
    status, text = _get(f"{server_url}/metrics")
    assert status == 200
    names = ("tandem_requests_total", "tandem_kv_cache_usage", "tandem_requests_waiting")
    spec = (
        "tandem:spec_decode_num_draft_tokens_total",
        "tandem:spec_decode_num_accepted_tokens_total",
    )
    for name in (*names, *spec):
        assert f"# TYPE {name} " in text
    assert f"\n{spec[0]} 0\n" in text  # no speculative decoding: no drafts


def test_completion_streamed_or_not_gives_the_same_text(client) -> None:
    kw = dict(model=MODEL_NAME, prompt="a b c", max_tokens=9, temperature=0)
    whole = client.completions.create(**kw)
    assert whole.object == "text_completion" and whole.choices[0].finish_reason in (
        "stop",
        "length",
    )
    assert whole.usage.completion_tokens <= 9 and whole.usage.prompt_tokens > 0
    chunks = list(client.completions.create(**kw, stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_completion_matches_the_engine_offline(client, tiny_model, engine) -> None:
    from tandem.core import LLM, SamplingParams

    with LLM(model=tiny_model, engine=engine, max_model_len=MAX_MODEL_LEN) as llm:
        want = llm.generate("one two", SamplingParams(temperature=0, max_tokens=7), use_tqdm=False)
    got = client.completions.create(model=MODEL_NAME, prompt="one two", max_tokens=7, temperature=0)
    assert got.choices[0].text == want[0].outputs[0].text


def test_batch_of_prompts_and_n_are_indexed(client) -> None:
    got = client.completions.create(
        model=MODEL_NAME, prompt=["a", "b"], n=2, max_tokens=3, temperature=0.9, seed=3
    )
    assert sorted(c.index for c in got.choices) == [0, 1, 2, 3]
    assert all(c.finish_reason in ("stop", "length") for c in got.choices)
    assert 4 <= got.usage.completion_tokens <= 12


def test_logprobs(client) -> None:
    got = client.completions.create(
        model=MODEL_NAME, prompt="a", max_tokens=3, temperature=0, logprobs=2
    )
    lp = got.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 3
    assert all(v <= 0 for v in lp.token_logprobs)
    chat = client.chat.completions.create(
        model=MODEL_NAME, messages=CHAT, max_tokens=3, temperature=0, logprobs=True, top_logprobs=2
    )
    content = chat.choices[0].logprobs.content
    assert len(content) == 3 and all(len(t.top_logprobs) == 2 for t in content)


def test_chat_streamed_or_not(client, tiny_model) -> None:
    kw = dict(model=MODEL_NAME, messages=CHAT, max_tokens=8, temperature=0)
    whole = client.chat.completions.create(**kw)
    assert whole.object == "chat.completion"
    assert whole.choices[0].message.role == "assistant"
    chunks = list(
        client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True})
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    # the prompt is the tokenizer's own chat template
    from tandem.core.text.tokenizer import load_tokenizer

    ids = load_tokenizer(tiny_model).apply_chat_template(CHAT)
    assert whole.usage.prompt_tokens == len(ids)


@pytest.mark.parametrize(
    ("path", "body", "status", "param"),
    [
        ("completions", {"prompt": "a", "temperature": 5}, 400, "temperature"),
        ("completions", {"prompt": "a", "max_tokens": -1}, 400, "max_tokens"),
        ("completions", {"prompt": "a", "max_tokens": 10_000}, 400, "max_tokens"),
        ("completions", {"prompt": "", "max_tokens": 2}, 400, "prompt"),
        ("completions", {"prompt": "a", "best_of": 2}, 400, "best_of"),
        ("completions", {"max_tokens": 2}, 400, "prompt"),
        ("completions", {"prompt": "a", "model": "gpt-9"}, 404, "model"),
        ("chat/completions", {"messages": []}, 400, "messages"),
        ("chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 400, None),
    ],
)
def test_bad_requests_are_openai_style_errors(server_url, path, body, status, param) -> None:
    code, err = _post(f"{server_url}/v1/{path}", {"model": MODEL_NAME, **body})
    assert code == status, err
    assert set(err["error"]) == {"message", "type", "param", "code"}
    if param is not None:
        assert (err["error"]["param"] == param and param in err["error"]["message"]) or (
            err["error"]["param"] == param
        )
    assert _post(f"{server_url}/v1/completions", {"prompt": "ok", "max_tokens": 2})[0] == 200


def test_fields_left_out_take_the_model_defaults(client) -> None:
    # the tiny model's generation_config does not sample: greedy, as LLM and the CLI
    plain = client.completions.create(model=MODEL_NAME, prompt="a b", max_tokens=6)
    greedy = client.completions.create(model=MODEL_NAME, prompt="a b", max_tokens=6, temperature=0)
    assert plain.choices[0].text == greedy.choices[0].text


def test_openai_client_sees_a_bad_request_error(client) -> None:
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.completions.create(model=MODEL_NAME, prompt="a", temperature=9)


def test_a_client_that_disconnects_aborts_its_request(server_url) -> None:
    body = json.dumps(
        {"prompt": "a", "max_tokens": 120, "temperature": 0, "ignore_eos": True, "stream": True}
    ).encode()
    req = urllib.request.Request(
        f"{server_url}/v1/completions", body, {"Content-Type": "application/json"}
    )
    before = _idle(server_url)
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.readline().startswith(b"data: ")  # generating; then hang up
    values = _idle(server_url)
    assert (
        values['tandem_requests_total{outcome="aborted"}']
        > before.get('tandem_requests_total{outcome="aborted"}', 0)
        or values["tandem_generation_tokens_total"] < before["tandem_generation_tokens_total"] + 120
    )


def test_concurrent_streams_lose_nothing(server_url) -> None:
    streams, tokens = 32, 12

    async def one(client, i: int) -> tuple[int, int, float]:
        start = time.perf_counter()
        got, finish = 0, None
        stream = await client.completions.create(
            model=MODEL_NAME,
            prompt=f"item {i}",
            max_tokens=tokens,
            temperature=0.8,
            seed=i,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        async for chunk in stream:
            if chunk.choices:
                got += 1 if chunk.choices[0].text or chunk.choices[0].finish_reason is None else 0
                finish = chunk.choices[0].finish_reason or finish
        return got, finish, time.perf_counter() - start

    async def main() -> list:
        async with openai.AsyncOpenAI(base_url=f"{server_url}/v1", api_key="x", max_retries=0) as c:
            return await asyncio.gather(*(one(c, i) for i in range(streams)))

    results = asyncio.run(main())
    assert len(results) == streams
    assert all(finish == "length" for _, finish, _ in results)
    _idle(server_url)
