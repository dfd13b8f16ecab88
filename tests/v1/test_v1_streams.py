"""Result deltas: only new tokens travel, and the client rebuilds whole outputs."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from v1_support import engine_request

from tandem.core.config import EngineArgs
from tandem.core.inputs import InputProcessor
from tandem.core.sampling_params import SamplingParams
from tandem.core.tokenizer import load_tokenizer
from tandem.v1.frontend.output_processor import OutputProcessor
from tandem.v1.frontend.streams import RequestStream
from tandem.v1.proc import messages as m


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return load_tokenizer(tiny_model)


@pytest.fixture(scope="module")
def processor(tiny_model, tokenizer):
    return InputProcessor.for_config(EngineArgs(model=str(tiny_model)).create_config(), tokenizer)


def stream(processor, prompt, outputs, **params):
    """Run ``outputs`` (one CoreOutput list per step) through both ends; every Result
    sent and every step's RequestOutput."""
    request = processor.process("r", prompt, SamplingParams(**params))
    detok, client = OutputProcessor(processor.tokenizer), RequestStream.start(request)
    detok.add(m.AddRequest(request))
    sent, seen = [], []
    for step in outputs:
        results, _ = detok.process(step)
        for res in m.to_client.decode(m.encode(m.Results(results))).results:
            sent.append(res)
            client.apply(res)
        seen.append(client.output())
    return sent, seen


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_deltas_rebuild_what_the_whole_text_decodes_to(processor, tokenizer, data) -> None:
    vocab = len(tokenizer)
    prompt = data.draw(st.lists(st.integers(4, vocab - 1), min_size=1, max_size=8))
    toks = data.draw(st.lists(st.integers(4, vocab - 1), min_size=1, max_size=12))
    steps = [
        [m.CoreOutput("r", 0, [t], [-0.5], None, None, "length" if i == len(toks) - 1 else None)]
        for i, t in enumerate(toks)
    ]
    sent, seen = stream(processor, prompt, steps, max_tokens=len(toks), temperature=0.0)
    final = seen[-1]
    assert final.finished and final.prompt_token_ids == prompt
    assert final.outputs[0].token_ids == toks
    assert final.outputs[0].text == tokenizer.decode(toks)
    assert final.outputs[0].cumulative_logprob == pytest.approx(-0.5 * len(toks))
    assert all(len(res.outputs[0].new_token_ids) == 1 for res in sent)  # only the new one
    for before, after in itertools.pairwise(seen):  # earlier outputs are not changed later
        assert len(before.outputs[0].token_ids) + 1 == len(after.outputs[0].token_ids)


def test_stop_string_cut_arrives_as_a_delta(processor, tokenizer) -> None:
    ids = tokenizer.encode("hello world", add_special_tokens=False)
    steps = [[m.CoreOutput("r", 0, [t], [-0.1])] for t in ids]
    _, seen = stream(processor, [5], steps, stop=["wor"], temperature=0.0)
    last = next(o for o in seen if o.finished)
    assert last.outputs[0].finish_reason == "stop" and last.outputs[0].stop_reason == "wor"
    assert last.outputs[0].text == tokenizer.decode(ids).split("wor")[0]


def test_text_from_rewrites_the_tail() -> None:
    client = RequestStream.start(engine_request("r", [1]))
    client.apply(
        m.Result("r", None, [m.Completion(0, 0, "abcd", [1, 2], -1.0, None, None, None)], False, 0)
    )
    client.apply(
        m.Result("r", None, [m.Completion(0, 2, "X", [3], -2.0, None, None, None)], False, 0)
    )
    out = client.output()
    assert out.outputs[0].text == "abX" and out.outputs[0].token_ids == [1, 2, 3]
    assert out.outputs[0].cumulative_logprob == -2.0
