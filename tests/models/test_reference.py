"""The transformers reference used by the parity suites: ties allowed, differences not."""

from __future__ import annotations

import pytest

from tandem.core.testing import HFReference

PROMPT = [1, 40, 41, 42, 300, 7]


def test_exact_match_passes_and_is_cached(model_dirs) -> None:
    hf = HFReference()
    want = hf.greedy(model_dirs["llama"], PROMPT, 6, ignore_eos=True)
    assert len(want) == 6
    hf.assert_greedy(model_dirs["llama"], PROMPT, want, 6, ignore_eos=True)
    want.append(0)  # callers get a copy
    assert hf.greedy(model_dirs["llama"], PROMPT, 6, ignore_eos=True) != want


def test_a_real_difference_fails_naming_the_position(model_dirs) -> None:
    hf = HFReference()
    want = hf.greedy(model_dirs["llama"], PROMPT, 6, ignore_eos=True)
    row = hf.logprobs(model_dirs["llama"], PROMPT + want[:2])[-1]
    worst = int(row.argmin())
    got = [*want[:2], worst, *want[3:]]
    with pytest.raises(AssertionError, match="greedy token 2 differs"):
        hf.assert_greedy(model_dirs["llama"], PROMPT, got, 6, ignore_eos=True)
    # the same difference within the tie tolerance is accepted
    hf.assert_greedy(model_dirs["llama"], PROMPT, got, 6, ignore_eos=True, tie=1e9)


def test_a_shorter_output_fails(model_dirs) -> None:
    hf = HFReference()
    want = hf.greedy(model_dirs["llama"], PROMPT, 6, ignore_eos=True)
    with pytest.raises(AssertionError, match="lengths differ"):
        hf.assert_greedy(model_dirs["llama"], PROMPT, want[:-1], 6, ignore_eos=True)
