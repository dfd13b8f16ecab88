"""One sample's place in its grammar: which tokens may come next, and what came."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from tandem.core.structured.engine import GrammarError


class GrammarState:
    """Wraps one matcher. ``fill`` writes the allowed next tokens into a bitmask row;
    ``accept`` advances over the token drawn (a refused token raises GrammarError)."""

    __slots__ = ("_also", "_matcher")

    def __init__(self, matcher: Any, also: Tensor | None = None) -> None:
        self._matcher = matcher
        self._also = also  # [W] int32 words every filled row is ANDed with (None: none)

    @property
    def terminated(self) -> bool:
        """The grammar is complete and its stop token was accepted."""
        return bool(self._matcher.is_terminated())

    def fill(self, bitmask: Any, row: int) -> None:
        if self.terminated:
            raise GrammarError("the grammar already ended; no token may follow")
        self._matcher.fill_next_token_bitmask(bitmask, row)
        if self._also is not None:
            bitmask[row] &= self._also

    def accept(self, token: int) -> None:
        if self.terminated:
            raise GrammarError(f"the grammar already ended; token {token} cannot follow")
        if not self._matcher.accept_token(token):
            raise GrammarError(f"token {token} is not allowed by the grammar here")
