"""The running server fuzzed from its own ``/openapi.json`` (schemathesis), on both engines.

Every operation gets bodies that follow its schema and bodies that break it. Every
answer must be a non-5xx whose status, content type, headers and body the description
declares; a body that breaks the schema must be refused, and one that follows it
accepted, save for what no schema can say, which the description's 400 names: a
request too long for the context (``code`` ``context_length_exceeded``), fields that
depend on each other, and schemas, regexes and grammars that must compile
(:data:`BEYOND_SCHEMA`). The server's limits are small, so that no request runs long.

A few examples per operation run with the suite; the slow test runs many more.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from servhelpers import MODEL_NAME

schemathesis = pytest.importorskip("schemathesis")

FAST_EXAMPLES = 8  # per operation and generation mode: ~90 requests, ~30 s an engine
SLOW_EXAMPLES = 100
# fields a schema-valid body may still be refused for (400, ``param`` naming the field):
# they depend on other fields (min_tokens <= max_tokens; one output constraint at a time;
# tool_choice needs the tool it names) or must compile (a JSON schema given as text, a
# regex, a grammar, a tool's parameters)
BEYOND_SCHEMA = {
    "min_tokens",
    "tools",
    "tool_choice",
    "response_format",
    "structured_outputs",
    "guided_json",
    "guided_regex",
    "guided_choice",
    "guided_grammar",
}
CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"


@pytest.fixture(scope="module")
def fuzzed(async_llm):
    from tandem.core.server import running_server

    # max_sequences covers max_prompts x the largest n: the published bounds are then
    # all the request limits there are
    with running_server(
        async_llm, MODEL_NAME, max_prompts=4, max_sequences=64, max_body_bytes=1 << 20
    ) as url:
        yield url


def beyond_schema(text: str) -> bool:
    """Whether a refusal of a schema-valid body is one the description says no schema
    can express."""
    err = json.loads(text)["error"]
    return err["code"] == CONTEXT_LENGTH_EXCEEDED or err["param"] in BEYOND_SCHEMA


def fuzz(url: str, examples: int) -> Counter[int]:
    """Run ``examples`` positive and negative cases per operation; the statuses seen."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        negative_data_rejection,
        response_headers_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
        negative_data_rejection,
    ]
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    statuses: Counter[int] = Counter()
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):

            @settings(
                max_examples=examples,
                deadline=None,
                database=None,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def one(case) -> None:
                response = case.call(base_url=url, timeout=120)
                statuses[response.status_code] += 1
                case.validate_response(response, checks=checks)
                if case.meta.generation.mode.is_positive and response.status_code >= 400:
                    assert response.status_code == 400 and beyond_schema(response.text), (
                        f"a schema-valid request refused: {case.body!r:.500} -> "
                        f"{response.status_code} {response.text[:300]}"
                    )

            try:
                one()
            except Unsatisfiable:  # nothing to break in a GET without parameters
                assert mode is schemathesis.GenerationMode.NEGATIVE
    return statuses


def _report(statuses: Counter[int]) -> tuple[int, int]:
    total = sum(statuses.values())
    errors = sum(n for code, n in statuses.items() if code >= 500)
    print(f"fuzz: {total} cases, {errors} 5xx, statuses {dict(sorted(statuses.items()))}")
    return total, errors


def test_fuzzed_server_keeps_its_contract(fuzzed) -> None:
    total, errors = _report(fuzz(fuzzed, FAST_EXAMPLES))
    assert total >= 50 and errors == 0


@pytest.mark.slow
def test_fuzzed_server_keeps_its_contract_at_length(fuzzed) -> None:
    total, errors = _report(fuzz(fuzzed, SLOW_EXAMPLES))
    assert total >= 500 and errors == 0


def test_beyond_schema_names_only_what_a_schema_cannot_say() -> None:
    """The allowance is narrow: a plain field's refusal is not in it."""
    refusal = {"error": {"message": "m", "type": "invalid_request_error", "code": None}}
    assert not beyond_schema(json.dumps({"error": {**refusal["error"], "param": "top_k"}}))
    assert beyond_schema(json.dumps({"error": {**refusal["error"], "param": "guided_regex"}}))
    too_long = {**refusal["error"], "param": "prompt", "code": CONTEXT_LENGTH_EXCEEDED}
    assert beyond_schema(json.dumps({"error": too_long}))
