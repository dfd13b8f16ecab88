from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.core.engine.stopping import StopStringMatcher


def test_match_truncates_before_stop() -> None:
    m = StopStringMatcher(["END"])
    r = m.check("hello END world", num_new=9)
    assert r.matched and r.stop == "END"
    assert r.text == "hello " and r.releasable == "hello "


def test_match_kept_when_included() -> None:
    m = StopStringMatcher(["END"], include_in_output=True)
    r = m.check("hello END world", num_new=9)
    assert r.text == "hello END" and r.stop == "END"


def test_only_new_text_is_searched() -> None:
    m = StopStringMatcher(["ab"])
    # "ab" lies wholly in old text: already reported (or ignored) before
    assert not m.check("ab cd", num_new=2).matched
    # it straddles old and new text: found
    assert m.check("xxab", num_new=1).stop == "ab"


def test_earliest_stop_wins_then_longest() -> None:
    m = StopStringMatcher(["world", "lo w", "lo"])
    assert m.check("hello world", num_new=11).stop == "lo w"
    assert m.check("hello world", num_new=11).text == "hel"


def test_hold_back_prefix_of_stop() -> None:
    m = StopStringMatcher(["</answer>"])
    r = m.check("the answer </ans", num_new=5)
    assert not r.matched
    assert r.text == "the answer </ans"
    assert r.releasable == "the answer "
    assert m.releasable_text("abc<") == "abc"
    assert m.releasable_text("abc") == "abc"


def test_no_hold_back_when_included() -> None:
    m = StopStringMatcher(["</answer>"], include_in_output=True)
    assert m.check("x </ans", num_new=3).releasable == "x </ans"


def test_no_stops() -> None:
    m = StopStringMatcher([])
    r = m.check("anything", num_new=8)
    assert not r.matched and r.releasable == "anything"


@pytest.mark.parametrize(
    ("args", "exc", "message"),
    [
        (("END",), TypeError, "stops must be a list of str, got str"),
        (([1],), TypeError, "stops must contain str, got int"),
        (([""],), ValueError, "stops must not contain the empty string"),
        ((["a"], 1), TypeError, "include_in_output must be a bool, got int"),
    ],
)
def test_bad_construction(args: tuple[object, ...], exc: type[Exception], message: str) -> None:
    with pytest.raises(exc, match=message):
        StopStringMatcher(*args)  # type: ignore[arg-type]


def test_bad_check_input() -> None:
    m = StopStringMatcher(["x"])
    with pytest.raises(ValueError, match=r"num_new must be in \[0, len\(text\)=3\], got 4"):
        m.check("abc", 4)
    with pytest.raises(TypeError, match=r"text must be a str, got bytes"):
        m.check(b"abc", 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"num_new must be an int, got bool"):
        m.check("abc", True)


ALPHABET = "ab\n "
texts = st.text(alphabet=ALPHABET, max_size=40)
stop_lists = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=4), max_size=3)


def _stream(
    m: StopStringMatcher, text: str, cuts: list[int]
) -> tuple[str | None, str, list[str], int, int]:
    """Feed ``text`` in pieces.

    Returns (stop, final text, every releasable, last chunk's start, last chunk's end).
    """
    points = sorted({c % (len(text) + 1) for c in cuts} | {len(text)})
    seen, prev = [], 0
    for p in points:
        r = m.check(text[:p], p - prev)
        seen.append(r.releasable)
        if r.matched:
            return r.stop, r.text, seen, prev, p
        prev = p
    return None, text, seen, prev, len(text)


def _ends(text: str, stop: str, limit: int) -> list[int]:
    """Start positions of every occurrence of ``stop`` that ends by ``limit``."""
    return [i for i in range(limit - len(stop) + 1) if text.startswith(stop, i)]


@settings(max_examples=150, deadline=None)
@given(
    text=texts,
    stops=stop_lists,
    cuts=st.lists(st.integers(0, 60), max_size=8),
    include=st.booleans(),
)
def test_streaming_stops_at_first_completed_stop(
    text: str, stops: list[str], cuts: list[int], include: bool
) -> None:
    m = StopStringMatcher(stops, include_in_output=include)
    stop, final, seen, start, upto = _stream(m, text, cuts)
    if stop is None:
        assert final == text
        assert not any(s in text for s in stops)
    else:
        at = len(final) - len(stop) if include else len(final)
        assert text.startswith(stop, at)
        # no stop string was complete in the text seen before the matching chunk ...
        assert all(s not in text[:start] for s in stops)
        # ... and none complete by the end of that chunk starts before the match
        assert all(i >= at for s in stops for i in _ends(text, s, upto))
    # what was shown is never taken back, and never runs past the final text
    for a, b in itertools.pairwise(seen):
        assert b.startswith(a)
    assert all(final.startswith(r) for r in seen)


@settings(max_examples=100, deadline=None)
@given(text=texts, stops=stop_lists, include=st.booleans())
def test_one_shot_picks_earliest_then_longest(text: str, stops: list[str], include: bool) -> None:
    r = StopStringMatcher(stops, include_in_output=include).check(text, len(text))
    hits = [(text.find(s), -len(s), s) for s in stops if s in text]
    if not hits:
        assert not r.matched and r.text == text
    else:
        at, _, expected = min(hits)
        assert r.stop == expected
        assert r.text == (text[: at + len(expected)] if include else text[:at])


@settings(max_examples=100, deadline=None)
@given(text=texts, stops=stop_lists)
def test_releasable_never_ends_inside_a_stop_prefix(text: str, stops: list[str]) -> None:
    m = StopStringMatcher(stops)
    out = m.releasable_text(text)
    assert text.startswith(out)
    held = text[len(out) :]
    if held:
        assert any(s.startswith(held) and len(s) > len(held) for s in stops)
    # the held suffix is the longest one that could still grow into a stop string
    for k in range(len(held) + 1, len(text) + 1):
        assert not any(len(s) > k and s.startswith(text[-k:]) for s in stops)
