"""The draft proposer's own KV cache: reused across calls and rolled back to what still
matches, it drafts exactly what a fresh cache drafts."""

from __future__ import annotations

import pytest

from tandem.core.config.engine_args import EngineArgs
from tandem.core.speculative import SpeculativeConfig
from tandem.core.speculative.draft import DraftProposer, DraftSampling

GREEDY = DraftSampling()


@pytest.fixture(scope="module")
def proposer_factory(tiny_model):
    target = EngineArgs(model=str(tiny_model), max_model_len=128, dtype="float32").create_config()
    spec = SpeculativeConfig("draft", 4, model=str(tiny_model))
    return lambda: DraftProposer.load(spec, target)


def test_reused_cache_drafts_like_a_fresh_one(proposer_factory) -> None:
    kept = proposer_factory()
    a = [1, 40, 41, 42, 43]
    d1, p1 = kept.propose([("r", a, GREEDY), ("s", [1, 99], GREEDY)], 4)[0]
    assert len(d1) == 4 and p1 is None
    # two drafts accepted, then a token that differs from the third: a rollback
    b = [*a, d1[0], d1[1], (d1[2] + 1) % 500]
    again = kept.propose([("r", b, GREEDY)], 4)[0][0]
    fresh = proposer_factory().propose([("x", b, GREEDY)], 4)[0][0]
    assert again == fresh
    assert kept.held() == ["r", "s"]
    kept.drop("s")
    kept.drop("unknown")
    assert kept.held() == ["r"]


def test_sampled_drafts_come_with_their_distributions(proposer_factory) -> None:
    prop = proposer_factory()
    how = DraftSampling(temperature=0.9, seed=5)
    drafts, probs = prop.propose([("r", [1, 40, 41], how)], 3)[0]
    assert probs is not None and probs.shape[0] == 3
    assert all(float(probs[i, t]) > 0 for i, t in enumerate(drafts))
    assert probs.sum(-1).sub(1).abs().max() < 1e-4
    prop.drop("r")
    assert prop.propose([("r", [1, 40, 41], how)], 3)[0][0] == drafts  # seeded: the same


def test_refuses_a_config_without_a_draft_model(tiny_model) -> None:
    target = EngineArgs(model=str(tiny_model), max_model_len=128).create_config()
    with pytest.raises(ValueError, match="method 'draft'"):
        DraftProposer.load(SpeculativeConfig("ngram"), target)
