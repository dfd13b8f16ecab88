"""Output kinds on both engines: cumulative, delta (streaming) and final only."""

from __future__ import annotations

from typing import Any

import pytest

from tandem.core.inputs.processor import OutputKind
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.outputs.request_output import RequestOutput
from tandem.core.testing import inputs_of

pytestmark = pytest.mark.engines("v0", "v1")

KINDS = (OutputKind.CUMULATIVE, OutputKind.DELTA, OutputKind.FINAL_ONLY)


def stream(engine: Any, prompt: list[int], params: SamplingParams, kind: OutputKind) -> list:
    """Every output of one request of ``kind``, in order."""
    rid = f"k{int(kind)}"
    engine.add(inputs_of(engine).process(rid, prompt, params, output_kind=kind))
    outs: list[RequestOutput] = []
    while engine.has_unfinished_requests():
        outs += [o for o in engine.step() if o.request_id == rid]
    assert outs and outs[-1].finished and not any(o.finished for o in outs[:-1])
    return outs


def joined(outs: list[RequestOutput]) -> dict[int, tuple[str, list, list, Any]]:
    """DELTA outputs joined per sample: text, ids, logprobs, last (finish, stop) reasons."""
    out: dict[int, tuple[str, list, list, Any]] = {}
    for o in outs:
        for c in o.outputs:
            text, ids, lps, _ = out.get(c.index, ("", [], [], None))
            reasons = (c.finish_reason, c.stop_reason, c.cumulative_logprob)
            out[c.index] = (text + c.text, ids + c.token_ids, lps + (c.logprobs or []), reasons)
    return out


def whole(o: RequestOutput) -> dict[int, tuple[str, list, list, Any]]:
    return {
        c.index: (
            c.text,
            c.token_ids,
            c.logprobs or [],
            (c.finish_reason, c.stop_reason, c.cumulative_logprob),
        )
        for c in o.outputs
    }


def stop_string(engine: Any, prompt: list[int]) -> str:
    """A stop string from the middle of what greedy decoding writes after ``prompt``."""
    params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    text = stream(engine, prompt, params, OutputKind.FINAL_ONLY)[0].outputs[0].text
    for a in range(4, len(text) - 3):
        s = text[a : a + 3]
        if "\ufffd" not in s and s.strip() and text.find(s) == a:
            return s
    raise AssertionError(f"no usable stop string in {text!r}")


@pytest.mark.parametrize("case", ["n3_logprobs", "stop_string"])
def test_deltas_join_to_the_cumulative_output(shared_engine, case: str) -> None:
    eng, prompt = shared_engine, [1, 300, 7, 8, 9]
    if case == "n3_logprobs":
        params = SamplingParams(
            n=3, temperature=1.0, seed=5, max_tokens=12, logprobs=2, prompt_logprobs=1
        )
    else:
        stop = stop_string(eng, prompt)
        params = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True, stop=[stop])
    cumulative = stream(eng, prompt, params, OutputKind.CUMULATIVE)
    deltas = stream(eng, prompt, params, OutputKind.DELTA)
    final = cumulative[-1]
    assert joined(deltas) == whole(final)
    plp = [e for d in deltas for e in (d.prompt_logprobs or [])]
    assert plp == (final.prompt_logprobs or [])
    if case == "stop_string":  # a delta is never taken back: text shown past the cut
        assert final.outputs[0].finish_reason == "stop"  # would have broken the join
    for d in deltas:  # a delta holds the samples that changed, each new token once
        assert d.outputs and all(len(c.token_ids) <= 1 for c in d.outputs)


def test_final_only_gives_one_whole_output(shared_engine) -> None:
    params = SamplingParams(n=2, temperature=1.0, seed=3, max_tokens=10, logprobs=1)
    cumulative = stream(shared_engine, [1, 40, 41], params, OutputKind.CUMULATIVE)
    (final,) = stream(shared_engine, [1, 40, 41], params, OutputKind.FINAL_ONLY)
    assert whole(final) == whole(cumulative[-1])


def size(o: RequestOutput) -> int:
    """Characters, ids and logprob entries one output carries."""
    return sum(len(c.text) + len(c.token_ids) + len(c.logprobs or ()) for c in o.outputs)


def test_a_stream_carries_each_piece_once(shared_engine) -> None:
    """400 tokens streamed (4 samples of 100): the delta outputs carry each character, id
    and logprob once, so their total is the final output's size, not its square (the
    2,000-token counts of each engine's output layer are in tests/v0 and tests/v1)."""
    params = SamplingParams(n=4, temperature=1.0, seed=9, max_tokens=100, logprobs=0)
    deltas = stream(shared_engine, [1, 40], params.replace(ignore_eos=True), OutputKind.DELTA)
    pieces = joined(deltas).values()
    assert sum(len(ids) for _, ids, _, _ in pieces) == 400
    assert sum(size(d) for d in deltas) == sum(len(t) + len(i) + len(lp) for t, i, lp, _ in pieces)
