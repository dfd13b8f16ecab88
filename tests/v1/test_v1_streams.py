"""Result deltas: only new tokens travel; the client rebuilds whole outputs only for a
cumulative request (output kinds on engine v1's detokenizer and client ends)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.core.config.engine_args import EngineArgs
from tandem.core.inputs.processor import InputProcessor, OutputKind
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.text.tokenizer import load_tokenizer
from tandem.v1 import messages as m
from tandem.v1.detokenizer.processor import OutputProcessor
from tandem.v1.frontend.streams import RequestStream


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return load_tokenizer(tiny_model)


@pytest.fixture(scope="module")
def processor(tiny_model, tokenizer):
    return InputProcessor.for_config(EngineArgs(model=str(tiny_model)).create_config(), tokenizer)


def stream(processor, prompt, outputs, kind=OutputKind.CUMULATIVE, **params):
    """Run ``outputs`` (one CoreOutput list per step) through both ends; every Result
    sent and every RequestOutput the client made."""
    request = processor.process("r", prompt, SamplingParams(**params), output_kind=kind)
    detok, client = OutputProcessor(processor.tokenizer), RequestStream.start(request)
    assert detok.add(m.AddRequest(request)) is None
    sent, seen = [], []
    for step in outputs:
        results, _ = detok.process(step)
        for res in m.to_client.decode(m.encode(m.Results(results))).results:
            sent.append(res)
            out = client.apply(res)
            if out is not None:
                seen.append(out)
        if kind is OutputKind.CUMULATIVE and results:
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


def tokens_of(text: str, tokenizer) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def concat(outs):
    """The DELTA outputs of one request joined per sample: {index: (text, ids, logprobs)},
    and the prompt logprobs."""
    joined: dict[int, tuple[str, list, list]] = {}
    plp: list = []
    for out in outs:
        plp += out.prompt_logprobs or []
        for c in out.outputs:
            text, ids, lps = joined.get(c.index, ("", [], []))
            joined[c.index] = (text + c.text, ids + c.token_ids, lps + (c.logprobs or []))
    return joined, plp


def n_steps(tokenizer, texts: list[str], logprobs: bool = False):
    """One CoreOutput per sample per step (samples of unequal lengths), with logprobs and,
    in the first step, prompt logprobs."""
    ids = [tokens_of(t, tokenizer) for t in texts]
    steps = []
    for k in range(max(len(x) for x in ids)):
        step = []
        for i, x in enumerate(ids):
            if k < len(x):
                last = "length" if k == len(x) - 1 else None
                tops = [[(x[k], -0.25, 2), (3, -0.1, 1)]] if logprobs else None
                plp = [[], [(9, -1.5, 4)]] if k == 0 and i == 0 else None
                step.append(m.CoreOutput("r", i, [x[k]], [-0.25], tops, plp, last))
        steps.append(step)
    return steps


@pytest.mark.parametrize("stop", [None, ["wor"], ["o w"]])
def test_delta_outputs_join_to_the_cumulative_output(processor, tokenizer, stop) -> None:
    texts = ["hello world, and more", "well, hello there you"]
    steps = n_steps(tokenizer, texts, logprobs=True)
    params = dict(n=2, temperature=1.0, logprobs=1, prompt_logprobs=1, stop=stop)
    _, cumul = stream(processor, [5, 6], steps, **params)
    _, deltas = stream(processor, [5, 6], steps, kind=OutputKind.DELTA, **params)
    final = cumul[-1]
    assert final.finished and deltas[-1].finished and not any(d.finished for d in deltas[:-1])
    joined, plp = concat(deltas)
    for c in final.outputs:
        assert joined[c.index] == (c.text, c.token_ids, c.logprobs)
        last = [o for d in deltas for o in d.outputs if o.index == c.index][-1]
        assert (last.finish_reason, last.stop_reason) == (c.finish_reason, c.stop_reason)
        assert last.cumulative_logprob == c.cumulative_logprob
    assert plp == final.prompt_logprobs and len(plp) == 2
    for d in deltas:  # a delta holds the samples that changed, each new token once
        assert all(len(c.token_ids) <= 1 for c in d.outputs) and d.outputs


def test_stop_string_text_held_back_arrives_in_the_deltas(processor, tokenizer) -> None:
    steps = n_steps(tokenizer, ["say hello world now"])
    _, deltas = stream(processor, [5], steps, kind=OutputKind.DELTA, stop=["lo w"])
    # a delta cannot be taken back: had "lo" been shown before " w" came, it would be here
    joined = "".join(c.text for d in deltas for c in d.outputs)
    assert joined == tokenizer.decode(tokens_of("say hello world now", tokenizer)).split("lo w")[0]
    assert (deltas[-1].outputs[0].finish_reason, deltas[-1].outputs[0].stop_reason) == (
        "stop",
        "lo w",
    )


def test_final_only_gives_one_output_with_everything(processor, tokenizer) -> None:
    steps = n_steps(tokenizer, ["hello world", "hi"], logprobs=True)
    params = dict(n=2, temperature=1.0, logprobs=1, prompt_logprobs=1)
    sent, finals = stream(processor, [5], steps, kind=OutputKind.FINAL_ONLY, **params)
    _, cumul = stream(processor, [5], steps, **params)
    assert len(sent) == 1 and len(finals) == 1  # one Result crossed, one output made
    (final,), whole = finals, cumul[-1]
    assert final.finished and final.prompt_logprobs == whole.prompt_logprobs
    assert [(c.text, c.token_ids, c.logprobs) for c in final.outputs] == [
        (c.text, c.token_ids, c.logprobs) for c in whole.outputs
    ]


def size(out) -> int:
    """Characters, ids and logprob entries an output carries."""
    return sum(len(c.text) + len(c.token_ids) + len(c.logprobs or ()) for c in out.outputs)


def test_a_long_delta_stream_costs_linear_work(processor, tokenizer) -> None:
    """2,000 tokens streamed: what crosses to the client and what the client builds grow
    with the tokens, not with their square (the cumulative kind is the square)."""
    vocab = len(tokenizer)
    toks = [4 + (i * 37) % (vocab - 4) for i in range(2000)]
    steps = [
        [m.CoreOutput("r", 0, [t], [-0.5], [[(t, -0.5, 1)]], None, "length" if i == 1999 else None)]
        for i, t in enumerate(toks)
    ]
    sent, deltas = stream(processor, [5], steps, kind=OutputKind.DELTA, logprobs=0)
    _, cumul = stream(processor, [5], steps, logprobs=0)
    n = size(cumul[-1])  # the whole output: text + 2000 ids + 2000 entries
    assert sum(size(d) for d in deltas) == n
    crossed = sum(
        len(c.text) + len(c.new_token_ids) + len(c.new_logprobs) for r in sent for c in r.outputs
    )
    assert crossed == n
    assert sum(size(o) for o in cumul) > 500 * n  # the cumulative kind: quadratic by nature


def test_late_outputs_of_a_stopped_sample_never_reach_a_reused_id(processor, tokenizer) -> None:
    """The core runs ahead of the detokenizer: outputs of a sample a stop string ended (or
    the client aborted) can arrive after a new request took its id."""
    ids = tokens_of("hello world", tokenizer)
    for how in ("stop string", "abort"):
        detok = OutputProcessor(tokenizer)
        old = processor.process("r", [5], SamplingParams(stop=["wor"], max_tokens=20))
        detok.add(m.AddRequest(old))
        if how == "abort":
            detok.abort(["r"])
        else:
            stopped = [detok.process([m.CoreOutput("r", 0, [t], [-0.1])])[1] for t in ids]
            assert ("r", 0) in [s for step in stopped for s in step]
        new = processor.process(
            "r", [6], SamplingParams(max_tokens=3), output_kind=OutputKind.DELTA
        )
        detok.add(m.AddRequest(new))
        late = [
            m.CoreOutput("r", 0, [ids[0]], [-0.1]),
            m.CoreOutput("r", 0, [], [], None, None, "abort"),
        ]
        assert detok.process(late) == ([], [])  # the old sample's last words, dropped
        (res,), _ = detok.process([m.CoreOutput("r", 0, [ids[1]], [-0.2])])
        assert res.outputs[0].new_token_ids == [ids[1]] and not res.finished
