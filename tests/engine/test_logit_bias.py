"""``logit_bias`` on both engines: added to the logits before the draw, checked at the door."""

from __future__ import annotations

import pytest

from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.testing import add_request
from tandem.core.validate import RequestError

PROMPT = [1, 40, 41, 42]


def test_a_large_bias_forces_its_token_and_a_negative_one_bans_it(shared_engine, run) -> None:
    base = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=6)
    plain = run(shared_engine, [PROMPT], base)[0].outputs[0].token_ids
    forced = run(shared_engine, [PROMPT], base.replace(logit_bias={"77": 100}))[0]
    assert forced.outputs[0].token_ids == [77] * 6
    banned = run(shared_engine, [PROMPT], base.replace(logit_bias={plain[0]: -100.0}))[0]
    assert banned.outputs[0].token_ids[0] != plain[0]
    # sampled rows and free rows in one batch: the bias touches its own row only
    hot = SamplingParams(temperature=1.0, seed=3, max_tokens=4, logit_bias={9: 100.0})
    both = run(shared_engine, [PROMPT, PROMPT], [hot, base])
    assert both[0].outputs[0].token_ids == [9] * 4
    assert both[1].outputs[0].token_ids == plain


@pytest.mark.parametrize(
    ("bias", "field", "words"),
    [
        ({"5": 100.5}, "logit_bias[5]", "[-100, 100]"),
        ({"x": 1.0}, "logit_bias", "token ids"),
        ([1, 2], "logit_bias", "dict"),
        ({5: float("nan")}, "logit_bias[5]", "finite"),
    ],
)
def test_bad_bias_is_refused_by_name(bias, field, words) -> None:
    with pytest.raises(RequestError, match=r".*") as info:
        SamplingParams(logit_bias=bias)
    assert info.value.field == field and words in str(info.value)


def test_ids_past_the_vocabulary_are_refused(shared_engine) -> None:
    with pytest.raises(RequestError) as info:
        add_request(shared_engine, "lb", PROMPT, SamplingParams(logit_bias={512: 1.0}))
    assert info.value.field == "logit_bias" and "[0, 512)" in str(info.value)
    assert not shared_engine.has_unfinished_requests()
