"""Engine v0 behaviour: stop conditions, seeded sampling, aborts, bad input, injection."""

from __future__ import annotations

import pytest
import torch

from tandem.core.sampling_params import SamplingParams
from tandem.v0.sampler import Sampler

PROMPTS = [[1, 40, 41, 42], [1, 300, 7, 8, 9, 10, 11], [1, 99]]


def greedy(**kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, ignore_eos=True, **kw)


def test_max_tokens_gives_length(engine, run) -> None:
    out = run(engine, PROMPTS[:1], greedy(max_tokens=5))[0].outputs[0]
    assert len(out.token_ids) == 5 and out.finish_reason == "length" and out.stop_reason is None


def test_max_model_len_gives_length(new_engine, run) -> None:
    eng = new_engine(max_model_len=32)
    prompt = [1, *range(10, 37)]  # 28 tokens: room for 4
    out = run(eng, [prompt], greedy(max_tokens=None))[0].outputs[0]
    assert len(out.token_ids) == 4 and out.finish_reason == "length"


def test_stop_token_ids(engine, run) -> None:
    ref = run(engine, PROMPTS[:1], greedy(max_tokens=12))[0].outputs[0].token_ids
    stop = ref[4]
    k = ref.index(stop)
    out = run(engine, PROMPTS[:1], greedy(max_tokens=12, stop_token_ids=[stop]))[0].outputs[0]
    assert out.token_ids == ref[: k + 1]
    assert (out.finish_reason, out.stop_reason) == ("stop", stop)
    assert out.text == engine.tokenizer.decode(ref[:k])  # the stop token's text is left out


def test_min_tokens_delays_stop_token(engine, run) -> None:
    ref = run(engine, PROMPTS[:1], greedy(max_tokens=12))[0].outputs[0].token_ids
    stop = ref[0]
    out = run(engine, PROMPTS[:1], greedy(max_tokens=12, stop_token_ids=[stop], min_tokens=3))[
        0
    ].outputs[0]
    assert stop not in out.token_ids[:3]
    assert out.finish_reason == "length" or len(out.token_ids) > 3


def _stop_string(text: str) -> tuple[str, int]:
    for a in range(3, len(text) - 3):
        s = text[a : a + 3]
        if "\ufffd" not in s and s.strip():
            return s, text.find(s)
    raise AssertionError(f"no usable stop string in {text!r}")


@pytest.mark.parametrize("include", [False, True])
def test_stop_string_cuts_text_and_holds_back(engine, run, include: bool) -> None:
    ref = run(engine, PROMPTS[1:2], greedy(max_tokens=24))[0].outputs[0]
    stop, at = _stop_string(ref.text)
    params = greedy(max_tokens=24, stop=[stop], include_stop_str_in_output=include)
    engine.add_request("s", PROMPTS[1], params)
    texts, final = [], None
    while engine.has_unfinished_requests():
        for out in engine.step():
            texts.append(out.outputs[0].text)
            final = out.outputs[0]
    assert (final.finish_reason, final.stop_reason) == ("stop", stop)
    assert final.text == (ref.text[: at + len(stop)] if include else ref.text[:at])
    for t in texts[:-1]:  # a streamed text never ends with part of the stop string
        assert final.text.startswith(t)
        if not include:
            assert not any(t.endswith(stop[:k]) for k in range(1, len(stop)))


def test_seeded_sample_same_alone_and_in_batch(new_engine, run) -> None:
    target = SamplingParams(temperature=1.0, seed=1234, max_tokens=10, ignore_eos=True)
    alone = run(new_engine(), PROMPTS[1:2], target)[0].outputs[0].token_ids
    others = [
        SamplingParams(temperature=0.7, max_tokens=20),
        greedy(max_tokens=3),
        SamplingParams(temperature=1.3, seed=5, top_k=20, max_tokens=20),
    ]
    # a tight KV cache also preempts and recomputes along the way
    eng = new_engine(max_model_len=32, block_size=4, num_kv_blocks=8)
    outs = run(
        eng,
        [PROMPTS[0], PROMPTS[2], PROMPTS[1], PROMPTS[0]],
        [others[0], others[1], target, others[2]],
    )
    assert outs[2].outputs[0].token_ids == alone
    assert eng.scheduler.num_preemptions > 0


def test_n_samples_first_matches_n1_and_differ(engine, run) -> None:
    one = run(
        engine, PROMPTS[:1], SamplingParams(temperature=1.0, seed=7, max_tokens=8, ignore_eos=True)
    )[0]
    many = run(
        engine,
        PROMPTS[:1],
        SamplingParams(n=3, temperature=1.0, seed=7, max_tokens=8, ignore_eos=True),
    )[0]
    assert [c.index for c in many.outputs] == [0, 1, 2]
    assert many.outputs[0].token_ids == one.outputs[0].token_ids
    assert len({tuple(c.token_ids) for c in many.outputs}) > 1


def test_unseeded_requests_follow_engine_seed(new_engine, run) -> None:
    params = SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True)
    a = run(new_engine(seed=3), PROMPTS, params)
    b = run(new_engine(seed=3), PROMPTS, params)
    c = run(new_engine(seed=4), PROMPTS, params)
    ids = [[o.outputs[0].token_ids for o in outs] for outs in (a, b, c)]
    assert ids[0] == ids[1] and ids[0] != ids[2]


def test_abort_frees_and_others_finish(engine) -> None:
    engine.add_request("a", PROMPTS[0], greedy(max_tokens=20))
    engine.add_request("b", PROMPTS[1], greedy(max_tokens=5))
    engine.step()
    engine.abort_request("a")
    engine.abort_request("missing")  # unknown ids are ignored
    seen = []
    while engine.has_unfinished_requests():
        seen += [o.request_id for o in engine.step()]
    assert set(seen) == {"b"}
    bm = engine.scheduler.block_manager
    assert bm.num_free_blocks == bm.num_blocks


@pytest.mark.parametrize(
    ("rid", "prompt", "params", "exc", "match"),
    [
        ("x", "", None, ValueError, "empty"),
        ("x", [], None, ValueError, "empty"),
        ("x", [1, 99999], None, ValueError, "outside the vocabulary"),
        ("x", [1, -1], None, ValueError, "outside the vocabulary"),
        ("x", [1, "a"], None, TypeError, "token ids must be ints"),
        ("x", 42, None, TypeError, "prompt must be a str or a list"),
        ("x", [1] * 128, None, ValueError, "max_model_len=128"),
        ("x", [1, 2], {"temperature": 0}, TypeError, "params must be a SamplingParams"),
        ("", [1, 2], None, TypeError, "request_id"),
        ("dup", [1, 2], None, ValueError, "already in use"),
    ],
)
def test_bad_input_is_rejected_and_engine_still_serves(
    engine, run, rid, prompt, params, exc, match
) -> None:
    engine.add_request("dup", [1, 2], greedy(max_tokens=1))
    with pytest.raises(exc, match=match):
        engine.add_request(rid, prompt, params)
    assert engine.get_num_unfinished_requests() == 1
    out = run(engine, PROMPTS[:1], greedy(max_tokens=3))
    assert len(out[0].outputs[0].token_ids) == 3


def test_cache_too_small_for_one_sequence(new_engine) -> None:
    with pytest.raises(ValueError, match="needs 8"):
        new_engine(max_model_len=32, block_size=4, num_kv_blocks=7)


class CountingSampler(Sampler):
    def __init__(self) -> None:
        self.rows = 0

    def __call__(self, logits: torch.Tensor, rows):
        self.rows += len(rows)
        return super().__call__(logits, rows)


def test_sampler_is_injected(tiny_llama, run) -> None:
    from tandem.core.config import EngineArgs
    from tandem.v0 import LLMEngine

    sampler = CountingSampler()
    eng = LLMEngine.from_engine_args(
        EngineArgs(model=str(tiny_llama), max_model_len=64), sampler=sampler
    )
    try:
        run(eng, PROMPTS[:2], greedy(max_tokens=4))
        assert eng.runner.sampler is sampler and sampler.rows == 8
    finally:
        eng.shutdown()


def test_shutdown_is_idempotent(new_engine) -> None:
    eng = new_engine()
    eng.add_request("a", PROMPTS[0], greedy(max_tokens=4))
    eng.shutdown()
    eng.shutdown()
    assert not eng.has_unfinished_requests()
    with pytest.raises(RuntimeError, match="shut down"):
        eng.add_request("b", PROMPTS[0])


def test_from_engine_args_type_check() -> None:
    from tandem.v0 import LLMEngine

    with pytest.raises(TypeError, match="engine_args must be an EngineArgs"):
        LLMEngine.from_engine_args({"model": "x"})
