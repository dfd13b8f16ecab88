from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.core.inputs.processor import InputProcessor
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.v0.sampler import Sampler, SamplingRow

V = 12
INPUTS = InputProcessor(None, V, 1 << 20, [])  # token-id prompts only: no tokenizer needed


def row(
    seed: int = 0,
    out: tuple[int, ...] = (),
    prompt: tuple[int, ...] = (1,),
    blocked: tuple[int, ...] = (),
    **params,
) -> SamplingRow:
    request = INPUTS.process("r", list(prompt), SamplingParams(**params))
    return SamplingRow(
        request.sampling, list(prompt), list(out), seed, request.stop.min_tokens, blocked
    )


def logits_for(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, V, generator=g) * 3  # [n, V]


def test_greedy_is_argmax_and_logprobs_are_raw() -> None:
    x = logits_for(3)
    res = Sampler()(x, [row(temperature=0.0, logprobs=2)] * 3)
    raw = x.log_softmax(-1)
    for b, r in enumerate(res):
        assert r.token_id == int(x[b].argmax())
        assert r.rank == 1
        assert r.logprob == pytest.approx(float(raw[b].max()), abs=1e-6)
        ids = raw[b].topk(2).indices.tolist()
        assert [t for t, _, _ in r.tops[1:]] == ids and [k for _, _, k in r.tops[1:]] == [1, 2]


def test_input_logits_untouched() -> None:
    x = logits_for(1)
    before = x.clone()
    Sampler()(
        x, [row(temperature=0.0, min_tokens=3, blocked=(int(x.argmax()),), repetition_penalty=1.5)]
    )
    assert torch.equal(x, before)


def test_rank_of_sampled_token() -> None:
    x = torch.tensor([[0.0, 3.0, 2.0, 1.0]])
    res = Sampler()(x, [row(temperature=1.0, top_k=4, seed=3)])[0]
    order = x[0].argsort(descending=True).tolist()
    assert res.rank == order.index(res.token_id) + 1


def test_min_tokens_blocks_eos_until_reached() -> None:
    x = torch.zeros(1, V)
    x[0, 5] = 10.0  # token 5 stands for EOS
    s = Sampler()
    blocked = s(x, [row(temperature=0.0, min_tokens=2, out=(1,), blocked=(5,))])[0]
    free = s(x, [row(temperature=0.0, min_tokens=2, out=(1, 2), blocked=(5,))])[0]
    assert blocked.token_id != 5 and free.token_id == 5
    assert blocked.logprob < free.logprob  # logprobs stay raw: token 5 is still the top


def test_repetition_penalty_changes_greedy_choice() -> None:
    x = torch.zeros(1, V)
    x[0, 3], x[0, 4] = 2.0, 1.5
    s = Sampler()
    assert s(x, [row(temperature=0.0)])[0].token_id == 3
    assert s(x, [row(temperature=0.0, out=(3,), repetition_penalty=2.0)])[0].token_id == 4
    assert s(x, [row(temperature=0.0, out=(3,), frequency_penalty=1.0)])[0].token_id == 4


def test_top_k_one_is_greedy_even_when_sampling() -> None:
    x = logits_for(4)
    out = Sampler()(x, [row(seed=i, temperature=1.5, top_k=1) for i in range(4)])
    assert [r.token_id for r in out] == x.argmax(-1).tolist()


def test_seeded_draw_changes_with_counter_and_seed() -> None:
    x = torch.zeros(64, V)  # uniform: any token is possible
    s = Sampler()
    a = [r.token_id for r in s(x, [row(seed=7, out=(0,) * i) for i in range(64)])]
    b = [r.token_id for r in s(x, [row(seed=8, out=(0,) * i) for i in range(64)])]
    assert len(set(a)) > 3 and a != b


def test_prompt_logprobs() -> None:
    x = logits_for(3)
    out = Sampler().prompt_logprobs(x, [4, 5, 6], k=1)
    raw = x.log_softmax(-1)
    for p, tok in enumerate([4, 5, 6]):
        (first, lp, rank), (best, _, best_rank) = out[p]  # the actual token, then the top 1
        assert first == tok and lp == pytest.approx(float(raw[p, tok]), abs=1e-6)
        assert rank == int((raw[p] > raw[p, tok]).sum()) + 1
        assert (best, best_rank) == (int(raw[p].argmax()), 1)


def test_rows_must_match_logits() -> None:
    with pytest.raises(ValueError, match="len\\(rows\\)=2"):
        Sampler()(torch.zeros(3, V), [row(), row()])


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**62),
    counter=st.integers(0, 50),
    pos=st.integers(0, 5),
    others=st.lists(st.integers(0, 2**31), min_size=0, max_size=5),
    temperature=st.floats(0.3, 2.0),
    top_k=st.integers(0, V),
    top_p=st.floats(0.2, 1.0),
    min_p=st.floats(0.0, 0.5),
)
def test_seeded_sample_is_batch_independent(
    seed, counter, pos, others, temperature, top_k, top_p, min_p
) -> None:
    g = torch.Generator().manual_seed(seed % 1000)
    target_logits = torch.randn(1, V, generator=g) * 2
    params = dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
    target = row(seed=seed, out=(1,) * counter, **params)
    alone = Sampler()(target_logits, [target])[0]
    rows = [row(seed=o, temperature=1.0, top_k=o % 4) for o in others]
    pos = min(pos, len(rows))
    rows.insert(pos, target)
    batch_logits = torch.randn(len(rows), V, generator=g)
    batch_logits[pos] = target_logits[0]
    mixed = Sampler()(batch_logits, rows)[pos]
    assert (alone.token_id, alone.rank) == (mixed.token_id, mixed.rank)
    # the drawn token survives every filter: it is within the top-k when k is set
    if top_k:
        assert alone.rank <= top_k or bool(
            (target_logits[0] == target_logits[0, alone.token_id]).sum() > 1
        )


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 6))
def test_greedy_fast_path_matches_general_path(seed: int, n: int) -> None:
    """Plain greedy rows skip the log-softmax; the answers are those of the full path."""
    x = logits_for(n, seed)
    fast = Sampler()(x, [row(temperature=0.0)] * n)
    full = Sampler()(x, [row(temperature=0.0, logprobs=0)] * n)  # top logprobs: full path
    assert [r.token_id for r in fast] == [r.token_id for r in full]
    assert [r.rank for r in fast] == [r.rank for r in full] == [1] * n
    assert [r.logprob for r in fast] == pytest.approx([r.logprob for r in full], abs=1e-5)
    assert all(r.tops is None for r in fast)


def test_min_tokens_mask_still_applies_to_greedy_rows() -> None:
    x = torch.zeros(1, V)
    x[0, 3] = 10.0  # the argmax, but blocked while below min_tokens
    got = Sampler()(x, [row(temperature=0.0, min_tokens=2, blocked=(3,))])[0]
    assert got.token_id != 3
