"""Structured outputs, logit_bias and tool calls through the official ``openai`` client,
on both engines. The tiny model draws near-random tokens at temperature 1: the grammar
alone makes the output valid."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import openai
import pytest
from servhelpers import MODEL_NAME

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
    },
    "required": ["name", "age"],
}
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Oslo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
}
CLOCK = {"type": "object", "properties": {"zone": {"enum": ["utc", "cet"]}}, "required": ["zone"]}
TOOLS = [
    {"type": "function", "function": {"name": "weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "clock", "description": "time", "parameters": CLOCK}},
]
ARGS = {"weather": WEATHER, "clock": CLOCK}
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def async_llm(tiny_model: Path, engine: str) -> Iterator[object]:
    from tandem.core.entrypoints.async_llm import AsyncLLM

    # room for the tool instructions the server writes into the prompt
    with AsyncLLM(tiny_model, engine=engine, max_model_len=512) as llm:
        yield llm


def test_response_format_json_schema_and_json_object(client) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    got = client.chat.completions.create(
        model=MODEL_NAME, messages=HI, response_format=fmt, temperature=1.0, seed=5, n=2
    )
    for choice in got.choices:
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content), PERSON)
    obj = client.completions.create(
        model=MODEL_NAME,
        prompt="a",
        max_tokens=60,
        temperature=1.0,
        seed=2,
        extra_body={"response_format": {"type": "json_object"}},
    ).choices[0]
    assert obj.text.startswith("{")
    if obj.finish_reason == "stop":
        assert isinstance(json.loads(obj.text), dict)


def test_structured_outputs_field_streamed_and_whole(client) -> None:
    chunks = client.completions.create(
        model=MODEL_NAME,
        prompt="a",
        max_tokens=60,
        temperature=1.0,
        stream=True,
        extra_body={"structured_outputs": {"json": PERSON}},
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    jsonschema.validate(json.loads(text), PERSON)
    for shape, check in [
        ({"choice": ["left", "right"]}, lambda t: t in ("left", "right")),
        ({"regex": "[a-c]{4}!"}, lambda t: re.fullmatch("[a-c]{4}!", t)),
        ({"grammar": 'root ::= "x" [0-9] [0-9]'}, lambda t: re.fullmatch("x[0-9]{2}", t)),
    ]:
        got = client.completions.create(
            model=MODEL_NAME,
            prompt="a",
            max_tokens=20,
            temperature=1.0,
            extra_body={"structured_outputs": shape},
        )
        assert check(got.choices[0].text), (shape, got.choices[0].text)


def test_logit_bias(client, tiny_model) -> None:
    from tandem.core.text.tokenizer import load_tokenizer

    got = client.completions.create(
        model=MODEL_NAME, prompt="a", max_tokens=4, temperature=1.0, logit_bias={"77": 100}
    )
    assert got.choices[0].text == load_tokenizer(tiny_model).decode([77] * 4)


def _schema_format(**json_schema) -> dict:
    return {"response_format": {"type": "json_schema", "json_schema": json_schema}}


BAD_TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "objekt"}}}
NOPE = {"type": "function", "function": {"name": "nope"}}
BAD = [
    (_schema_format(name="x"), "response_format", "schema"),
    (_schema_format(name="x", schema={"type": "objekt"}), "response_format", "objekt"),
    ({"structured_outputs": {"regex": "(a"}}, "structured_outputs", "parenthesis"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs", "exactly"),
    (
        {"guided_choice": ["a"], "response_format": {"type": "json_object"}},
        "guided_choice",
        "one output constraint",
    ),
    ({"logit_bias": {"5": 101}}, "logit_bias", "less than or equal to 100"),
    ({"logit_bias": {"99999": 1}}, "logit_bias", "vocabulary"),
    ({"tools": TOOLS, "tool_choice": NOPE}, "tool_choice", "nope"),
    ({"tool_choice": "required"}, "tool_choice", "needs tools"),
    ({"tools": [BAD_TOOL], "tool_choice": "required"}, "tools", "objekt"),
]


@pytest.mark.parametrize(("extra", "param", "words"), BAD)
def test_bad_constraints_are_a_400_naming_the_field(client, extra, param, words) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=MODEL_NAME, messages=HI, max_tokens=5, extra_body=extra
        )
    err = info.value.body
    assert err["param"] == param and words in err["message"], err
    assert ".cc" not in err["message"]


def test_required_tool_calls_match_their_schemas(client) -> None:
    # the tiny model has 512 positions: the server's tool instructions take most of them
    for parallel, tools, most in [(False, TOOLS, 70), (True, TOOLS[1:], 150)]:
        got = client.chat.completions.create(
            model=MODEL_NAME,
            messages=HI,
            tools=tools,
            tool_choice="required",
            parallel_tool_calls=parallel,
            temperature=1.0,
            seed=11,
            max_tokens=most,
        )
        choice = got.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        calls = choice.message.tool_calls
        assert calls and (parallel or len(calls) == 1)
        for call in calls:
            assert call.type == "function" and call.id.startswith("call_")
            jsonschema.validate(json.loads(call.function.arguments), ARGS[call.function.name])


def test_named_tool_choice_streamed_and_whole(client) -> None:
    named = {"type": "function", "function": {"name": "weather"}}
    kw = dict(model=MODEL_NAME, messages=HI, tools=TOOLS, tool_choice=named, temperature=1.0)
    whole = client.chat.completions.create(**kw, seed=3, max_tokens=60).choices[0]
    (call,) = whole.message.tool_calls
    assert call.function.name == "weather" and whole.message.content is None
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    args, names, ids = "", [], set()
    for chunk in client.chat.completions.create(**kw, seed=4, max_tokens=60, stream=True):
        for tc in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            args += tc.function.arguments or ""
            names += [tc.function.name] if tc.function.name else []
            ids |= {tc.id} if tc.id else set()
    assert names == ["weather"] and len(ids) == 1
    jsonschema.validate(json.loads(args), WEATHER)


def test_auto_and_none_answer_text_and_a_conversation_with_calls_is_taken(client) -> None:
    history = [
        *HI,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "clock", "arguments": '{"zone": "utc"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "12:00"},
    ]
    for choice in ("auto", "none"):
        got = client.chat.completions.create(
            model=MODEL_NAME, messages=history, tools=TOOLS[1:], tool_choice=choice, max_tokens=5
        ).choices[0]
        assert got.message.role == "assistant" and not got.message.tool_calls


def test_a_constraint_ends_the_output_before_min_tokens(client) -> None:
    """The choice is complete after one token: only a stop token is allowed, which
    min_tokens bans; the constraint wins (once a 500: no token left to draw)."""
    for seed in (0, 1):
        got = client.completions.create(
            model=MODEL_NAME,
            prompt="a",
            max_tokens=20,
            seed=seed,
            extra_body={"min_tokens": 20, "guided_choice": ["x"]},
        )
        assert got.choices[0].text == "x" and got.choices[0].finish_reason == "stop"
