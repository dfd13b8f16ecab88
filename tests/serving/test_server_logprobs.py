"""Prompt logprobs the way evaluation harnesses ask for them, checked against transformers.

``echo`` with ``logprobs`` (``max_tokens`` 0 or 1) through the official ``openai``
client, vLLM's ``prompt_logprobs``, and streamed echo, on both engines.
"""

from __future__ import annotations

import json
import urllib.request

import pytest
from servhelpers import MODEL_NAME

openai = pytest.importorskip("openai")

PROMPT = "the cat sat on the mat"
TOL = 2e-3  # fp32, two implementations summing in different orders


def _reference(hf, tiny_model, ids: list[int]) -> list[float]:
    rows = hf.logprobs(tiny_model, ids)
    return [float(rows[j - 1][ids[j]]) for j in range(1, len(ids))]


def _ids(tiny_model, text: str) -> list[int]:
    from tandem.core.text.tokenizer import load_tokenizer

    return load_tokenizer(tiny_model).encode(text)


@pytest.mark.parametrize("max_tokens", [0, 1])
def test_echo_gives_the_prompt_logprobs_transformers_computes(
    client, hf, tiny_model, max_tokens
) -> None:
    got = client.completions.create(
        model=MODEL_NAME,
        prompt=PROMPT,
        echo=True,
        logprobs=1,
        max_tokens=max_tokens,
        temperature=0,
    )
    choice = got.choices[0]
    ids = _ids(tiny_model, PROMPT)
    lp = choice.logprobs
    assert choice.text.startswith(PROMPT)
    assert len(lp.tokens) == len(ids) + max_tokens == len(lp.token_logprobs)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    want = _reference(hf, tiny_model, ids)
    assert lp.token_logprobs[1 : len(ids)] == pytest.approx(want, abs=TOL)
    # each top_logprobs entry holds the token itself and the most likely one
    for j in range(1, len(ids)):
        assert lp.tokens[j] in lp.top_logprobs[j] and 1 <= len(lp.top_logprobs[j]) <= 2
    # text_offset: where each token starts in the returned text
    assert len(lp.text_offset) == len(lp.tokens)
    for tok, off in zip(lp.tokens[1:], lp.text_offset[1:]):
        assert choice.text[off : off + len(tok)] == tok
    assert choice.finish_reason == "length"
    assert got.usage.prompt_tokens == len(ids)
    assert got.usage.completion_tokens == max_tokens
    if max_tokens == 1:  # greedy: the token generated is the most likely one
        best = float(hf.logprobs(tiny_model, ids)[-1].max())
        assert lp.token_logprobs[-1] == pytest.approx(best, abs=TOL)
    else:
        assert choice.text == PROMPT


def test_echo_of_token_ids_as_lm_eval_sends_them(client, hf, tiny_model) -> None:
    ids = _ids(tiny_model, "one two three four")
    got = client.completions.create(
        model=MODEL_NAME, prompt=ids, echo=True, logprobs=0, max_tokens=0, temperature=0
    )
    lp = got.choices[0].logprobs
    assert len(lp.token_logprobs) == len(ids) and lp.token_logprobs[0] is None
    assert lp.token_logprobs[1:] == pytest.approx(_reference(hf, tiny_model, ids), abs=TOL)
    # a continuation's loglikelihood: the sum over its tokens, as a harness scores it
    ctx = 3
    assert sum(lp.token_logprobs[ctx:]) == pytest.approx(
        sum(_reference(hf, tiny_model, ids)[ctx - 1 :]), abs=4 * TOL
    )


def test_prompt_logprobs_as_vllm_returns_them(client, hf, tiny_model) -> None:
    ids = _ids(tiny_model, PROMPT)
    rows = hf.logprobs(tiny_model, ids)
    got = client.completions.create(
        model=MODEL_NAME, prompt=PROMPT, max_tokens=2, extra_body={"prompt_logprobs": 2}
    )
    plp = got.model_dump()["choices"][0]["prompt_logprobs"]
    assert len(plp) == len(ids) and plp[0] is None
    for j in range(1, len(ids)):
        entry = plp[j]
        assert str(ids[j]) in entry and 2 <= len(entry) <= 3
        assert entry[str(ids[j])]["logprob"] == pytest.approx(float(rows[j - 1][ids[j]]), abs=TOL)
        best = min(entry.values(), key=lambda e: e["rank"])
        assert best["rank"] == 1
        assert best["logprob"] == pytest.approx(float(rows[j - 1].max()), abs=TOL)
    chat = client.chat.completions.create(
        model=MODEL_NAME,
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=1,
        extra_body={"prompt_logprobs": 0},
    )
    rows = chat.model_dump()["prompt_logprobs"]
    assert rows[0] is None and all(len(r) == 1 for r in rows[1:])
    assert len(rows) == chat.usage.prompt_tokens


def test_streamed_echo_starts_with_the_prompt(client) -> None:
    kw = dict(model=MODEL_NAME, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=1)
    whole = client.completions.create(**kw, echo=True)
    chunks = list(client.completions.create(**kw, echo=True, stream=True))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text and text.startswith(PROMPT)
    tokens = [
        t
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for t in c.choices[0].logprobs.tokens
    ]
    offsets = [
        o
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for o in c.choices[0].logprobs.text_offset
    ]
    assert tokens == whole.choices[0].logprobs.tokens
    assert offsets == whole.choices[0].logprobs.text_offset
    zero = list(client.completions.create(**{**kw, "max_tokens": 0}, echo=True, stream=True))
    assert "".join(c.choices[0].text for c in zero if c.choices) == PROMPT
    assert zero[-1].choices[0].finish_reason == "length"


def _post(url: str, body: dict) -> tuple[int, dict, dict]:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read())


def test_tokenize_and_detokenize(server_url, tiny_model) -> None:
    from tandem.core.text.tokenizer import load_tokenizer

    tok = load_tokenizer(tiny_model)
    status, _, got = _post(f"{server_url}/tokenize", {"prompt": PROMPT, "return_token_strs": True})
    assert status == 200
    assert got["tokens"] == tok.encode(PROMPT) and got["count"] == len(got["tokens"])
    assert got["max_model_len"] == 128 and got["token_strs"] == tok.convert_ids_to_tokens(
        got["tokens"]
    )
    _, _, bare = _post(f"{server_url}/tokenize", {"prompt": PROMPT, "add_special_tokens": False})
    assert bare["tokens"] == tok.encode(PROMPT, add_special_tokens=False)
    messages = [{"role": "user", "content": "hello"}]
    _, _, chat = _post(f"{server_url}/tokenize", {"model": MODEL_NAME, "messages": messages})
    assert chat["tokens"] == tok.apply_chat_template(messages) and chat["token_strs"] is None
    _, _, back = _post(f"{server_url}/detokenize", {"tokens": bare["tokens"]})
    assert back == {"prompt": PROMPT}
    for path, body, param in [
        ("/detokenize", {"tokens": [1, 10**9]}, "tokens"),
        ("/detokenize", {"tokens": "x"}, "tokens"),
        ("/tokenize", {"prompt": 5}, "prompt"),
        ("/tokenize", {"prompt": "a", "model": "other"}, "model"),
    ]:
        status, _, err = _post(f"{server_url}{path}", body)
        assert status in (400, 404) and err["error"]["param"] == param, err


@pytest.fixture(scope="module")
def strict_url(async_llm):
    from tandem.core.server import running_server

    with running_server(async_llm, MODEL_NAME, strict_fields=True) as url:
        yield url


def test_unknown_fields_are_ignored_and_named_or_refused_when_strict(
    server_url, strict_url, caplog
) -> None:
    body = {"prompt": "a", "max_tokens": 2, "frobnicate": 1, "functions": []}
    with caplog.at_level("WARNING", logger="tandem"):
        status, headers, got = _post(f"{server_url}/v1/completions", body)
    assert status == 200, got
    assert headers["x-tandem-ignored-fields"] == "frobnicate, functions"
    assert any(
        "ignored unknown field(s): frobnicate, functions" in r.message for r in caplog.records
    )
    chat = {"messages": [{"role": "user", "content": "x", "audio": "7"}], "max_tokens": 1}
    status, headers, _ = _post(f"{server_url}/v1/chat/completions", chat)
    assert status == 200 and headers["x-tandem-ignored-fields"] == "messages[0].audio"
    status, _, err = _post(f"{strict_url}/v1/completions", body)
    assert status == 400 and err["error"]["param"] == "frobnicate"
    # what needs the sampler is refused by name, strict or not
    for field, value in [("suffix", "x"), ("best_of", 3)]:
        status, _, err = _post(f"{server_url}/v1/chat/completions", {**chat, field: value})
        assert status == 400 and err["error"]["param"] == field, err
