from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.validate import RequestError, RequestTypeError


def test_defaults() -> None:
    p = SamplingParams()
    assert (p.n, p.temperature, p.top_p, p.top_k, p.min_p) == (1, 1.0, 1.0, 0, 0.0)
    assert p.max_tokens == 16 and p.min_tokens == 0
    assert p.stop == [] and p.stop_token_ids == []
    assert p.seed is None and p.logprobs is None and p.prompt_logprobs is None
    assert p.skip_special_tokens and not p.ignore_eos and not p.include_stop_str_in_output
    assert not p.greedy and not p.has_penalties


@pytest.mark.parametrize(
    ("temperature", "greedy"), [(0, True), (0.0, True), (1e-6, True), (1e-4, False), (2, False)]
)
def test_greedy(temperature: float, greedy: bool) -> None:
    p = SamplingParams(temperature=temperature)
    assert p.greedy is greedy
    assert isinstance(p.temperature, float)
    if greedy:
        assert p.temperature == 0.0


@pytest.mark.parametrize(("top_k", "stored"), [(0, 0), (-1, 0), (1, 1), (40, 40)])
def test_top_k_normalised(top_k: int, stored: int) -> None:
    assert SamplingParams(top_k=top_k).top_k == stored


def test_stop_normalised() -> None:
    assert SamplingParams(stop="\n").stop == ["\n"]
    assert SamplingParams(stop=("a", "bc")).stop == ["a", "bc"]
    assert SamplingParams(stop_token_ids=(5, 7)).stop_token_ids == [5, 7]
    assert SamplingParams(stop="x").stop_strings == ["x"]


def test_none_max_tokens_allowed() -> None:
    assert SamplingParams(max_tokens=None, min_tokens=5).max_tokens is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 0}, "n must be >= 1, got 0"),
        ({"temperature": -1.0}, r"temperature must be in \[0, 3.40282e\+38\] .*got -1.0"),
        ({"temperature": 3.5e38}, r"temperature must be in \[0, 3.40282e\+38\] \(the sampler"),
        ({"temperature": 10**400}, "temperature must be a finite number"),
        ({"top_p": 1e-300}, r"top_p must be >= 1.18e-38 \(the smallest normal float32"),
        ({"n": 10**6}, "n must be <= 1024, got 1000000"),
        ({"stop": ["ok", "\ud800"]}, r"stop\[1\] must be valid Unicode text.*\\ud800"),
        ({"stop_token_ids": [2**64]}, r"stop_token_ids\[0\] must be <= 9223372036854775807"),
        ({"temperature": math.nan}, "temperature must be a finite number, got nan"),
        ({"temperature": math.inf}, "temperature must be a finite number"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\], got 0.0"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\], got 1.5"),
        ({"top_k": -2}, "top_k must be -1 or 0 .* got -2"),
        ({"min_p": -0.1}, r"min_p must be in \[0, 1\], got -0.1"),
        ({"min_p": 1.1}, r"min_p must be in \[0, 1\], got 1.1"),
        ({"stop": [""]}, "stop strings must be non-empty"),
        ({"stop_token_ids": [3, -1]}, r"stop_token_ids\[1\] must be >= 0, got -1"),
        ({"max_tokens": 0}, "max_tokens must be >= 1, got 0"),
        ({"min_tokens": -1}, "min_tokens must be >= 0, got -1"),
        ({"min_tokens": 5, "max_tokens": 4}, "min_tokens must be <= max_tokens=4, got 5"),
        ({"logprobs": -1}, "logprobs must be >= 0, got -1"),
        ({"prompt_logprobs": -1}, "prompt_logprobs must be >= 0, got -1"),
        ({"presence_penalty": 2.5}, r"presence_penalty must be in \[-2, 2\], got 2.5"),
        ({"frequency_penalty": -3}, r"frequency_penalty must be in \[-2, 2\], got -3.0"),
        ({"repetition_penalty": 0.0}, r"repetition_penalty must be in \[1e-06, 1e\+06\]"),
        ({"repetition_penalty": 1e-7}, r"repetition_penalty must be in \[1e-06, 1e\+06\]"),
        ({"repetition_penalty": 3.5e38}, r"repetition_penalty must be in \[1e-06, 1e\+06\]"),
    ],
)
def test_bad_values(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(RequestError, match=message) as info:
        SamplingParams(**kwargs)
    assert info.value.root in kwargs  # the error names its field


def test_kernel_range_limits_agree_with_the_kernels() -> None:
    """What the front door accepts the sampler accepts: the bounds are the same numbers."""
    from tandem.core.inputs.sampling_params import REPETITION_PENALTY_RANGE
    from tandem.kernels.sampling.processors import REPETITION_RANGE

    assert REPETITION_PENALTY_RANGE == REPETITION_RANGE
    SamplingParams(repetition_penalty=1e-6, top_p=1.2e-38, temperature=3.4e38, top_k=2**70)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": True}, "n must be an int, got bool"),
        ({"n": 1.0}, "n must be an int, got float"),
        ({"temperature": "hot"}, "temperature must be a float, got str"),
        ({"temperature": True}, "temperature must be a float, got bool"),
        ({"top_k": 2.0}, "top_k must be an int, got float"),
        ({"seed": "1"}, "seed must be an int or None, got str"),
        ({"stop": 3}, "stop must be a str, a list of str or None, got int"),
        ({"stop": ["a", 1]}, "stop must contain only str, got int"),
        ({"stop_token_ids": 5}, "stop_token_ids must be a list of int or None, got int"),
        ({"stop_token_ids": [True]}, r"stop_token_ids\[0\] must be an int, got bool"),
        ({"ignore_eos": 1}, "ignore_eos must be a bool, got int"),
        ({"include_stop_str_in_output": "yes"}, "include_stop_str_in_output must be a bool"),
        ({"skip_special_tokens": None}, "skip_special_tokens must be a bool"),
        ({"max_tokens": 1.5}, "max_tokens must be an int or None, got float"),
        ({"logprobs": False}, "logprobs must be an int or None, got bool"),
    ],
)
def test_bad_types(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(RequestTypeError, match=message) as info:
        SamplingParams(**kwargs)
    assert info.value.root in kwargs


def test_replace_validates_and_copies() -> None:
    p = SamplingParams(stop=["a"], stop_token_ids=[4], temperature=0.5)
    q = p.replace(temperature=0.0, max_tokens=3)
    assert q.greedy and q.max_tokens == 3 and q.stop == ["a"] and not p.greedy
    q.stop.append("b")
    assert p.stop == ["a"]
    with pytest.raises(ValueError, match=r"top_p must be in"):
        p.replace(top_p=2.0)
    with pytest.raises(TypeError, match=r"no field colour; allowed: "):
        p.replace(colour="red")


def test_clone_is_equal_and_independent() -> None:
    p = SamplingParams(n=2, seed=7, stop="x", stop_token_ids=[9], logprobs=3)
    c = p.clone()
    assert c == p and c is not p
    c.stop_token_ids.append(10)
    assert p.stop_token_ids == [9]


def test_slots() -> None:
    with pytest.raises(AttributeError):
        SamplingParams().colour = "red"  # type: ignore[attr-defined]


@settings(max_examples=60, deadline=None)
@given(
    temperature=st.floats(min_value=0, max_value=5),
    top_p=st.floats(min_value=1e-6, max_value=1.0),
    top_k=st.integers(min_value=-1, max_value=100),
    min_p=st.floats(min_value=0, max_value=1),
    max_tokens=st.one_of(st.none(), st.integers(min_value=1, max_value=100)),
)
def test_valid_values_round_trip(
    temperature: float, top_p: float, top_k: int, min_p: float, max_tokens: int | None
) -> None:
    p = SamplingParams(
        temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p, max_tokens=max_tokens
    )
    assert p.top_k >= 0 and p.top_k == max(top_k, 0)
    assert p.greedy == (temperature < 1e-5)
    assert p.clone() == p


MODEL = SamplingParams.from_generation_config(
    {"do_sample": True, "temperature": 0.6, "top_p": 0.9, "max_new_tokens": 40}
)


def test_fields_left_out_take_the_model_defaults() -> None:
    p = SamplingParams(max_tokens=8, seed=3).over(MODEL)
    assert (p.temperature, p.top_p, p.top_k, p.max_tokens, p.seed) == (0.6, 0.9, 50, 8, 3)
    assert SamplingParams().over(MODEL) == MODEL
    positional = SamplingParams(2, 0.3).over(MODEL)  # n, temperature
    assert (positional.n, positional.temperature, positional.top_p) == (2, 0.3, 0.9)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_explicit_values_win_even_at_their_class_default(temperature: float) -> None:
    p = SamplingParams(temperature=temperature, top_p=1.0).over(MODEL)
    assert (p.temperature, p.top_p, p.top_k, p.max_tokens) == (temperature, 1.0, 50, 40)


def test_replace_and_copies_keep_what_was_given() -> None:
    import copy
    import pickle

    p = SamplingParams(max_tokens=8)
    assert p.given == {"max_tokens"}
    assert p.replace(seed=1).given == {"max_tokens", "seed"}
    for twin in (p.clone(), copy.deepcopy(p), pickle.loads(pickle.dumps(p))):
        assert twin.given == {"max_tokens"} and twin.over(MODEL).temperature == 0.6
    merged = p.over(MODEL)
    assert merged.given == p.given and merged.over(MODEL) == merged
    assert p.over(MODEL).stop is not MODEL.stop  # no list shared with the defaults


def test_a_merge_that_breaks_a_rule_names_the_field() -> None:
    short = SamplingParams.from_generation_config({"max_new_tokens": 5})
    with pytest.raises(ValueError, match=r"min_tokens must be <= max_tokens=5") as err:
        SamplingParams(min_tokens=10).over(short)
    assert err.value.field == "min_tokens"
