from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.core.text.detokenizer import IncrementalDetokenizer
from tandem.core.text.tokenizer import Tokenizer

PIECES = ["the cat ", "reads", " 日本語", "🙂", "🚀🚀", " café", "Ж", "λ", ". ", "\n", "한"]


def _feed(det: IncrementalDetokenizer, ids: list[int], sizes: list[int]) -> list[str]:
    deltas, i, k = [], 0, 0
    while i < len(ids):
        step = sizes[k % len(sizes)] if sizes else 1
        deltas.append(det.add(ids[i : i + step]))
        i += step
        k += 1
    deltas.append(det.flush())
    return deltas


def test_multibyte_char_is_held_until_complete(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("🦀", add_special_tokens=False)  # not in the corpus: split
    assert len(ids) >= 2
    det = IncrementalDetokenizer(tokenizer, [tokenizer.bos_token_id])
    assert [det.add([i]) for i in ids] == [""] * (len(ids) - 1) + ["🦀"]
    assert det.text == "🦀" and det.flush() == ""


def test_deltas_join_to_decode(tokenizer: Tokenizer) -> None:
    text = "The cat 日本語 🙂🚀 café ok"
    prompt = tokenizer.encode("Say:")
    ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
    det = IncrementalDetokenizer(tokenizer, prompt)
    deltas = _feed(det, ids, [1])
    assert "".join(deltas) == det.text == text
    assert det.output_token_ids == ids
    assert not any("\ufffd" in d for d in deltas)


def test_special_tokens_kept_when_asked(tokenizer: Tokenizer) -> None:
    ids = [*tokenizer.encode("hi", add_special_tokens=False), tokenizer.eos_token_id]
    det = IncrementalDetokenizer(tokenizer, [], skip_special_tokens=False)
    assert "".join(_feed(det, ids, [1])) == "hi</s>"


def test_prompt_ending_mid_character(tokenizer: Tokenizer) -> None:
    """A prompt cut inside a character: output text is decoded on its own."""
    emoji = tokenizer.encode("🦀", add_special_tokens=False)
    prompt = tokenizer.encode("x") + emoji[:2]
    out = emoji[2:] + tokenizer.encode(" ok", add_special_tokens=False)
    det = IncrementalDetokenizer(tokenizer, prompt)
    assert "".join(_feed(det, out, [1])) == tokenizer.decode(out)


def test_invalid_bytes_are_flushed(tokenizer: Tokenizer) -> None:
    lead = tokenizer.encode("🦀", add_special_tokens=False)[0]  # a lone lead byte
    det = IncrementalDetokenizer(tokenizer)
    assert det.add([lead]) == ""
    assert det.flush() == "\ufffd"
    assert det.text == tokenizer.decode([lead])


def test_empty_add(tokenizer: Tokenizer) -> None:
    det = IncrementalDetokenizer(tokenizer, [1])
    assert det.add([]) == "" and det.text == "" and det.flush() == ""


def test_bad_input(tokenizer: Tokenizer) -> None:
    with pytest.raises(TypeError, match=r"tokenizer must be a tandem Tokenizer, got str"):
        IncrementalDetokenizer("gpt2", [])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"skip_special_tokens must be a bool, got int"):
        IncrementalDetokenizer(tokenizer, [], skip_special_tokens=1)  # type: ignore[arg-type]
    det = IncrementalDetokenizer(tokenizer, [])
    with pytest.raises(ValueError, match=r"token ids must be >= 0, got -5"):
        det.add([-5])


@settings(max_examples=60, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(PIECES), min_size=1, max_size=8),
    prompt=st.lists(st.sampled_from(PIECES), max_size=3),
    sizes=st.lists(st.integers(1, 4), max_size=4),
)
def test_valid_text_never_shows_replacement(
    tokenizer: Tokenizer, pieces: list[str], prompt: list[str], sizes: list[int]
) -> None:
    text = "".join(pieces)
    ids = tokenizer.encode(text, add_special_tokens=False)
    det = IncrementalDetokenizer(tokenizer, tokenizer.encode("".join(prompt)))
    deltas = _feed(det, ids, sizes)
    assert not any("\ufffd" in d for d in deltas)
    assert "".join(deltas) == text


@settings(max_examples=100, deadline=None)
@given(
    ids=st.lists(st.integers(0, 511), max_size=30),
    prompt=st.lists(st.integers(0, 511), max_size=8),
    sizes=st.lists(st.integers(1, 5), max_size=4),
    skip=st.booleans(),
)
def test_random_ids_join_to_decode(
    tokenizer: Tokenizer, ids: list[int], prompt: list[int], sizes: list[int], skip: bool
) -> None:
    det = IncrementalDetokenizer(tokenizer, prompt, skip_special_tokens=skip)
    deltas = _feed(det, ids, sizes)
    assert "".join(deltas) == det.text == tokenizer.decode(ids, skip_special_tokens=skip)
    # a trailing replacement character is only released by flush()
    assert not any(d.endswith("\ufffd") for d in deltas[:-1])
