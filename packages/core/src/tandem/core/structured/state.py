"""One sample's place in its grammar: which tokens may come next, and what came."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from tandem.core.structured.engine import GrammarError
from tandem.core.structured.utf8_guard import Utf8Guard


class GrammarState:
    """Wraps one matcher. ``fill`` writes the allowed next tokens into a bitmask row;
    ``accept`` advances over the token drawn (a refused token raises GrammarError).
    With a ``guard`` the output stays valid UTF-8 (:mod:`.utf8_guard`)."""

    __slots__ = ("_after_lead", "_also", "_guard", "_matcher")

    def __init__(
        self, matcher: Any, also: Tensor | None = None, guard: Utf8Guard | None = None
    ) -> None:
        self._matcher = matcher
        self._also = also  # [W] int32 words every filled row is ANDed with (None: none)
        self._guard = guard
        self._after_lead = False  # the output so far ends with a surrogate's lead byte

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
        if self._guard is not None:
            bitmask[row] &= self._guard.words(self._after_lead)

    def accept(self, token: int) -> None:
        if self.terminated:
            raise GrammarError(f"the grammar already ended; token {token} cannot follow")
        if not self._matcher.accept_token(token):
            raise GrammarError(f"token {token} is not allowed by the grammar here")
        if self._guard is not None:
            self._after_lead = token in self._guard.ends_with_lead
