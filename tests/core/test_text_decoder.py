"""TextDecoder: decoding without transformers gives exactly what Tokenizer.decode gives."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tandem.core.text.decoder import decoding_only
from tandem.core.text.detokenizer import IncrementalDetokenizer
from tandem.core.text.tokenizer import TextDecoder, Tokenizer


@pytest.fixture(scope="module")
def decoder(tokenizer: Tokenizer) -> TextDecoder:
    text = tokenizer.decoder_json()
    assert text is not None
    return TextDecoder.from_json(text)


@settings(max_examples=80, deadline=None)
@given(ids=st.lists(st.integers(0, 700), max_size=24), skip=st.booleans())
def test_decode_matches_tokenizer(
    tokenizer: Tokenizer, decoder: TextDecoder, ids: list[int], skip: bool
) -> None:
    # ids past the vocab (512) included: both decode them to nothing
    assert decoder.decode(ids, skip_special_tokens=skip) == tokenizer.decode(
        ids, skip_special_tokens=skip
    )


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(st.integers(0, 511), max_size=30),
    prompt=st.lists(st.integers(0, 511), max_size=8),
    chunk=st.integers(1, 4),
    skip=st.booleans(),
)
def test_detokenizer_deltas_match(
    tokenizer: Tokenizer,
    decoder: TextDecoder,
    ids: list[int],
    prompt: list[int],
    chunk: int,
    skip: bool,
) -> None:
    full = IncrementalDetokenizer(tokenizer, prompt, skip_special_tokens=skip)
    light = IncrementalDetokenizer(decoder, prompt, skip_special_tokens=skip)
    for i in range(0, len(ids), chunk):
        assert light.add(ids[i : i + chunk]) == full.add(ids[i : i + chunk])
    assert light.flush() == full.flush()
    assert light.text == full.text == tokenizer.decode(ids, skip_special_tokens=skip)


def test_bad_input(decoder: TextDecoder) -> None:
    with pytest.raises(ValueError, match=r"token ids must be >= 0, got -1"):
        decoder.decode([3, -1])
    with pytest.raises(TypeError, match=r"ids must be ints, got float"):
        decoder.decode([1.0])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"ids must be a sequence of ints, got str"):
        decoder.decode("abc")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"text must be a tokenizers JSON str, got bytes"):
        TextDecoder.from_json(b"{}")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"text is not a tokenizers JSON document"):
        TextDecoder.from_json("{not json")
    with pytest.raises(TypeError, match=r"backend must be a tokenizers.Tokenizer, got int"):
        TextDecoder(3)


def test_light_path_imports_neither_torch_nor_transformers(tokenizer: Tokenizer) -> None:
    """The v1 detokenizer process's whole path: decoder, detokenizer, output processor."""
    code = (
        "import sys\n"
        "from tandem.core.text.tokenizer import TextDecoder\n"
        "from tandem.v1.detokenizer.processor import OutputProcessor\n"
        "dec = TextDecoder.from_json(sys.stdin.read())\n"
        "OutputProcessor(dec)\n"
        "print(dec.decode([5, 6, 7]))\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'numpy') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=tokenizer.decoder_json(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip("\n") == tokenizer.decode([5, 6, 7])


def test_the_decoder_carries_no_merges(tokenizer: Tokenizer) -> None:
    """Decoding never reads a BPE model's merges (the tests above decode with them
    gone); the detokenizer process is spared their memory."""
    import json

    full = json.loads(tokenizer.hf.backend_tokenizer.to_str())
    assert full["model"]["type"] == "BPE" and full["model"]["merges"]
    light = json.loads(tokenizer.decoder_json())
    assert light["model"]["merges"] == []
    assert light["model"]["vocab"] == full["model"]["vocab"]
    assert light["added_tokens"] == full["added_tokens"]
    assert (
        decoding_only(json.dumps({"model": {"type": "Unigram"}}))
        == '{"model": {"type": "Unigram"}}'
    )
    with pytest.raises(ValueError, match="text is not a tokenizers JSON document"):
        decoding_only("{not json")
    with pytest.raises(TypeError, match="text must be a tokenizers JSON str, got bytes"):
        decoding_only(b"{}")  # type: ignore[arg-type]
