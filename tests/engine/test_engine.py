"""Engine behaviour on both engines: stop conditions, seeded sampling, aborts, stats, bad input."""

from __future__ import annotations

import pytest

from tandem.core.engine.protocol import load_engine_class
from tandem.core.engine.stats import EngineStats
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.testing import add_request

PROMPTS = [[1, 40, 41, 42], [1, 300, 7, 8, 9, 10, 11], [1, 99]]


def greedy(**kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, ignore_eos=True, **kw)


def assert_idle(stats: EngineStats) -> None:
    """Nothing queued or running, and every KV block free (prefix-cached ones count as free)."""
    assert (stats.num_running, stats.num_waiting) == (0, 0), stats
    assert stats.num_free_kv_blocks == stats.num_kv_blocks > 0, stats


def test_max_tokens_gives_length(shared_engine, run) -> None:
    out = run(shared_engine, PROMPTS[:1], greedy(max_tokens=5))[0].outputs[0]
    assert len(out.token_ids) == 5 and out.finish_reason == "length" and out.stop_reason is None


def test_max_model_len_gives_length(shared_engine, run) -> None:
    prompt = [1, *range(10, 133)]  # 124 tokens of max_model_len=128: room for 4
    out = run(shared_engine, [prompt], greedy(max_tokens=None))[0].outputs[0]
    assert len(out.token_ids) == 4 and out.finish_reason == "length"


def test_stop_token_ids(shared_engine, run) -> None:
    ref = run(shared_engine, PROMPTS[:1], greedy(max_tokens=12))[0].outputs[0].token_ids
    stop = ref[4]
    k = ref.index(stop)
    params = greedy(max_tokens=12, stop_token_ids=[stop])
    out = run(shared_engine, PROMPTS[:1], params)[0].outputs[0]
    assert out.token_ids == ref[: k + 1]
    assert (out.finish_reason, out.stop_reason) == ("stop", stop)
    assert out.text == shared_engine.tokenizer.decode(ref[:k])  # the stop token's text is left out


def test_min_tokens_delays_stop_token(shared_engine, run) -> None:
    ref = run(shared_engine, PROMPTS[:1], greedy(max_tokens=12))[0].outputs[0].token_ids
    stop = ref[0]
    params = greedy(max_tokens=12, stop_token_ids=[stop], min_tokens=3)
    out = run(shared_engine, PROMPTS[:1], params)[0].outputs[0]
    assert stop not in out.token_ids[:3]
    assert out.finish_reason == "length" or len(out.token_ids) > 3


def _stop_string(text: str) -> tuple[str, int]:
    for a in range(3, len(text) - 3):
        s = text[a : a + 3]
        if "\ufffd" not in s and s.strip():
            return s, text.find(s)
    raise AssertionError(f"no usable stop string in {text!r}")


@pytest.mark.parametrize("include", [False, True])
def test_stop_string_cuts_text_and_holds_back(shared_engine, run, include: bool) -> None:
    ref = run(shared_engine, PROMPTS[1:2], greedy(max_tokens=24))[0].outputs[0]
    stop, at = _stop_string(ref.text)
    params = greedy(max_tokens=24, stop=[stop], include_stop_str_in_output=include)
    add_request(shared_engine, "s", PROMPTS[1], params)
    texts, final = [], None
    while shared_engine.has_unfinished_requests():
        for out in shared_engine.step():
            texts.append(out.outputs[0].text)
            final = out.outputs[0]
    assert (final.finish_reason, final.stop_reason) == ("stop", stop)
    assert final.text == (ref.text[: at + len(stop)] if include else ref.text[:at])
    for t in texts[:-1]:  # a streamed text never ends with part of the stop string
        assert final.text.startswith(t)
        if not include:
            assert not any(t.endswith(stop[:k]) for k in range(1, len(stop)))
    assert_idle(shared_engine.stats())  # the stop string also freed the sample's blocks


def test_seeded_sample_same_alone_and_in_batch(shared_engine, new_engine, run) -> None:
    target = SamplingParams(temperature=1.0, seed=1234, max_tokens=10, ignore_eos=True)
    alone = run(shared_engine, PROMPTS[1:2], target)[0].outputs[0].token_ids
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
    stats = eng.stats()
    assert stats.num_preemptions > 0 and stats.num_kv_blocks == 8
    assert_idle(stats)


def test_n_samples_first_matches_n1_and_differ(shared_engine, run) -> None:
    params = SamplingParams(temperature=1.0, seed=7, max_tokens=8, ignore_eos=True)
    one = run(shared_engine, PROMPTS[:1], params)[0]
    many = run(shared_engine, PROMPTS[:1], params.replace(n=3))[0]
    assert [c.index for c in many.outputs] == [0, 1, 2]
    assert many.outputs[0].token_ids == one.outputs[0].token_ids
    assert len({tuple(c.token_ids) for c in many.outputs}) > 1


@pytest.mark.slow
def test_unseeded_requests_follow_engine_seed(new_engine, run) -> None:
    params = SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True)
    a = run(new_engine(seed=3), PROMPTS, params)
    b = run(new_engine(seed=3), PROMPTS, params)
    c = run(new_engine(seed=4), PROMPTS, params)
    ids = [[o.outputs[0].token_ids for o in outs] for outs in (a, b, c)]
    assert ids[0] == ids[1] and ids[0] != ids[2]


def test_stats_follow_work_and_abort_frees(shared_engine) -> None:
    eng = shared_engine
    assert_idle(eng.stats())
    add_request(eng, "a", PROMPTS[0], greedy(max_tokens=100))
    add_request(eng, "b", PROMPTS[1], greedy(max_tokens=5))
    eng.step()
    busy = eng.stats()
    assert 1 <= busy.num_running + busy.num_waiting <= 2 and busy.num_free_kv_blocks < (
        busy.num_kv_blocks
    )
    eng.abort_request("a")
    eng.abort_request("missing")  # unknown ids are ignored
    seen = []
    while eng.has_unfinished_requests():
        seen += [o.request_id for o in eng.step()]
    assert set(seen) <= {"b"} and eng.get_num_unfinished_requests() == 0
    assert_idle(eng.stats())


def test_repeated_prefix_counts_cached_prompt_tokens(shared_engine, run, engine: str) -> None:
    prompt = [1, *range(200, 250)]  # 51 tokens: full blocks for a prefix cache to keep
    first = run(shared_engine, [prompt], greedy(max_tokens=4))[0]
    before = shared_engine.stats().num_cached_prompt_tokens
    again = run(shared_engine, [prompt], greedy(max_tokens=4))[0]
    after = shared_engine.stats()
    assert again.outputs[0].token_ids == first.outputs[0].token_ids
    assert after.num_cached_prompt_tokens - before == again.num_cached_tokens
    # v1 serves whole blocks of the prompt from its prefix cache; v0 has no prefix cache
    assert (again.num_cached_tokens > 0) is (engine == "v1")
    assert_idle(after)


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
        (7, [1, 2], None, TypeError, "request_id"),
    ],
)
def test_bad_input_is_rejected_and_engine_still_serves(
    shared_engine, run, rid, prompt, params, exc, match
) -> None:
    add_request(shared_engine, "dup", [1, 2], greedy(max_tokens=1))
    with pytest.raises(exc, match=match):
        add_request(shared_engine, rid, prompt, params)
    assert shared_engine.get_num_unfinished_requests() == 1
    out = run(shared_engine, PROMPTS[:1], greedy(max_tokens=3))
    assert len(out[0].outputs[0].token_ids) == 3
    while shared_engine.has_unfinished_requests():  # "dup" finishes too
        shared_engine.step()


def test_cache_too_small_for_one_sequence(new_engine) -> None:
    with pytest.raises(ValueError, match="needs 8"):
        new_engine(max_model_len=32, block_size=4, num_kv_blocks=7)


def test_shutdown_is_idempotent(new_engine) -> None:
    eng = new_engine()
    add_request(eng, "a", PROMPTS[0], greedy(max_tokens=4))
    eng.shutdown()
    eng.shutdown()
    assert not eng.has_unfinished_requests()
    with pytest.raises(RuntimeError, match="shut down"):
        add_request(eng, "b", PROMPTS[0])
    with pytest.raises(RuntimeError, match="shut down"):
        eng.stats()


def test_from_engine_args_type_check(engine: str, tiny_model) -> None:
    cls = load_engine_class(engine)
    with pytest.raises(TypeError, match="engine_args must be an EngineArgs"):
        cls.from_engine_args({"model": str(tiny_model)})
