from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.core.speculative import propose_ngram


def _reference(tokens: list[int], k: int, lo: int, hi: int) -> list[int]:
    for n in range(hi, lo - 1, -1):
        if n >= len(tokens):
            continue
        suffix = tokens[-n:]
        starts = [i for i in range(len(tokens) - n) if tokens[i : i + n] == suffix]
        if starts:
            i = max(starts)
            return tokens[i + n : i + n + k]
    return []


def test_examples() -> None:
    assert propose_ngram([1, 2, 3, 4, 1, 2], k=3, min_n=1, max_n=3) == [3, 4, 1]
    # the longest suffix wins over a more recent shorter one
    assert propose_ngram([5, 6, 7, 9, 6, 8, 5, 6], k=2, min_n=1, max_n=2) == [7, 9]
    # most recent occurrence of the same n-gram
    assert propose_ngram([1, 2, 1, 3, 1], k=1, min_n=1, max_n=1) == [3]
    assert propose_ngram([1, 2, 3], k=4, min_n=1, max_n=2) == []
    assert propose_ngram([7, 7], k=4, min_n=1, max_n=4) == [7]
    assert propose_ngram([1, 2, 1, 2], k=4, min_n=3, max_n=4) == []
    assert propose_ngram([], k=4, min_n=1, max_n=4) == []


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="min_n must be <= max_n"):
        propose_ngram([1], k=1, min_n=3, max_n=2)
    with pytest.raises(ValueError, match="k must be >= 0"):
        propose_ngram([1], k=-1, min_n=1, max_n=2)


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 4), max_size=40),
    k=st.integers(0, 6),
    lo=st.integers(1, 4),
    span=st.integers(0, 3),
)
def test_matches_reference(tokens: list[int], k: int, lo: int, span: int) -> None:
    got = propose_ngram(tokens, k, lo, lo + span)
    assert got == _reference(tokens, k, lo, lo + span)
    assert len(got) <= k
