"""The pieces of structured outputs and tool calls that need no engine: the batch mask,
the compiled-grammar cache, the Hermes tool-call parser."""

from __future__ import annotations

import pytest
import torch

from tandem.core.structured import GrammarSpec, StructuredOutputsParams
from tandem.core.structured.bitmask import allowed, apply_mask, build_mask

xgrammar = pytest.importorskip("xgrammar")


class _Fixed:
    """A grammar state that allows ``ok`` tokens only (or raises when filled)."""

    def __init__(self, ok: list[int] | None) -> None:
        self.ok = ok

    def fill(self, words: torch.Tensor, row: int) -> None:
        if self.ok is None:
            raise RuntimeError("broken matcher")
        words[row] = 0
        for t in self.ok:
            words[row, t // 32] |= 1 << (t % 32)


def test_mask_touches_constrained_rows_only_and_a_broken_row_fails_alone() -> None:
    V = 70
    logits = torch.randn(3, V)
    mask = build_mask([_Fixed([3, 64, 69]), None, _Fixed(None)], V)
    assert mask is not None and mask.rows.tolist() == [0, 2]
    assert "broken matcher" in mask.failed[2]
    out = apply_mask(logits, mask)
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == [3, 64, 69]
    assert torch.equal(out[1], logits[1])  # the free row is untouched
    assert not torch.isfinite(out[2]).any()  # nothing allowed: that row fails
    assert mask.pick(1) is None and mask.pick(0).rows.tolist() == [0]
    assert build_mask([None, None], V) is None
    assert allowed(torch.full((1, 3), -1, dtype=torch.int32), V).all()


def test_v0_sampler_fails_the_row_whose_grammar_breaks() -> None:
    from tandem.core.inputs.processor import InputProcessor
    from tandem.core.inputs.sampling_params import SamplingParams
    from tandem.v0.sampler import Sampler, SamplingRow

    inputs = InputProcessor(None, 70, 1 << 20, [])
    spec = inputs.process("r", [1], SamplingParams(temperature=1.0)).sampling
    rows = [SamplingRow(spec, [1], [], 7, grammar=g) for g in (_Fixed([5]), None, _Fixed(None))]
    got = Sampler()(torch.randn(3, 70), rows)
    assert got[0].token_id == 5 and got[0].error is None
    assert got[1].error is None
    assert "broken matcher" in (got[2].error or "")


def test_compiled_grammars_are_cached_and_refused_tokens_raise(tmp_path) -> None:
    from tandem.core.structured.compiler import Grammars
    from tandem.core.structured.engine import GrammarError
    from tandem.core.testing.tokenizer import make_tokenizer
    from tandem.core.text.tokenizer import load_tokenizer

    tok = load_tokenizer(make_tokenizer(tmp_path / "tok"))
    grammars = Grammars(tok.hf, 512, [2], cache_size=2)
    choice = StructuredOutputsParams(choice=["ab"]).spec()
    first = grammars.matcher(choice)
    grammars.matcher(choice)
    assert grammars.compilations == 1
    for i in range(3):
        grammars.matcher(GrammarSpec("regex", f"x{i}"))
    assert len(grammars) == 2 and grammars.compilations == 4  # least recently used out
    with pytest.raises(GrammarError, match="not allowed"):
        first.accept(tok.encode("zz", add_special_tokens=False)[0])
    for t in tok.encode("ab", add_special_tokens=False):
        first.accept(t)
    first.accept(2)
    assert first.terminated


def test_hermes_parser_whole_and_streamed() -> None:
    from tandem.core.server.tool_parsers import HermesParser, get_parser

    text = 'Sure.<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
    text += '<tool_call>{"name": "g", "parameters": {}}'  # the output ended inside it
    content, calls = HermesParser().parse(text)
    assert content == "Sure." and [(c.name, c.arguments) for c in calls] == [
        ("f", '{"x": 1}'),
        ("g", "{}"),
    ]
    assert HermesParser().parse("<tool_call>{oops</tool_call>") == (
        "<tool_call>{oops</tool_call>",
        [],
    )
    s = get_parser("hermes").streamer()
    shown = [s.feed(d) for d in ["Hi <", "tool", "_call>{", '"name"']]
    assert shown == ["Hi ", "", "", ""] and s.calling
    with pytest.raises(ValueError, match="unknown tool-call parser 'x'; known: hermes"):
        get_parser("x")


def test_the_utf8_guard_marks_surrogate_pairs_and_their_lead() -> None:
    from tandem.core.structured.utf8_guard import Utf8Guard

    vocab = [b"a", b"\xed", b"\xa0\x80", b"\x85", b"x\xed\xb0y", b"\xed\x9f\xbf", b""]
    guard = Utf8Guard.for_vocab(vocab, len(vocab))
    anywhere = allowed(guard.anywhere.unsqueeze(0), len(vocab))[0].tolist()
    after = allowed(guard.after_lead.unsqueeze(0), len(vocab))[0].tolist()
    assert anywhere == [True, True, True, True, False, True, True]  # x ED B0 y: a surrogate
    assert after == [True, True, False, True, False, True, True]  # A0 80 may not follow ED
    assert guard.ends_with_lead == {1}


def test_a_json_string_never_gets_an_encoded_surrogate(tmp_path) -> None:
    """The grammar engine counts ED A0 80 (a UTF-16 surrogate, not UTF-8) as one character
    of a string; the guard refuses it, so byte-level output always decodes."""
    import xgrammar as xgr

    from tandem.core.structured.compiler import Grammars
    from tandem.core.testing.tokenizer import make_tokenizer
    from tandem.core.text.tokenizer import load_tokenizer

    tok = load_tokenizer(make_tokenizer(tmp_path / "tok"))
    grammars = Grammars(tok.hf, 512, [2])
    decoded = xgr.TokenizerInfo.from_huggingface(tok.hf, vocab_size=512).decoded_vocab
    byte = {raw[0]: i for i, raw in enumerate(decoded) if len(raw) == 1}
    spec = StructuredOutputsParams(json={"type": "string", "maxLength": 6}).spec()
    state = grammars.matcher(spec)
    state.accept(byte[ord('"')])
    state.accept(byte[0xED])  # a lead byte: what may come next?
    words = torch.zeros(1, (512 + 31) // 32, dtype=torch.int32)
    state.fill(words, 0)
    ok = allowed(words, 512)[0]
    assert not any(ok[byte[b]] for b in range(0xA0, 0xC0))  # would encode a surrogate
    assert all(ok[byte[b]] for b in range(0x80, 0xA0))  # U+D000..U+D7FF are fine
    state.accept(byte[0x9F])
    state.accept(byte[0xBF])  # U+D7FF
    state.accept(byte[0xE1])  # another lead byte: its continuations are not held back
    state.fill(words, 0)
    assert allowed(words, 512)[0][byte[0xA0]]
