"""Speculative decoding against the engine's own plain decoding: greedy output token for
token, stops cut where plain decoding stops, logprobs of the same positions, seeded
sampling reproducible. (The verify step's distribution is checked in tests/core.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.testing import make_model

pytestmark = pytest.mark.engines("v0", "v1")

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}
PROMPTS = [
    [1, 40, 41, 42, 43, 44, 40, 41, 42, 43, 44, 40, 41],
    [1, 300, 7, 8, 9, 10, 11, 300, 7, 8],
    [1, 99],
]
SQL = "SELECT id, name FROM users WHERE age >= 21;"


@pytest.fixture(scope="module")
def trained() -> Path:
    """The built-in tiny model trained on its corpus: it quotes text it has seen, so
    n-gram drafts get accepted (the untrained one's output rarely repeats)."""
    from tandem.core.catalog.named_models import TINY_TRAIN_STEPS

    return make_model(size="tiny", arch="llama", train_steps=TINY_TRAIN_STEPS)


def greedy(**kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, ignore_eos=True, **kw)


def _ids(outs) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in outs]


def _idle(eng) -> None:
    s = eng.stats()
    assert s.num_free_kv_blocks == s.num_kv_blocks and (s.num_running, s.num_waiting) == (0, 0)


def test_ngram_matches_plain(trained, new_engine, run) -> None:
    """Greedy text, stops, logprobs and penalties as plain decoding gives them."""
    from tandem.core.testing.tokenizer import corpus

    lines = corpus()
    prompts = [f"{SQL} {SQL}", f"{lines[5]} {lines[5]} {lines[5][:12]}", lines[0]]
    plain_eng = new_engine(trained, max_model_len=256)
    eng = new_engine(trained, max_model_len=256, speculative_config=NGRAM)
    params = greedy(max_tokens=40)
    plain = _ids(run(plain_eng, prompts, params))
    assert _ids(run(eng, prompts, params)) == plain
    s = eng.stats()
    assert s.num_draft_tokens >= s.num_accepted_tokens > 0, s
    assert plain_eng.stats().num_draft_tokens == 0

    ref, tok = plain[0], plain_eng.tokenizer
    text = tok.decode(ref[20:])
    cases = [
        greedy(max_tokens=40, stop_token_ids=[ref[9]]),
        greedy(max_tokens=40, stop=[text[2:6]]),
        greedy(max_tokens=7),
        greedy(max_tokens=40, logprobs=2, repetition_penalty=1.3, presence_penalty=0.5),
        greedy(max_tokens=30, min_tokens=12, stop_token_ids=[ref[3]]),
    ]
    same = [prompts[0]] * len(cases)
    want, got = run(plain_eng, same, cases), run(eng, same, cases)
    for a, b in zip(got, want):
        x, y = a.outputs[0], b.outputs[0]
        assert (x.token_ids, x.text, x.finish_reason, x.stop_reason) == (
            y.token_ids, y.text, y.finish_reason, y.stop_reason
        )  # fmt: skip
    lp_a, lp_b = got[3].outputs[0].logprobs, want[3].outputs[0].logprobs
    assert [list(p) for p in lp_a] == [list(p) for p in lp_b]
    for pa, pb in zip(lp_a, lp_b):
        for t in pa:
            assert pa[t].logprob == pytest.approx(pb[t].logprob, abs=1e-4)
            assert pa[t].rank == pb[t].rank
    assert eng.stats().num_accepted_tokens > s.num_accepted_tokens
    _idle(eng)


def test_draft_model_greedy_matches_plain(tiny_model, shared_engine, new_engine, run) -> None:
    params = greedy(max_tokens=32)
    plain = _ids(run(shared_engine, PROMPTS, params))
    same = new_engine(speculative_model=str(tiny_model), num_speculative_tokens=3)
    assert _ids(run(same, PROMPTS, params)) == plain
    s = same.stats()  # the target as its own draft: every draft is kept
    assert s.num_draft_tokens == s.num_accepted_tokens > 0, s
    _idle(same)


@pytest.mark.slow
def test_other_draft_model_matches_plain(shared_engine, new_engine, run) -> None:
    """A smaller draft of its own (same vocabulary): drafts refused, output unchanged."""
    params = greedy(max_tokens=32)
    plain = _ids(run(shared_engine, PROMPTS, params))
    small = make_model(size="tiny", arch="llama", seed=7, num_hidden_layers=1)
    other = new_engine(speculative_config={"model": str(small), "num_speculative_tokens": 4})
    assert _ids(run(other, PROMPTS, params)) == plain
    s = other.stats()
    assert s.num_draft_tokens > s.num_accepted_tokens, s
    _idle(other)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["ngram", "draft"])
def test_seeded_sampling_reproducible(tiny_model, new_engine, run, method) -> None:
    cfg = NGRAM if method == "ngram" else {"model": str(tiny_model), "num_speculative_tokens": 3}
    eng = new_engine(speculative_config=cfg)
    params = SamplingParams(temperature=0.8, top_k=50, seed=11, max_tokens=24, ignore_eos=True)
    first = _ids(run(eng, PROMPTS, params))
    assert _ids(run(eng, PROMPTS, params)) == first
    assert all(len(t) == 24 for t in first)
    assert eng.stats().num_draft_tokens > 0
    _idle(eng)


@pytest.mark.slow
def test_tight_kv_cache_matches_plain(trained, new_engine, run) -> None:
    """Few blocks and a small token budget: drafts are dropped or sequences preempted,
    and the output does not change."""
    params = greedy(max_tokens=60)
    prompts = [f"{SQL} {SQL}", SQL, f"{SQL[:20]} {SQL}"] * 3
    plain = _ids(run(new_engine(trained), prompts, params))
    eng = new_engine(trained, speculative_config=NGRAM, num_kv_blocks=24, block_size=8,
                     max_num_batched_tokens=24)  # fmt: skip
    assert _ids(run(eng, prompts, params)) == plain
    s = eng.stats()
    assert s.num_accepted_tokens > 0 and s.num_preemptions > 0, s
    _idle(eng)


@pytest.mark.slow
def test_grammar_and_n_requests_beside_drafted_ones(trained, new_engine, run) -> None:
    """A structured-output request runs without drafts, an n=2 request drafts per sample,
    and neither changes what the others get."""
    pytest.importorskip("xgrammar")
    from tandem.core.structured import StructuredOutputsParams

    regex = StructuredOutputsParams(regex="(ab|cd){3,6}")
    params = [
        greedy(max_tokens=30),
        greedy(max_tokens=20, structured_outputs=regex),
        greedy(max_tokens=30, n=2),
    ]
    prompts = [f"{SQL} {SQL}"] * 3
    plain = run(new_engine(trained), prompts, params)
    eng = new_engine(trained, speculative_config=NGRAM)
    spec = run(eng, prompts, params)
    for a, b in zip(spec, plain):
        assert [c.token_ids for c in a.outputs] == [c.token_ids for c in b.outputs]
    assert eng.stats().num_accepted_tokens > 0
    _idle(eng)
