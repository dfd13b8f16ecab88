"""Structured outputs on both engines: the grammar forces a valid output even from the
tiny model, which draws near-random tokens at temperature 1."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.structured import StructuredOutputsParams as SO
from tandem.core.testing import add_request
from tandem.core.validate import RequestError

PROMPT = [1, 40, 41, 42]
SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 6},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "ok": {"type": "boolean"},
        },
        "required": ["name", "age", "ok"],
    },
    {
        "type": "object",
        "properties": {
            "color": {"enum": ["red", "green", "blue"]},
            "tags": {
                "type": "array",
                "items": {"type": "integer", "minimum": -9, "maximum": 99},
                "maxItems": 3,
            },
        },
        "required": ["color", "tags"],
    },
    {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 4},
]


def constrained(so: SO, seed: int, max_tokens: int = 100, **kw) -> SamplingParams:
    return SamplingParams(
        temperature=1.0, seed=seed, max_tokens=max_tokens, structured_outputs=so, **kw
    )


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**31))
def test_json_schema_output_always_parses_and_validates(shared_engine, run, seed) -> None:
    # every schema twice, and a free request, in one batch (one step serves them all)
    schemas = [s for s in SCHEMAS for _ in range(2)]
    params = [constrained(SO(json=s), seed + i) for i, s in enumerate(schemas)]
    params.append(SamplingParams(temperature=1.0, seed=seed, max_tokens=8, ignore_eos=True))
    outs = run(shared_engine, [PROMPT] * len(params), params)
    for schema, out in zip(schemas, outs):
        comp = out.outputs[0]
        assert comp.finish_reason == "stop", comp
        jsonschema.validate(json.loads(comp.text), schema)
    assert len(outs[-1].outputs[0].token_ids) == 8  # the free row in the batch ran free


def test_choice_regex_grammar_and_json_object(shared_engine, run) -> None:
    params = [
        constrained(SO(choice=["yes", "no", 'a "quoted" choice']), 1, n=3),
        constrained(SO(regex=r"[0-9]{3}-[a-z]{2}"), 2),
        constrained(SO(grammar='root ::= "<" ("ab" | "cd")+ ">"'), 3, max_tokens=60),
        constrained(SO(json_object=True), 4, max_tokens=120),
    ]
    choice, regex, ebnf, obj = run(shared_engine, [PROMPT] * 4, params)
    assert [c.text in ("yes", "no", 'a "quoted" choice') for c in choice.outputs] == [True] * 3
    assert re.fullmatch(r"[0-9]{3}-[a-z]{2}", regex.outputs[0].text)
    text = ebnf.outputs[0].text
    assert ebnf.outputs[0].finish_reason == "length" or re.fullmatch(r"<(ab|cd)+>", text)
    comp = obj.outputs[0]
    if comp.finish_reason == "stop":
        assert isinstance(json.loads(comp.text), dict)
    else:
        assert comp.text.startswith("{")


def test_greedy_constrained_matches_in_a_mixed_batch(shared_engine, run) -> None:
    so = SO(json=SCHEMAS[2])
    greedy = SamplingParams(temperature=0.0, max_tokens=40, structured_outputs=so)
    alone = run(shared_engine, [PROMPT], greedy)[0].outputs[0]
    free = SamplingParams(temperature=0.0, max_tokens=5, logprobs=2)
    mixed = run(shared_engine, [PROMPT, PROMPT], [free, greedy])[1].outputs[0]
    assert alone.token_ids == mixed.token_ids and alone.finish_reason == "stop"


@pytest.mark.parametrize(
    ("so", "field", "words"),
    [
        (dict(json={"type": "objekt"}), "structured_outputs", 'Unsupported type "objekt"'),
        (dict(regex="(ab"), "structured_outputs", "parenthesis is not closed"),
        (dict(grammar="root ::= foo"), "structured_outputs", 'Rule "foo" is not defined'),
        (dict(json="{nope"), "structured_outputs.json", "not valid JSON"),
        (dict(choice=[]), "structured_outputs.choice", "non-empty list"),
        (dict(json={}, regex="a"), "structured_outputs", "exactly one of"),
    ],
)
def test_bad_constraints_are_refused_by_name(shared_engine, so, field, words) -> None:
    with pytest.raises(RequestError) as info:
        add_request(shared_engine, "bad", PROMPT, SamplingParams(structured_outputs=SO(**so)))
    assert info.value.field == field and words in str(info.value), info.value
    assert ".cc:" not in str(info.value)  # the grammar engine's source lines are cut
    assert not shared_engine.has_unfinished_requests()


def test_preempted_constrained_requests_resume_their_grammar(shared_engine, new_engine, run):
    schema = {"type": "array", "items": {"type": "boolean"}, "minItems": 5, "maxItems": 5}
    params = [constrained(SO(json=schema), seed, max_tokens=40) for seed in range(4)]
    alone = [o.outputs[0].token_ids for o in run(shared_engine, [PROMPT] * 4, params)]
    # 16 blocks of 4 slots for 4 sequences of some 40 tokens each: preemption, recompute
    tight = new_engine(max_model_len=64, block_size=4, num_kv_blocks=16)
    outs = run(tight, [PROMPT] * 4, params)
    assert [o.outputs[0].token_ids for o in outs] == alone
    assert tight.stats().num_preemptions > 0
    for out in outs:
        jsonschema.validate(json.loads(out.outputs[0].text), schema)
