"""The running server fuzzed from its own ``/openapi.json`` (schemathesis), on both engines.

Every operation gets bodies that follow its schema and bodies that break it; every
answer must be a non-5xx whose status, content type, headers and body the description
declares. The server's limits are small, so that no generated request runs long.
"""

from __future__ import annotations

from collections import Counter

import pytest
from servhelpers import MODEL_NAME

schemathesis = pytest.importorskip("schemathesis")

EXAMPLES = 40  # per operation with a body, and generation mode


@pytest.fixture(scope="module")
def fuzzed(async_llm):
    from tandem.core.server import running_server

    with running_server(
        async_llm, MODEL_NAME, max_prompts=4, max_sequences=8, max_body_bytes=1 << 20
    ) as url:
        yield url


@pytest.mark.slow
def test_fuzzed_server_sends_no_5xx_and_only_what_it_declares(fuzzed) -> None:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
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
    ]
    schema = schemathesis.openapi.from_url(f"{fuzzed}/openapi.json")
    statuses: Counter[int] = Counter()
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):

            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def fuzz(case) -> None:
                response = case.call(base_url=fuzzed, timeout=120)
                statuses[response.status_code] += 1
                case.validate_response(response, checks=checks)

            try:
                fuzz()
            except Unsatisfiable:  # nothing to break in a GET without parameters
                assert mode is schemathesis.GenerationMode.NEGATIVE
    total = sum(statuses.values())
    errors = sum(n for code, n in statuses.items() if code >= 500)
    print(f"fuzz: {total} cases, {errors} 5xx, statuses {dict(sorted(statuses.items()))}")
    assert total >= 300 and errors == 0
