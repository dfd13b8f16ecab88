"""No encoded surrogate in constrained output.

The grammar engine reads a string's characters as UTF-8 byte sequences and takes a
three-byte sequence that encodes a UTF-16 surrogate (U+D800..U+DFFF: a lead byte 0xED
followed by 0xA0..0xBF) as one character. Such bytes are not UTF-8: they decode to
three U+FFFD, so a JSON string the grammar counted as 6 characters comes out as 8, and
a byte-level model that draws them breaks ``maxLength`` or a pattern. Every constrained
row is held to valid UTF-8 here: a token that holds such a pair is refused everywhere,
and after a token that ends with 0xED one that starts with 0xA0..0xBF is refused too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import torch
from torch import Tensor

SURROGATE_LEAD = 0xED
SURROGATE_SECOND = range(0xA0, 0xC0)  # after 0xED: a surrogate; 0x80..0x9F are fine


def pack_words(ok: Tensor) -> Tensor:
    """[N] bool (N a multiple of 32) -> [N / 32] int32 words, bit i of word w for ok[32w+i]."""
    bits = ok.view(-1, 32).to(torch.int64) << torch.arange(32, dtype=torch.int64)
    words = bits.sum(dim=1)  # [W] in [0, 2**32)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def _holds_surrogate(raw: bytes) -> bool:
    return any(a == SURROGATE_LEAD and b in SURROGATE_SECOND for a, b in pairwise(raw))


@dataclass(frozen=True, slots=True)
class Utf8Guard:
    """``anywhere``: [W] words of the tokens that hold no encoded surrogate;
    ``after_lead``: of those, the ones that may follow a trailing 0xED;
    ``ends_with_lead``: the tokens whose last byte is 0xED."""

    anywhere: Tensor
    after_lead: Tensor
    ends_with_lead: frozenset[int]

    @classmethod
    def for_vocab(cls, decoded: Sequence[bytes], vocab_size: int) -> Utf8Guard:
        """The guard of a vocabulary given as each token's bytes."""
        size = ((vocab_size + 31) // 32) * 32
        anywhere = torch.ones(size, dtype=torch.bool)
        after = torch.ones(size, dtype=torch.bool)
        ends: set[int] = set()
        for token, raw in enumerate(decoded[:vocab_size]):
            if _holds_surrogate(raw):
                anywhere[token] = after[token] = False
            elif raw and raw[0] in SURROGATE_SECOND:
                after[token] = False
            if raw and raw[-1] == SURROGATE_LEAD:
                ends.add(token)
        return cls(pack_words(anywhere), pack_words(after), frozenset(ends))

    def words(self, after_lead: bool) -> Tensor:
        """The mask of the next token: after a trailing 0xED, or anywhere else."""
        return self.after_lead if after_lead else self.anywhere
