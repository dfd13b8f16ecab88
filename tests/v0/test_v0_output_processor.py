"""Stop rules on hand-fed tokens (EOS cannot be forced out of a random tiny model)."""

from __future__ import annotations

import pytest

from tandem.core.inputs.processor import InputProcessor, OutputKind
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.text.tokenizer import load_tokenizer
from tandem.v0.output_processor import OutputProcessor
from tandem.v0.sampler import SampleResult
from tandem.v0.sequence import Request, Sequence, SequenceStatus

EOS = 2


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return load_tokenizer(tiny_model)


def feed(
    tokenizer,
    params: SamplingParams,
    tokens: list[int],
    max_tokens: int = 10,
    max_model_len: int = 64,
) -> tuple[Sequence, list[bool]]:
    inputs = InputProcessor(tokenizer, tokenizer.vocab_size, max_model_len, [EOS])
    request = inputs.process("r", [1, 50], params.replace(max_tokens=max_tokens))
    proc = OutputProcessor(tokenizer)
    seq = Sequence(0, "r", 0, [1, 50], request.stop.max_tokens, seed=0)
    req = Request(request, [seq])
    proc.start(req)
    done = []
    for t in tokens:
        done.append(proc.append(req, seq, SampleResult(t, -0.5, 1)))
        if done[-1]:
            break
    return seq, done


def test_eos_stops_with_no_stop_reason(tokenizer) -> None:
    seq, done = feed(tokenizer, SamplingParams(), [60, 61, EOS])
    assert done == [False, False, True]
    assert (seq.finish_reason, seq.stop_reason) == ("stop", None)
    assert seq.output_token_ids == [60, 61, EOS]
    assert seq.text.shown == tokenizer.decode([60, 61])
    assert seq.cumulative_logprob == pytest.approx(-1.5)


def test_ignore_eos_and_min_tokens_keep_going(tokenizer) -> None:
    _, done = feed(tokenizer, SamplingParams(ignore_eos=True), [EOS, 60])
    assert done == [False, False]
    _, done = feed(tokenizer, SamplingParams(min_tokens=3), [60, EOS, EOS, EOS])
    assert done == [False, False, True]


def test_length_and_max_model_len(tokenizer) -> None:
    seq, done = feed(tokenizer, SamplingParams(), [60, 61, 62], max_tokens=3)
    assert done[-1] and seq.finish_reason == "length"
    seq, done = feed(tokenizer, SamplingParams(), [60, 61], max_model_len=4)
    assert done == [False, True] and seq.finish_reason == "length"


def test_stop_token_text_included_on_request(tokenizer) -> None:
    seq, _ = feed(tokenizer, SamplingParams(stop_token_ids=[61]), [60, 61])
    assert (seq.finish_reason, seq.stop_reason, seq.text.shown) == (
        "stop",
        61,
        tokenizer.decode([60]),
    )
    seq, _ = feed(
        tokenizer, SamplingParams(stop_token_ids=[61], include_stop_str_in_output=True), [60, 61]
    )
    assert seq.text.shown == tokenizer.decode([60, 61])


def test_stop_string_across_tokens(tokenizer) -> None:
    ids = tokenizer.encode("the cat sat on the mat", add_special_tokens=False)
    seq, done = feed(tokenizer, SamplingParams(stop=["on the"]), ids, max_tokens=len(ids))
    assert any(done)
    assert (seq.finish_reason, seq.stop_reason) == ("stop", "on the")
    assert seq.text.shown == "the cat sat "


def size(out) -> int:
    """Characters, ids and logprob entries an output carries."""
    return sum(len(c.text) + len(c.token_ids) + len(c.logprobs or ()) for c in out.outputs)


def stream(tokenizer, tokens: list[int], kind: OutputKind, **params) -> list:
    """The outputs of one request fed ``tokens``, as the engine makes them each step."""
    inputs = InputProcessor(tokenizer, tokenizer.vocab_size, 4096, [EOS])
    sp = SamplingParams(max_tokens=len(tokens), ignore_eos=True, logprobs=0, **params)
    request = inputs.process("r", [1, 50], sp, output_kind=kind)
    proc, seq = OutputProcessor(tokenizer), Sequence(0, "r", 0, [1, 50], len(tokens), seed=0)
    req = Request(request, [seq])
    proc.start(req)
    outs = []
    for t in tokens:
        if proc.append(req, seq, SampleResult(t, -0.5, 1, [(t, -0.5, 1)])):
            seq.status = SequenceStatus.FINISHED  # what the engine's scheduler does
        out = proc.make_output(req)
        if out is not None:
            outs.append(out)
        if seq.is_finished:
            return outs
    raise AssertionError("the sample did not finish")


def test_a_long_delta_stream_costs_linear_work(tokenizer) -> None:
    """2,000 tokens: the delta outputs carry each character, id and logprob once; the
    cumulative ones carry the square of it; final only gives one output."""
    toks = [4 + (i * 37) % (tokenizer.vocab_size - 4) for i in range(2000)]
    deltas = stream(tokenizer, toks, OutputKind.DELTA, stop=["zzq"])
    cumulative = stream(tokenizer, toks, OutputKind.CUMULATIVE, stop=["zzq"])
    (final,) = stream(tokenizer, toks, OutputKind.FINAL_ONLY, stop=["zzq"])
    whole = cumulative[-1].outputs[0]
    assert "".join(d.outputs[0].text for d in deltas) == whole.text == final.outputs[0].text
    assert [t for d in deltas for t in d.outputs[0].token_ids] == whole.token_ids == toks
    n = size(cumulative[-1])
    assert sum(size(d) for d in deltas) == n == size(final)
    assert sum(size(o) for o in cumulative) > 500 * n
