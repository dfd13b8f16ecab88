"""Bad input, property-based: every case works or is refused up front, naming the problem.

A refused case raises ValueError/TypeError before any request reaches the engine (it
is left idle, every KV block free); an accepted case gives a well-formed answer (and,
when it is plain greedy decoding, the reference tokens); after every case the engine
still answers the probe with the tokens it gave when fresh.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from relhelpers import PROBE_IDS

from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.validate import RequestError, RequestTypeError

pytestmark = [pytest.mark.reliability, pytest.mark.engines("v0", "v1")]

SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
VOCAB = 512  # the tiny model's vocabulary

junk = st.one_of(
    st.none(), st.booleans(), st.text(max_size=3), st.floats(allow_nan=True), st.just([1])
)
finite = st.floats(-3, 3, allow_nan=False)
odd_floats = st.sampled_from([math.nan, math.inf, -math.inf])
flag = st.one_of(st.booleans(), st.sampled_from([0, 1, None, "yes"]))
count = st.one_of(st.none(), st.integers(-2, 8), st.sampled_from([600, 2**70]), junk)

SAMPLING_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "n": st.one_of(st.integers(-1, 3), junk),
    "temperature": st.one_of(st.just(0.0), finite, odd_floats, junk),
    "top_p": st.one_of(st.floats(-0.5, 1.5), odd_floats, junk),
    "top_k": st.one_of(st.integers(-3, 5), st.just(10**6), junk),
    "min_p": st.one_of(st.floats(-0.5, 1.5), junk),
    "seed": st.one_of(st.none(), st.integers(-(2**70), 2**70), junk),
    "stop": st.one_of(
        st.none(), st.text(max_size=3), st.lists(st.text(max_size=3), max_size=2), junk
    ),
    "stop_token_ids": st.one_of(
        st.none(), st.lists(st.integers(-2, VOCAB + 2), max_size=3), st.just([1.5]), junk
    ),
    "include_stop_str_in_output": flag,
    "ignore_eos": flag,
    "skip_special_tokens": flag,
    "max_tokens": st.one_of(st.integers(-1, 6), junk),
    "min_tokens": st.one_of(st.integers(-1, 4), junk),
    "logprobs": count,
    "prompt_logprobs": count,
    "presence_penalty": st.one_of(finite, odd_floats, junk),
    "frequency_penalty": st.one_of(finite, junk),
    "repetition_penalty": st.one_of(st.floats(-1, 3), junk),
    "best_of": st.integers(1, 2),  # not a field: a TypeError naming it
}


VALID_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "n": st.integers(1, 2),
    "temperature": st.sampled_from([0.0, 0.0, 0.7, 1.0]),
    "top_p": st.floats(0.1, 1.0),
    "top_k": st.sampled_from([-1, 0, 1, 5, 10**6]),
    "min_p": st.floats(0.0, 0.5),
    "seed": st.one_of(st.none(), st.integers(-(2**70), 2**70)),
    "stop": st.one_of(st.none(), st.lists(st.text("ab ", min_size=1, max_size=2), max_size=2)),
    "stop_token_ids": st.lists(st.integers(0, VOCAB + 2), max_size=2),
    "ignore_eos": st.booleans(),
    "max_tokens": st.integers(1, 6),
    "logprobs": st.one_of(st.none(), st.integers(0, 3)),
    "prompt_logprobs": st.one_of(st.none(), st.integers(0, 3)),
    "presence_penalty": st.floats(-2, 2),
    "repetition_penalty": st.floats(0.5, 2),
}
# mostly valid fields, then one field drawn from every value (valid or not)
sampling_kwargs = st.tuples(
    st.fixed_dictionaries({}, optional=VALID_FIELDS),
    st.sampled_from(sorted(SAMPLING_FIELDS)).flatmap(
        lambda k: SAMPLING_FIELDS[k].map(lambda v: (k, v))
    ),
).map(lambda t: {**t[0], t[1][0]: t[1][1]})


def refused(exc: BaseException, names: list[str]) -> None:
    """A refusal must be ValueError/TypeError and its message must name one of ``names``."""
    assert isinstance(exc, (ValueError, TypeError)), repr(exc)
    text = str(exc)
    assert any(name in text for name in names), f"{text!r} names none of {names}"


def check_output(out: Any, params: SamplingParams, prompt_ids: list[int]) -> None:
    assert out.finished and list(out.prompt_token_ids) == prompt_ids
    assert len(out.outputs) == params.n
    for c in out.outputs:
        assert all(0 <= t < VOCAB for t in c.token_ids)
        assert 1 <= len(c.token_ids) <= params.max_tokens
        assert c.finish_reason in ("length", "stop")
        if params.logprobs is not None:
            assert c.logprobs is not None and len(c.logprobs) == len(c.token_ids)
            for entry, tok in zip(c.logprobs, c.token_ids):
                assert tok in entry and len(entry) <= min(params.logprobs, VOCAB) + 1
    if params.prompt_logprobs is not None:
        assert out.prompt_logprobs is not None
        assert len(out.prompt_logprobs) == len(prompt_ids)


def plain_greedy(p: SamplingParams) -> bool:
    """Whether the answer must be the reference greedy continuation (a prefix of it)."""
    return (
        p.greedy
        and not p.has_penalties
        and not p.stop
        and not p.stop_token_ids
        and p.min_tokens == 0
    )


def test_sampling_params(served: Any) -> None:
    tried: list[bool] = []  # True: accepted and served; False: refused

    @SETTINGS
    @given(kw=sampling_kwargs)
    def case(kw: dict[str, Any]) -> None:
        try:
            params = SamplingParams(**kw)
        except Exception as exc:
            refused(exc, list(kw))
            tried.append(False)
            served.check()
            return
        if params.max_tokens is None or params.max_tokens > 6:
            params = params.replace(max_tokens=6)  # keep the accepted cases short
        outs = served.llm.generate({"prompt_token_ids": PROBE_IDS}, params, use_tqdm=False)
        check_output(outs[0], params, PROBE_IDS)
        if plain_greedy(params):
            for c in outs[0].outputs:
                assert list(c.token_ids) == served.reference[: len(c.token_ids)]
        tried.append(True)
        served.check()

    case()
    report("SamplingParams", tried)


# every float and int a client can send: float32's edges, subnormals, 2**63, 2**64 and past
any_float = st.one_of(
    st.floats(),
    st.sampled_from([1e-300, 1e-45, 1.2e-38, 1e-6, 3.5e38, 1.7e308, 2.0**-149]),
    st.integers(-(2**70), 2**70),
)
any_int = st.one_of(st.integers(), st.sampled_from([2**63 - 1, 2**63, 2**64, 2**100, -(2**64)]))
WHOLE_RANGE: dict[str, st.SearchStrategy[Any]] = {
    **{k: any_float for k in ("temperature", "top_p", "min_p", "repetition_penalty")},
    **{k: any_float for k in ("presence_penalty", "frequency_penalty")},
    **{k: any_int for k in ("n", "top_k", "seed", "max_tokens", "min_tokens")},
    **{k: st.one_of(st.none(), any_int) for k in ("logprobs", "prompt_logprobs")},
    "stop_token_ids": st.lists(any_int, max_size=3),
}
whole_range_kwargs = st.dictionaries(
    st.sampled_from(sorted(WHOLE_RANGE)), st.none(), min_size=1, max_size=3
).flatmap(lambda d: st.fixed_dictionaries({k: WHOLE_RANGE[k] for k in d}))


def test_sampling_params_from_the_whole_number_range(served: Any) -> None:
    """Any number a client may send is refused up front naming its field, or it is served:
    nothing reaches the batched step that the kernels (float32, int64) cannot hold."""
    tried: list[bool] = []

    @SETTINGS
    @given(kw=whole_range_kwargs)
    def case(kw: dict[str, Any]) -> None:
        try:
            params = SamplingParams(**kw)
        except (RequestError, RequestTypeError) as exc:
            assert exc.root in kw, (exc.field, kw)
            tried.append(False)
            return
        # keep an accepted case small: 2 samples of at most 4 tokens
        short = min(params.max_tokens or 4, 4)
        params = params.replace(n=min(params.n, 2), max_tokens=short)
        params = params.replace(min_tokens=min(params.min_tokens, short))
        outs = served.llm.generate({"prompt_token_ids": PROBE_IDS}, params, use_tqdm=False)
        check_output(outs[0], params, PROBE_IDS)
        tried.append(True)
        served.check()

    case()
    report("whole-range SamplingParams", tried)


@pytest.mark.parametrize(
    ("field", "value", "ok"),
    [
        ("repetition_penalty", 1e-6, True),  # float32(1e-6) < 1e-6: once killed the engine
        ("repetition_penalty", 3.5e38, False),  # inf as a float32
        ("top_p", 1e-300, False),  # 0.0 as a float32
        ("top_k", 2**63, True),  # past int64: more than the vocabulary means all tokens
        ("min_tokens", 2**64, True),  # clamped to max_tokens=None's room
        ("stop_token_ids", [2**64], False),  # past int64
        ("stop", ["\ud800"], False),  # cannot be encoded for the detokenizer
    ],
)
def test_values_that_once_killed_the_engine(served: Any, field: str, value: Any, ok: bool):
    kw = {field: value, "temperature": 0.7, "seed": 3, "max_tokens": None}
    if not ok:
        with pytest.raises(RequestError) as info:
            SamplingParams(**kw)
        assert info.value.root == field
        return
    params = SamplingParams(**kw).replace(max_tokens=4, min_tokens=0)
    if field == "min_tokens":
        params = SamplingParams(**kw)  # max_tokens=None: min_tokens is cut to the room
    outs = served.llm.generate({"prompt_token_ids": PROBE_IDS}, params, use_tqdm=False)
    assert outs[0].outputs[0].finish_reason in ("length", "stop")
    assert outs[0].error is None
    served.check()


token_ids = st.lists(st.integers(-3, VOCAB + 3), max_size=8)
prompt = st.one_of(
    st.text(max_size=20),
    st.just("many words " * 100),  # too long for max_model_len=128
    st.fixed_dictionaries({"prompt": st.text(max_size=12)}),
    st.fixed_dictionaries({"prompt_token_ids": token_ids}),
    st.fixed_dictionaries({"prompt_token_ids": st.lists(st.integers(0, 9), min_size=126)}),
    st.fixed_dictionaries({"prompt_token_ids": st.one_of(junk, st.just([[1, 2]]))}),
    st.dictionaries(st.sampled_from(["prompt", "prompt_token_ids", "text"]), token_ids),
    token_ids,  # a bare list of ints is a list of (bad) prompts
    st.lists(token_ids, max_size=2),  # nested lists
    st.integers(),
    st.binary(max_size=4),
    st.none(),
)
good_ids = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=9)
good_prompt = st.one_of(
    st.text(st.characters(codec="ascii", categories=["L", "N", "P"]), min_size=1, max_size=12),
    st.fixed_dictionaries({"prompt_token_ids": good_ids}),
)
batch = st.one_of(
    prompt, st.lists(prompt, max_size=3), st.lists(good_prompt, min_size=1, max_size=3)
)
param_list = st.one_of(
    st.none(),
    st.none(),
    st.just(SamplingParams(temperature=0, max_tokens=3)),
    st.lists(st.just(SamplingParams(temperature=0, max_tokens=2)), max_size=4),
    st.lists(st.sampled_from([SamplingParams(max_tokens=2, seed=1), {"max_tokens": 2}])),
    junk,
)


def test_prompts_and_batches(served: Any) -> None:
    tried: list[bool] = []

    @SETTINGS
    @given(prompts=batch, params=param_list)
    def case(prompts: Any, params: Any) -> None:
        try:
            outs = served.llm.generate(prompts, params, use_tqdm=False)
        except Exception as exc:
            refused(exc, ["prompt", "sampling_params", "token"])
            tried.append(False)
            served.check()
            return
        items = prompts if isinstance(prompts, list) else [prompts]
        assert len(outs) == len(items)
        plist = params if isinstance(params, list) else [params] * len(items)
        for out, p in zip(outs, plist):
            check_output(out, p or SamplingParams(), list(out.prompt_token_ids))
            assert 0 < len(out.prompt_token_ids) < 128
        tried.append(True)
        served.check()

    case()
    report("prompts/batches", tried)


def report(what: str, tried: list[bool]) -> None:
    """Print the cases tried (``-s`` shows it); both outcomes must have been exercised."""
    ok = sum(tried)
    refusals = len(tried) - ok
    print(f"\nreliability bad-input {what}: {len(tried)} cases, {ok} served, {refusals} refused")
    assert ok >= 3 and refusals >= 3, (what, ok, refusals)
