"""Streaming detokenization: turn generated ids into text deltas, one step at a time.

Each step decodes a short window of ids twice, ``decode(ids[start:read])`` and
``decode(ids[start:])``, and takes the difference: decoders that treat the first token
of a call specially (e.g. dropping a leading space) do so in both, so the difference is
exactly the new text. The window starts at the last point where the text was complete.

A multi-byte UTF-8 character split over byte-level tokens decodes to U+FFFD until its
last byte arrives. Only a trailing U+FFFD can still change when more bytes come, so the
trailing run of U+FFFD is held back; everything before it is final and is released.
``flush()`` releases what is held when the sequence ends (a truly invalid sequence then
shows as U+FFFD, as it does in ``tokenizer.decode``).

Only ``decode`` is used, so a :class:`~tandem.core.text.tokenizer.TextDecoder` (decoding
without transformers, as engine v1's detokenizer process does) serves as well as the
full :class:`~tandem.core.text.tokenizer.Tokenizer`.

Invariant: the concatenation of every delta (flush included) equals
``tokenizer.decode(output_ids, skip_special_tokens)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from tandem.core.text.tokenizer import TextDecoder, Tokenizer

REPLACEMENT = "\ufffd"
CONTEXT_TOKENS = 5


class IncrementalDetokenizer:
    """Detokenize one sequence's output ids incrementally."""

    __slots__ = ("_ctx", "_pending", "_read", "_skip", "_start", "ids", "text", "tokenizer")

    def __init__(
        self,
        tokenizer: Tokenizer | TextDecoder,
        prompt_token_ids: Sequence[int] = (),
        skip_special_tokens: bool = True,
    ) -> None:
        if not isinstance(tokenizer, (Tokenizer, TextDecoder)):
            raise TypeError(
                f"tokenizer must be a tandem Tokenizer, got {type(tokenizer).__name__} "
                "(a TextDecoder, decoding only, works too)"
            )
        if not isinstance(skip_special_tokens, bool):
            raise TypeError(
                f"skip_special_tokens must be a bool, got {type(skip_special_tokens).__name__}"
            )
        self.tokenizer = tokenizer
        self._skip = skip_special_tokens
        context = self._context(list(prompt_token_ids))
        self.ids: list[int] = context  # context ids, then output ids
        self._ctx = len(context)
        self._start = 0  # window start: the text was complete here
        self._read = len(context)  # ids before this have all their text released
        self._pending = 0  # chars of the text after ``_read`` already released
        self.text = ""

    def _context(self, prompt: list[int]) -> list[int]:
        """The prompt's last few ids, cut so that their text ends complete.

        Decoding the first output ids after some prompt context keeps decoders that
        strip a leading space from stripping the first output token's space.
        """
        for n in range(min(CONTEXT_TOKENS, len(prompt)), 0, -1):
            tail = prompt[-n:]
            if not self._decode(tail).endswith(REPLACEMENT):
                return tail
        return []

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self._skip)

    @property
    def output_token_ids(self) -> list[int]:
        return self.ids[self._ctx :]

    def add(self, new_token_ids: Sequence[int]) -> str:
        """Append generated ids; return the text they release (possibly "")."""
        new = list(new_token_ids)
        if not new:
            return ""
        self.ids.extend(new)
        return self._release(final=False)

    def flush(self) -> str:
        """Release any held text; call once when the sequence is finished."""
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        base = self._decode(self.ids[self._start : self._read])
        full = self._decode(self.ids[self._start :])
        if not full.startswith(base):
            # A decoder that is not prefix-stable over this window: fall back to
            # decoding every output id from the start (the released text stays).
            self._start = self._read = self._ctx
            self._pending = len(self.text)
            base, full = "", self._decode(self.ids[self._ctx :])
        fresh = full[len(base) :]
        stable = fresh if final else fresh.rstrip(REPLACEMENT)
        delta = stable[self._pending :]
        if len(stable) == len(fresh):
            # The text is complete: the window can move up to here.
            self._start, self._read, self._pending = self._read, len(self.ids), 0
        else:
            self._pending = max(self._pending, len(stable))
        self.text += delta
        return delta

    def __repr__(self) -> str:
        return f"IncrementalDetokenizer(outputs={len(self.ids) - self._ctx}, text={self.text!r})"
