"""Reseed ``random``, numpy and torch (each if loaded) before each test."""

from __future__ import annotations

import random
import sys


def pick() -> int:
    return random.SystemRandom().randrange(2**31)


def reseed(seed: int) -> None:
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:  # loaded by the tests that use it; importing it here costs a child
        numpy.random.seed(seed % 2**32)
    torch = sys.modules.get("torch")
    manual_seed = getattr(torch, "manual_seed", None)
    if manual_seed is not None:
        manual_seed(seed)


def warm() -> None:
    """Load what ``reseed`` needs lazily (numpy.random) once, before children are forked."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        getattr(numpy, "random", None)
