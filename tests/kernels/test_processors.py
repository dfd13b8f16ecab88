"""Batched logit processors against simple per-row references."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.kernels.sampling import (
    apply_min_p,
    apply_penalties,
    apply_temperature,
    apply_top_k,
    apply_top_p,
)

PROPS = settings(max_examples=30, deadline=None)
SEEDS = st.integers(0, 2**31 - 1)
SHAPES = st.tuples(st.integers(1, 5), st.integers(1, 30))
NEG = float("-inf")


def _logits(seed: int, rows: int, vocab: int) -> tuple[torch.Generator, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return g, torch.randn((rows, vocab), generator=g) * 3


# --- per-row references -----------------------------------------------------------


def _ref_penalties(x, prompt, counts, pres, freq, rep):
    out = x.clone()
    for b in range(x.shape[0]):
        for j in range(x.shape[1]):
            c = int(counts[b, j])
            if bool(prompt[b, j]) or c > 0:
                out[b, j] = out[b, j] / rep[b] if out[b, j] > 0 else out[b, j] * rep[b]
            out[b, j] -= freq[b] * c + pres[b] * (1.0 if c > 0 else 0.0)
    return out


def _ref_top_k(row: list[float], k: int) -> list[float]:
    if k == 0 or k >= len(row):
        return row
    kth = sorted(row, reverse=True)[k - 1]
    return [v if v >= kth else NEG for v in row]


def _ref_top_p(row: torch.Tensor, p: float) -> torch.Tensor:
    probs = row.softmax(-1).tolist()
    order = sorted(range(len(probs)), key=lambda j: -probs[j])  # stable on ties
    keep, mass = set(), 0.0
    for j in order:
        keep.add(j)
        mass += probs[j]
        if mass >= p and p < 1:
            break
    return torch.tensor([v if j in keep else NEG for j, v in enumerate(row.tolist())])


# --- property tests -----------------------------------------------------------------


@PROPS
@given(seed=SEEDS, shape=SHAPES)
def test_penalties(seed, shape):
    g, x = _logits(seed, *shape)
    prompt = torch.rand(shape, generator=g) < 0.3
    counts = torch.randint(0, 3, shape, generator=g) * (torch.rand(shape, generator=g) < 0.4)
    pres, freq = torch.rand((2, shape[0]), generator=g) * 4 - 2
    rep = torch.rand(shape[0], generator=g) * 2 + 0.5
    got = apply_penalties(x, prompt, counts, pres, freq, rep)
    want = _ref_penalties(x, prompt, counts, pres.tolist(), freq.tolist(), rep.tolist())
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_neutral_penalties_change_nothing():
    x = torch.randn(2, 6)
    counts = torch.tensor([[0, 1, 2, 0, 0, 5], [1, 0, 0, 0, 0, 0]])
    zeros = torch.zeros(2)
    out = apply_penalties(
        x, torch.ones(2, 6, dtype=torch.bool), counts, zeros, zeros, torch.ones(2)
    )
    assert torch.equal(out, x)


@PROPS
@given(seed=SEEDS, shape=SHAPES)
def test_temperature(seed, shape):
    g, x = _logits(seed, *shape)
    t = torch.rand(shape[0], generator=g) * 2
    t[torch.rand(shape[0], generator=g) < 0.3] = 0.0
    got = apply_temperature(x, t)
    for b in range(shape[0]):
        want = x[b] if t[b] == 0 else x[b] / t[b]
        torch.testing.assert_close(got[b], want)


@PROPS
@given(seed=SEEDS, shape=SHAPES, ties=st.booleans())
def test_top_k(seed, shape, ties):
    g, x = _logits(seed, *shape)
    if ties:
        x = x.round()
    k = torch.randint(0, shape[1] + 3, (shape[0],), generator=g)
    got = apply_top_k(x, k)
    for b in range(shape[0]):
        assert got[b].tolist() == _ref_top_k(x[b].tolist(), int(k[b]))
        kept = int(torch.isfinite(got[b]).sum())
        assert kept >= min(int(k[b]) or shape[1], shape[1])


@PROPS
@given(seed=SEEDS, shape=SHAPES)
def test_top_p(seed, shape):
    g, x = _logits(seed, *shape)
    p = torch.rand(shape[0], generator=g).clamp(min=1e-3)
    p[torch.rand(shape[0], generator=g) < 0.2] = 1.0
    got = apply_top_p(x, p)
    for b in range(shape[0]):
        assert got[b].tolist() == _ref_top_p(x[b], float(p[b])).tolist()
        kept = torch.isfinite(got[b])
        mass = x[b].softmax(-1)[kept].sum().item()
        assert kept.any() and mass >= float(p[b]) - 1e-5


@PROPS
@given(seed=SEEDS, shape=SHAPES)
def test_min_p(seed, shape):
    g, x = _logits(seed, *shape)
    mp = torch.rand(shape[0], generator=g)
    mp[0] = 0.0
    got = apply_min_p(x, mp)
    for b in range(shape[0]):
        probs = x[b].softmax(-1)
        want = torch.where(probs < mp[b] * probs.max(), NEG, x[b])
        assert torch.equal(got[b], want)
        assert torch.isfinite(got[b][x[b].argmax()])
    assert torch.equal(got[0], x[0])  # min_p 0 keeps everything


def test_processors_do_not_modify_their_input():
    x = torch.randn(2, 8)
    before = x.clone()
    apply_top_k(x, torch.tensor([2, 0]))
    apply_top_p(x, torch.tensor([0.5, 1.0]))
    apply_min_p(x, torch.tensor([0.2, 0.0]))
    apply_temperature(x, torch.tensor([0.5, 0.0]))
    assert torch.equal(x, before)


def test_chained_processors_leave_a_valid_distribution():
    x = torch.randn(3, 50)
    out = apply_min_p(
        apply_top_p(apply_top_k(x, torch.tensor([5, 0, 1])), torch.tensor([0.9, 0.3, 1.0])),
        torch.tensor([0.1, 0.0, 0.5]),
    )
    probs = out.softmax(-1)
    assert not math.isnan(probs.sum().item())
    assert int(torch.isfinite(out[2]).sum()) == 1


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda x: apply_temperature(x, torch.tensor([-1.0, 1.0])), ValueError, "temperature"),
        (lambda x: apply_top_k(x, torch.tensor([1.0, 2.0])), ValueError, "k must have dtype"),
        (lambda x: apply_top_k(x, torch.tensor([-1, 2])), ValueError, "k must be in"),
        (lambda x: apply_top_p(x, torch.tensor([0.0, 0.5])), ValueError, "p must be in"),
        (lambda x: apply_top_p(x, torch.tensor([0.5])), ValueError, r"p.shape\[0\]"),
        (lambda x: apply_min_p(x, torch.tensor([1.5, 0.0])), ValueError, "min_p must be in"),
        (lambda x: apply_min_p(x[0], torch.tensor([0.5])), ValueError, "logits must have 2"),
        (
            lambda x: apply_penalties(
                x,
                torch.zeros(2, 4),
                torch.zeros(2, 4, dtype=torch.int64),
                torch.zeros(2),
                torch.zeros(2),
                torch.ones(2),
            ),
            ValueError,
            "prompt_mask must have dtype",
        ),
        (
            lambda x: apply_penalties(
                x,
                torch.zeros(2, 4, dtype=torch.bool),
                torch.zeros(2, 4, dtype=torch.int64),
                torch.zeros(2),
                torch.zeros(2),
                torch.zeros(2),
            ),
            ValueError,
            "repetition must be in",
        ),
        (lambda x: apply_temperature(x.tolist(), torch.ones(2)), TypeError, "logits"),
    ],
)
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call(torch.randn(2, 4))
