"""Building a model without its random initialization (the loader fills every weight).

The loader builds a model on the meta device and then fills it from the checkpoint, so
the initial values are never used; on the meta device the init ops (``normal_``,
``uniform_``) also run through torch's Python references, whose first use imports
``torch._dynamo`` (~1 s of an engine's start-up). Layers of this package that own a
random init skip it inside :func:`no_init`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from torch import nn

_SKIP = ContextVar("tandem_skip_init", default=False)


@contextmanager
def no_init() -> Iterator[None]:
    """Layers built inside leave their weights as allocated (uninitialized)."""
    token = _SKIP.set(True)
    try:
        yield
    finally:
        _SKIP.reset(token)


def skipping() -> bool:
    return _SKIP.get()


class Embedding(nn.Embedding):
    """``nn.Embedding`` that skips its random init inside :func:`no_init`."""

    def reset_parameters(self) -> None:
        if not skipping():
            super().reset_parameters()
