from __future__ import annotations

import pytest

from tandem.core.outputs.request_output import (
    FINISH_REASONS,
    CompletionOutput,
    Logprob,
    RequestMetrics,
    RequestOutput,
)


def test_completion_finished() -> None:
    running = CompletionOutput(index=0, text="hi", token_ids=[5, 6])
    assert not running.finished()
    assert running.cumulative_logprob is None and running.logprobs is None
    for reason in FINISH_REASONS:
        done = CompletionOutput(0, "hi", [5], finish_reason=reason)
        assert done.finished()


def test_stop_reason_kinds() -> None:
    by_string = CompletionOutput(0, "a", [1], finish_reason="stop", stop_reason="\n")
    by_token = CompletionOutput(0, "a", [1], finish_reason="stop", stop_reason=7)
    by_eos = CompletionOutput(0, "a", [1], finish_reason="stop", stop_reason=None)
    assert (by_string.stop_reason, by_token.stop_reason, by_eos.stop_reason) == ("\n", 7, None)


def test_bad_finish_reason() -> None:
    with pytest.raises(
        ValueError,
        match=r"finish_reason must be one of stop, length, abort, error or None, got 'eos'",
    ):
        CompletionOutput(0, "", [], finish_reason="eos")


def test_request_output_shapes() -> None:
    lp = [{5: Logprob(-0.1, rank=1, decoded_token="a"), 9: Logprob(-2.5, rank=2)}]
    out = RequestOutput(
        request_id="r1",
        prompt="x",
        prompt_token_ids=[1, 4],
        prompt_logprobs=[None, {4: Logprob(-1.0, 3, "x")}],
        outputs=[CompletionOutput(0, "a", [5], -0.1, lp, "length")],
        finished=True,
        metrics=RequestMetrics(arrival_time=1.0),
    )
    assert out.num_cached_tokens == 0
    assert out.prompt_logprobs is not None and out.prompt_logprobs[0] is None
    assert out.outputs[0].logprobs[0][5].decoded_token == "a"  # type: ignore[index]
    assert RequestOutput("r2", None, [1], None).outputs == []
    with pytest.raises(ValueError, match=r"num_cached_tokens must be >= 0, got -1"):
        RequestOutput("r3", None, [1], None, num_cached_tokens=-1)


def test_slots() -> None:
    with pytest.raises(AttributeError):
        Logprob(0.0).extra = 1  # type: ignore[attr-defined]
