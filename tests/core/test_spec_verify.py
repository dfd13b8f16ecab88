"""The verify step against its definition: greedy keeps exactly what greedy decoding
gives; rejection sampling keeps the target's distribution (checked with a fixed seed)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.core.speculative.verify import verify_greedy, verify_sampled

V = 6


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.lists(st.floats(-5, 5), min_size=V, max_size=V), min_size=1, max_size=6),
    drafts=st.lists(st.integers(0, V - 1), max_size=5),
)
def test_greedy_is_argmax_decoding(rows: list[list[float]], drafts: list[int]) -> None:
    drafts = drafts[: len(rows) - 1]
    logits = torch.tensor(rows[: len(drafts) + 1])
    out = verify_greedy(logits, drafts)
    best = logits.argmax(-1).tolist()
    # plain greedy decoding: token i is argmax of row i, as long as history matches
    expected: list[int] = []
    for i in range(len(drafts) + 1):
        expected.append(best[i])
        if i == len(drafts) or best[i] != drafts[i]:
            break
    assert out == expected


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    k=st.integers(0, 5),
    certain=st.booleans(),
    data=st.data(),
)
def test_sampled_shape_and_support(seed: int, k: int, certain: bool, data) -> None:
    gen = torch.Generator().manual_seed(seed)
    p = torch.rand(k + 1, V, generator=gen) ** 3
    p[:, 0] = 0.0  # a token the target never gives
    p = p / p.sum(-1, keepdim=True)
    drafts = data.draw(st.lists(st.integers(0, V - 1), min_size=k, max_size=k))
    q = None if certain else torch.softmax(torch.randn(k, V, generator=gen), -1)
    out = verify_sampled(p, drafts, q, gen)
    assert 1 <= len(out) <= k + 1
    assert out[:-1] == drafts[: len(out) - 1]
    assert all(p[i, t] > 0 for i, t in enumerate(out))


def _first_token_freq(p, q, trials: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    counts = torch.zeros(V)
    for _ in range(trials):
        d = 2 if q is None else int(torch.multinomial(q[0], 1, generator=gen))
        out = verify_sampled(p, [d], q, gen)
        counts[out[0]] += 1
    return counts / trials


@pytest.mark.parametrize("certain", [False, True])
def test_sampled_keeps_target_distribution(certain: bool) -> None:
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(2, V, generator=gen) * 1.5, -1)
    q = None if certain else torch.softmax(torch.randn(1, V, generator=gen) * 1.5, -1)
    freq = _first_token_freq(p, q, trials=6000, seed=1)
    # 6000 draws: each frequency's standard error is below 0.0065; 0.03 is > 4.5 sigma
    assert torch.allclose(freq, p[0], atol=0.03), (freq, p[0])
    # the drafts' own distribution is far from p: keeping every draft would fail above
    drafted = torch.nn.functional.one_hot(torch.tensor(2), V).float() if q is None else q[0]
    assert (p[0] - drafted).abs().max() > 0.1


def test_sampled_accepts_exact_draft_distribution() -> None:
    p = torch.full((3, V), 1.0 / V)
    out = verify_sampled(p, [1, 4], p[:2].clone(), torch.Generator().manual_seed(3))
    assert out[:2] == [1, 4] and len(out) == 3


def test_bad_shapes() -> None:
    with pytest.raises(ValueError, match=r"len\(drafts\) \+ 1"):
        verify_greedy(torch.zeros(2, V), [1, 2])
    with pytest.raises(ValueError, match=r"drafts\[0\]"):
        verify_sampled(torch.ones(2, V) / V, [V], None, None)
