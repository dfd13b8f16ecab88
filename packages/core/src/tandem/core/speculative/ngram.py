"""Prompt lookup: guess the next tokens by finding the request's last few tokens earlier
in its own prompt or output and copying what followed them there.

Free to compute and often right when the answer quotes its prompt (repeating text,
editing code), so a cheap first proposer before a draft model.
"""

from __future__ import annotations

from collections.abc import Sequence

from tandem.core.validate import RequestError, check_int


def propose_ngram(tokens: Sequence[int], k: int, min_n: int, max_n: int) -> list[int]:
    """Up to ``k`` tokens that followed the most recent earlier occurrence of the longest
    suffix n-gram of ``tokens`` (n from ``max_n`` down to ``min_n``); [] if none occurs."""
    check_int("k", k, lo=0)
    check_int("min_n", min_n, lo=1)
    check_int("max_n", max_n, lo=1)
    if min_n > max_n:
        raise RequestError("min_n", f"min_n must be <= max_n, got {min_n} > {max_n}")
    seq = list(tokens)
    size = len(seq)
    if k == 0:
        return []
    for n in range(min(max_n, size - 1), min_n - 1, -1):
        start = _last_match(seq, n)
        if start >= 0:
            return seq[start + n : start + n + k]
    return []


def _last_match(seq: list[int], n: int) -> int:
    """Start of the latest occurrence of ``seq[-n:]`` that begins before it; -1 if none."""
    size = len(seq)
    suffix = seq[size - n :]
    last = suffix[-1]
    # scan candidate end positions (occurrences of the suffix's last token), newest first
    end = size - 2
    while end >= n - 1:
        try:
            end = _rindex(seq, last, n - 1, end)
        except ValueError:
            return -1
        start = end - n + 1
        if seq[start : end + 1] == suffix:
            return start
        end -= 1
    return -1


def _rindex(seq: list[int], value: int, lo: int, hi: int) -> int:
    """The largest i in [lo, hi] with seq[i] == value (ValueError if none)."""
    for i in range(hi, lo - 1, -1):
        if seq[i] == value:
            return i
    raise ValueError(value)
