"""The attention backend an engine runs follows ``TANDEM_ATTENTION_BACKEND`` on both
engines, v1's core process included (it reports its choice in its Ready message)."""

from __future__ import annotations

import pytest

from tandem.core.attention_backend import available_attention_backends
from tandem.core.sampling_params import SamplingParams
from tandem.core.testing import run_to_completion

pytestmark = pytest.mark.engines("v0", "v1")

GREEDY = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)


def check(eng, expected: str) -> None:
    assert eng.attention_backend == expected
    out = run_to_completion(eng, [("a", [1, 40, 41], GREEDY)])["a"]
    assert len(out.outputs[0].token_ids) == 4
    model = getattr(getattr(eng, "runner", None), "model", None)  # v0: in this process
    if model is not None:
        assert model.attention_backend == expected


def test_the_variable_forces_the_torch_backend(new_engine, monkeypatch) -> None:
    monkeypatch.setenv("TANDEM_ATTENTION_BACKEND", "torch")
    check(new_engine(), "torch")


def test_the_default_is_the_c_backend_where_it_builds(new_engine, monkeypatch) -> None:
    monkeypatch.delenv("TANDEM_ATTENTION_BACKEND", raising=False)
    expected = "cpu" if "cpu" in available_attention_backends("cpu") else "torch"
    check(new_engine(), expected)
