"""Speculative decoding on engine v1: the scheduler's side (drafts within budget and
blocks, rollback, stops inside an accepted list) and the engine's output, which must be
the engine's own output without speculation, token for token (greedy and seeded)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from v1_support import sample

from tandem.core.inputs.processor import OutputKind
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.testing import add_request, inputs_of, run_to_completion
from tandem.v1 import LLMEngine
from tandem.v1.core.kv_cache_manager import KVCacheManager
from tandem.v1.core.scheduler import Scheduler
from tandem.v1.core.step import StepOutput

NGRAM = {"method": "ngram", "num_speculative_tokens": 4}
A = 68  # the tiny tokenizer's "a"


def step(s: Scheduler, sampled: dict[str, list[int]], drafts: dict[str, list[int]]) -> Any:
    """Schedule a step and retire it as if the worker drew ``sampled``."""
    out = s.schedule()
    lps = {k: [-0.5] * len(v) for k, v in sampled.items()}
    return out, s.update_from_output(out, StepOutput(sampled, lps, drafts=drafts))


def test_a_verify_step_rolls_back_over_rejected_drafts() -> None:
    kv = KVCacheManager(32, 2, True)
    s = Scheduler(kv, 8, 64, True, spec_k=4)
    a = sample("a", [1, 2, 3, 4, 5, 6], max_tokens=20, ignore_eos=True)
    s.add(a)
    out, _ = step(s, {"a": [7]}, {"a": [8, 9, 10, 11]})
    assert out.scheduled[0].draft_room == 20
    # drafts 8, 9 kept, 10 rejected: 12 drawn at its position, the last of a block
    out, outs = step(s, {"a": [8, 9, 12]}, {"a": [13]})
    row = out.scheduled[0]
    assert (row.start, row.num_tokens, row.spec_tokens) == (6, 5, [8, 9, 10, 11])
    assert len(row.block_table) == 6  # room for 11 tokens
    assert outs[0].new_token_ids == [8, 9, 12]
    assert a.output_token_ids == [7, 8, 9, 12] and a.num_computed_tokens == 9
    assert len(kv.table("a")) == 5  # the block only draft 11 needed went back
    assert a.spec_tokens == [13]
    # only blocks whose K/V is of accepted tokens joined the prefix cache (not 9, 12)
    assert sorted(b.tokens for b in kv.cached.values()) == [(1, 2), (3, 4), (5, 6), (7, 8)]
    assert (s.verified.num_draft_tokens, s.verified.num_accepted_tokens) == (4, 2)
    kv.check()


def test_drafts_are_cut_to_the_budget_and_dropped_rather_than_preempt() -> None:
    s = Scheduler(KVCacheManager(32, 4, False), 8, 3, True, spec_k=4)
    a = sample("a", [1, 2], max_tokens=20)
    s.add(a)
    step(s, {"a": [7]}, {"a": [8, 9, 10, 11]})
    out, _ = step(s, {"a": [8, 9, 5]}, {})
    assert out.scheduled[0].spec_tokens == [8, 9]  # 1 + 2 drafts fill the budget of 3

    kv = KVCacheManager(2, 2, False)
    s = Scheduler(kv, 8, 64, True, spec_k=4)
    b, c = sample("b", [1]), sample("c", [2])
    s.add(b)
    s.add(c)
    step(s, {"b": [3], "c": [4]}, {"b": [5, 6, 7], "c": [5]})
    out, _ = step(s, {"b": [5], "c": [6]}, {})  # b's drafts need blocks c holds
    assert [r.spec_tokens for r in out.scheduled] == [[], []]
    assert s.num_preemptions == 0


def test_stops_apply_token_by_token_inside_an_accepted_list() -> None:
    s = Scheduler(KVCacheManager(32, 2, True), 8, 64, True, spec_k=4)
    a = sample("a", [1, 2, 3], max_tokens=20, stop_token_ids=[9])
    b = sample("b", [1, 2, 4], max_tokens=5, ignore_eos=True)
    s.add(a)
    s.add(b)
    step(s, {"a": [5], "b": [5]}, {"a": [6, 9, 8], "b": [6, 7, 8, 9]})
    out, outs = step(s, {"a": [6, 9, 8, 1]}, {})
    assert [r.spec_tokens for r in out.scheduled] == [[6, 9, 8], [6, 7, 8]]  # b: room 3
    assert outs[0].new_token_ids == [6, 9] and outs[0].finish_reason == "stop"
    assert outs[0].stop_reason == 9 and a.output_token_ids == [5, 6, 9]
    assert s.kv.table("a") == []
    min_tokens = sample("m", [1], max_tokens=9, min_tokens=3)
    min_tokens.spec_tokens = [4, 4]
    s.add(min_tokens)
    assert s.schedule().scheduled[-1].draft_room == 0  # no drafts below min_tokens


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(1, 12), min_size=1, max_size=6),
    st.integers(5, 14),
    st.integers(2, 16),
    st.booleans(),
    st.randoms(use_true_random=False),
)
def test_random_speculative_workloads_finish_without_leaks(
    lengths: list[int], blocks: int, budget: int, caching: bool, rnd: Any
) -> None:
    kv = KVCacheManager(blocks, 2, caching)
    s = Scheduler(kv, 4, budget, True, spec_k=3)
    for i, n in enumerate(lengths):
        # each request fits the cache alone (prompt + max_tokens <= its slots), as the
        # engine's admission check makes sure; a bigger one could only preempt itself
        s.add(sample(f"r{i}", [rnd.randrange(5) for _ in range(min(n, 2 * blocks - 8))],
                     max_tokens=rnd.randint(1, 8), stop_token_ids=[4]))  # fmt: skip
    for _ in range(300):
        if not s.has_work():
            break
        out = s.schedule()
        assert out.total_tokens <= budget
        sampled, drafts = {}, {}
        for row in out.scheduled:
            if not row.sample:
                continue
            req = s.requests[row.key]
            assert len(req.output_token_ids) + len(row.spec_tokens) < req.stop.max_tokens
            kept = rnd.randint(0, len(row.spec_tokens))
            sampled[row.key] = [*row.spec_tokens[:kept], rnd.randrange(5)]
            drafts[row.key] = [rnd.randrange(5) for _ in range(rnd.randint(0, 3))]
        lps = {k: [-0.5] * len(v) for k, v in sampled.items()}
        s.update_from_output(out, StepOutput(sampled, lps, drafts=drafts))
        kv.check()
        for r in s.running:
            assert r.num_computed_tokens <= r.num_tokens - 1 or r.num_computed_tokens == 0
    assert not s.has_work()
    assert kv.num_free == kv.num_blocks
    assert 0 <= s.verified.num_accepted_tokens <= s.verified.num_draft_tokens


def prompts_and_params() -> list[tuple[str, list[int], SamplingParams]]:
    """Requests whose drafts get kept (a biased token repeats) and rejected (a penalty
    catches up with the bias; a sampled draw; an unbiased tiny model)."""
    bias = {A: 12.0}
    return [
        ("rep", [A] * 5, SamplingParams(temperature=0, max_tokens=24, logit_bias=bias)),
        (
            "pen",
            [A] * 6,
            SamplingParams(
                temperature=0, max_tokens=20, logit_bias=bias, frequency_penalty=1.5, logprobs=2
            ),
        ),
        ("seed", [A] * 4, SamplingParams(temperature=0.9, seed=7, max_tokens=16, logit_bias=bias)),
        ("free", [5, 9, 14, 3, 5, 9, 14], SamplingParams(temperature=0, max_tokens=12)),
    ]


def run(engine: LLMEngine) -> dict[str, Any]:
    done = run_to_completion(engine, prompts_and_params())
    return {rid: out.outputs[0] for rid, out in done.items()}


def test_ngram_speculation_gives_the_outputs_of_no_speculation(make_args: Any) -> None:
    with LLMEngine.from_engine_args(make_args(), multiprocess=False) as engine:
        ref = run(engine)
    args = make_args(speculative_config=NGRAM)
    with LLMEngine.from_engine_args(args, multiprocess=False) as engine:
        got = run(engine)
        stats = engine.stats()
    for rid, want in ref.items():
        if rid == "seed":  # rejection sampling: the target's distribution, other draws
            assert len(got[rid].token_ids) == len(want.token_ids)
            continue
        assert got[rid].token_ids == want.token_ids, rid
        assert got[rid].text == want.text, rid
        assert got[rid].cumulative_logprob == pytest.approx(want.cumulative_logprob), rid
    assert [list(d) for d in got["pen"].logprobs] == [list(d) for d in ref["pen"].logprobs]
    assert 0 < stats.num_accepted_tokens < stats.num_draft_tokens
    assert stats.num_free_kv_blocks == stats.num_kv_blocks


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "stop"),
    [(OutputKind.DELTA, "aaa"), (OutputKind.FINAL_ONLY, "aaa"), (OutputKind.FINAL_ONLY, None)],
)
def test_outputs_of_accepted_lists_streamed_and_final(
    kind: OutputKind, stop: str | None, make_args: Any
) -> None:
    """A stop string inside an accepted list cuts it there (streamed or not); a final-only
    request without one has its lists merged in the core until it finishes."""
    params = SamplingParams(
        temperature=0,
        max_tokens=9,
        logit_bias={A: 12.0},
        stop=[stop] if stop else None,
        include_stop_str_in_output=True,
    )

    def go(**kw: Any) -> tuple[list[int], str, Any]:
        with LLMEngine.from_engine_args(make_args(**kw)) as engine:
            engine.add(inputs_of(engine).process("s", [A] * 6, params, output_kind=kind))
            ids, text, outs = [], "", []
            while engine.has_unfinished_requests():
                outs += engine.step()
            for o in outs:
                ids += o.outputs[0].token_ids
                text += o.outputs[0].text
            return ids, text, (outs[-1].outputs[0].finish_reason, engine.stats(), len(outs))

    want = go()
    got = go(speculative_config=NGRAM)
    n = 3 if stop else 9
    assert got[:2] == want[:2] == ([A] * n, "a" * n)
    assert got[2][0] == want[2][0] == ("stop" if stop else "length")
    assert got[2][1].num_accepted_tokens > 0
    assert got[2][1].num_free_kv_blocks == got[2][1].num_kv_blocks
    if kind is OutputKind.FINAL_ONLY:
        assert got[2][2] == 1


def test_a_stop_string_before_the_cores_own_finish_aborts_nothing(tiny_dir: Path) -> None:
    from tandem.core.config.engine_args import EngineArgs
    from tandem.core.inputs.processor import InputProcessor
    from tandem.core.text.tokenizer import load_tokenizer
    from tandem.v1 import messages as m
    from tandem.v1.detokenizer.processor import OutputProcessor

    tok = load_tokenizer(tiny_dir)
    inputs = InputProcessor.for_config(EngineArgs(model=str(tiny_dir)).create_config(), tok)
    req = inputs.process("r", [A], SamplingParams(max_tokens=4, stop=["aa"]))
    detok = OutputProcessor(tok)
    detok.add(m.AddRequest(req))
    # one step kept 4 tokens and hit max_tokens; the stop string ends the text earlier
    results, stopped = detok.process(
        [m.CoreOutput("r", 0, [A] * 4, [-0.1] * 4, finish_reason="length")]
    )
    assert stopped == [] and not detok.closing  # the core has ended the sample itself
    assert results[0].outputs[0].new_token_ids == [A, A]
    assert results[0].outputs[0].finish_reason == "stop"


@pytest.mark.slow
def test_abort_while_drafts_are_verified_frees_every_block(make_args: Any) -> None:
    reqs = prompts_and_params()
    with LLMEngine.from_engine_args(make_args(), multiprocess=False) as engine:
        ref = run_to_completion(engine, reqs[3:])["free"].outputs[0].token_ids
    with LLMEngine.from_engine_args(make_args(speculative_config=NGRAM)) as engine:
        for rid, prompt, params in reqs[:1] + reqs[3:]:
            add_request(engine, rid, prompt, params)
        outs = []
        while engine.stats().num_draft_tokens == 0:
            outs += engine.step()
        engine.abort_request("rep")
        while engine.has_unfinished_requests():
            outs += engine.step()
        stats = engine.stats()
    assert all(o.request_id != "rep" or not o.finished for o in outs)
    assert [o for o in outs if o.finished][-1].outputs[0].token_ids == ref
    assert stats.num_running == stats.num_waiting == 0
    assert stats.num_free_kv_blocks == stats.num_kv_blocks


@pytest.mark.slow
def test_prefix_cache_after_rejected_drafts_serves_the_right_tokens(make_args: Any) -> None:
    """A later prompt that extends an earlier output reuses its cached blocks; had a
    rejected draft's K/V been cached, its tokens would differ from a fresh engine's."""
    first = prompts_and_params()[1]  # its drafts get rejected where the penalty wins
    args = make_args(block_size=4, speculative_config=NGRAM)
    with LLMEngine.from_engine_args(args, multiprocess=False) as engine:
        out = run_to_completion(engine, [first])["pen"].outputs[0].token_ids
        stats = engine.stats()
        assert stats.num_accepted_tokens < stats.num_draft_tokens  # some were rejected
        prompt = first[1] + out[:-2]
        params = SamplingParams(temperature=0, max_tokens=8, logprobs=1)
        got = run_to_completion(engine, [("again", prompt, params)])["again"]
    fresh = make_args(enable_prefix_caching=False)
    with LLMEngine.from_engine_args(fresh, multiprocess=False) as engine:
        want = run_to_completion(engine, [("again", prompt, params)])["again"]
    assert got.num_cached_tokens >= 16
    assert got.outputs[0].token_ids == want.outputs[0].token_ids
    for a, b in zip(got.outputs[0].logprobs, want.outputs[0].logprobs, strict=True):
        assert {t: lp.logprob for t, lp in a.items()} == pytest.approx(
            {t: lp.logprob for t, lp in b.items()}, abs=1e-4
        )


@pytest.mark.slow
@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_seeded_speculation_gives_engine_v0s_tokens(
    method: str, tiny_dir: Path, make_args: Any
) -> None:
    """Both engines verify a sampled row the same way (rejection sampling, its coins
    seeded from the sample's seed and output count): the same tokens, drafts, accepts."""
    from tandem.core.engine.protocol import load_engine_class

    spec = NGRAM if method == "ngram" else {"model": str(tiny_dir), "num_speculative_tokens": 3}
    bias = {A: 3.0, 69: 3.0}
    reqs = [
        (
            f"s{i}",
            [A, 69] * 3 + [i],
            SamplingParams(temperature=t, seed=i, max_tokens=20, logit_bias=bias, top_k=k),
        )
        for i, (t, k) in enumerate([(0.8, 50), (1.0, -1), (0.5, 8), (0.0, -1)])
    ]
    got = {}
    for name in ("v0", "v1"):
        args = make_args(speculative_config=spec, max_model_len=128)
        with load_engine_class(name).from_engine_args(args) as engine:
            done = run_to_completion(engine, reqs)
            got[name] = ({k: o.outputs[0].token_ids for k, o in done.items()}, engine.stats())
    assert got["v1"][0] == got["v0"][0]
    s0, s1 = got["v0"][1], got["v1"][1]
    assert (s1.num_draft_tokens, s1.num_accepted_tokens) == (
        s0.num_draft_tokens,
        s0.num_accepted_tokens,
    )
    assert 0 < s1.num_accepted_tokens < s1.num_draft_tokens
