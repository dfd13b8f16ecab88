"""Each check of a request is made once, at the front door, and reads the same through
every door: ``LLM``, ``AsyncLLM`` and the server (which stands on ``AsyncLLM``).

The engines take the checked ``EngineRequest`` as it is: they neither re-check a
sampling value, nor a request id, nor the engine arguments.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from servhelpers import MAX_MODEL_LEN, MODEL_NAME

from tandem.core.config.engine_args import EngineArgs
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.validate import RequestError

PROMPT = [1, 40, 41, 42]


@pytest.fixture(scope="module")
def llm(tiny_model: Path, engine: str) -> Iterator[Any]:
    from tandem.core.entrypoints.llm import LLM

    with LLM(tiny_model, engine=engine, max_model_len=MAX_MODEL_LEN) as made:
        yield made


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    req = urllib.request.Request(f"{url}/v1/completions", data, headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def refusal(fn: Any) -> RequestError:
    with pytest.raises(RequestError) as info:
        fn()
    return info.value


# fields whose rule the server's schema leaves to the front door's checks (a range the
# schema states, e.g. repetition_penalty's, is refused by the schema in its own words)
CASES = [
    ({"min_tokens": 9, "max_tokens": 4}, "min_tokens"),
    ({"logit_bias": {"100000": 1.0}}, "logit_bias"),  # an id past the vocabulary
]


@pytest.mark.parametrize(("fields", "field"), CASES)
def test_a_refused_value_reads_the_same_through_every_door(
    llm: Any, async_llm: Any, server_url: str, fields: dict[str, Any], field: str
) -> None:
    def params() -> SamplingParams:
        return SamplingParams(**fields)

    via_llm = refusal(lambda: llm.generate({"prompt_token_ids": PROMPT}, params(), False))
    via_async = refusal(lambda: async_llm.process(PROMPT, params()))
    status, body = post(server_url, {"model": MODEL_NAME, "prompt": PROMPT, **fields})
    assert via_llm.field == via_async.field == field
    assert str(via_llm) == str(via_async), (via_llm, via_async)
    assert field in str(via_llm)
    assert status == 400 and body["error"]["param"] == field, body
    assert body["error"]["message"] == str(via_llm)


def test_a_running_request_id_is_refused_once_at_the_front(async_llm: Any) -> None:
    """``AsyncLLM`` refuses an id already running (a RequestError naming request_id),
    before anything reaches the engine; the first request runs on, unharmed."""
    long = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)

    async def main() -> tuple[RequestError, int]:
        first = async_llm.generate(PROMPT, long, request_id="same")
        outs = [await first.__anext__()]
        with pytest.raises(RequestError) as info:
            await async_llm.generate(PROMPT, long, request_id="same").__anext__()
        outs += [o async for o in first]
        # once finished, the id is free again
        again = [o async for o in async_llm.generate(PROMPT, long, request_id="same")]
        assert again[-1].finished
        return info.value, len(outs[-1].outputs[0].token_ids)

    refused, tokens = asyncio.run(main())
    assert refused.field == "request_id"
    assert str(refused) == "request_id 'same' is already running"
    assert tokens == 40


def test_sampling_values_are_not_checked_again_on_the_way(
    llm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Params are checked when made: generating with them (or with the model's defaults)
    makes at most one new SamplingParams, the given fields merged with the model's defaults
    once at the front door for the whole batch; nothing checks them again on the way."""
    made: list[int] = []
    original = SamplingParams.__post_init__

    def counted(self: SamplingParams) -> None:
        made.append(1)
        original(self)

    given = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
    monkeypatch.setattr(SamplingParams, "__post_init__", counted)
    llm.generate([{"prompt_token_ids": PROMPT}] * 3, given, use_tqdm=False)
    assert made == [1]  # the merge with the model's defaults, once for three prompts
    llm.generate([{"prompt_token_ids": PROMPT}] * 2, None, use_tqdm=False)
    assert made == [1]


def test_engine_args_are_checked_once(
    tiny_model: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tandem.core.entrypoints.llm import LLM

    calls: list[int] = []
    original = EngineArgs.validate

    def counted(self: EngineArgs) -> None:
        calls.append(1)
        original(self)

    monkeypatch.setattr(EngineArgs, "validate", counted)
    with LLM(tiny_model, engine=engine, max_model_len=MAX_MODEL_LEN):
        pass
    assert calls == [1]
    with pytest.raises(ValueError, match=r"block_size must be a power of two, got 3"):
        LLM(tiny_model, engine=engine, block_size=3)
    assert calls == [1, 1]
