"""The core process holds back outputs no one reads before their sample ends."""

from __future__ import annotations

from v1_support import INPUTS

from tandem.core.inputs.processor import OutputKind
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.v1 import messages as m
from tandem.v1.proc.hold import OutputHold


def _add(rid: str, kind: OutputKind, n: int = 1, **params) -> m.AddRequest:
    return m.AddRequest(
        INPUTS.process(rid, [1, 2], SamplingParams(n=n, **params), None, False, kind)
    )


def _out(rid: str, index: int, tok: int, finish: str | None = None) -> m.CoreOutput:
    return m.CoreOutput(rid, index, [tok], [-0.5 * tok], finish_reason=finish)


def test_final_only_samples_go_out_whole_when_they_finish() -> None:
    hold = OutputHold()
    hold.track(_add("q", OutputKind.FINAL_ONLY, n=2))
    assert hold.pass_on([_out("q", 0, 1), _out("q", 1, 2)]) == []
    assert hold.pass_on([_out("q", 0, 3, "length"), _out("q", 1, 4)]) == [
        m.CoreOutput("q", 0, [1, 3], [-0.5, -1.5], finish_reason="length")
    ]
    assert len(hold) == 1
    done = hold.pass_on([_out("q", 1, 5, "abort")])
    assert done == [m.CoreOutput("q", 1, [2, 4, 5], [-1.0, -2.0, -2.5], finish_reason="abort")]
    assert len(hold) == 0
    assert hold.pass_on([_out("q", 0, 9)]) == [_out("q", 0, 9)]  # the id is free again


def test_streamed_and_stop_string_requests_pass_at_once() -> None:
    hold = OutputHold()
    hold.track(_add("d", OutputKind.DELTA))
    hold.track(_add("c", OutputKind.CUMULATIVE))
    hold.track(_add("s", OutputKind.FINAL_ONLY, stop=["."]))  # the detokenizer checks it
    outs = [_out("d", 0, 1), _out("c", 0, 2), _out("s", 0, 3)]
    assert hold.pass_on(outs) == outs


def test_a_prompt_prefilled_in_chunks_keeps_every_chunks_prompt_logprobs() -> None:
    hold = OutputHold()
    hold.track(_add("p", OutputKind.FINAL_ONLY, prompt_logprobs=1))
    first = m.CoreOutput("p", 0, [], [], prompt_logprobs=[[(7, -1.0, 1)]])
    last = m.CoreOutput(
        "p", 0, [3], [-0.1], prompt_logprobs=[[(8, -2.0, 1)]], finish_reason="length"
    )
    assert hold.pass_on([first]) == []
    (done,) = hold.pass_on([last])
    assert done.prompt_logprobs == [[(7, -1.0, 1)], [(8, -2.0, 1)]]
    assert done.new_token_ids == [3]
