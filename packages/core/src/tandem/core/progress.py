"""Progress of long waits (a model converted, downloaded or built), told through logging.

Library code calls :func:`say`; the messages go to the ``tandem`` logger at INFO. The
``tandem`` command line shows them on stderr (:func:`to_stderr`), so a first run that
converts or downloads a model is never silent; a program using ``LLM`` chooses itself.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

LOGGER = logging.getLogger("tandem")


def say(message: str) -> None:
    LOGGER.info(message)


@contextlib.contextmanager
def to_stderr() -> Iterator[None]:
    """Show the ``tandem`` logger's INFO messages on stderr as ``tandem: ...`` meanwhile."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("tandem: %(message)s"))
    level = LOGGER.level
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.INFO)
    try:
        yield
    finally:
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(level)
