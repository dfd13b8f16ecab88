"""Reseed ``random``, numpy and torch (each if loaded) before each test, with one seed.

With pytest-randomly active there is still one seed: the harness takes randomly's, or, when
``--harness-seed`` is given, hands that to randomly (its order and per-test reseeding then
follow it), so one number replays a run.
"""

from __future__ import annotations

import os
import random
import sys
from typing import Any

import pytest

SOURCES = {
    "option": "--harness-seed",
    "option+randomly": "--harness-seed, also pytest-randomly's",
    "controller": "from the xdist controller",
    "randomly": "pytest-randomly's --randomly-seed; replay with --harness-seed",
    "random": "random; replay with --harness-seed",
}


def pick() -> int:
    return random.SystemRandom().randrange(2**31)


def _randomly(config: pytest.Config) -> bool:
    return config.pluginmanager.hasplugin("randomly") and isinstance(
        getattr(config.option, "randomly_seed", None), int
    )


def choose(config: pytest.Config, given: int | None) -> tuple[int, str]:
    """The seed of this run and where it came from (a key of ``SOURCES``)."""
    explicit = getattr(config.option, "harness_seed", None) is not None
    if given is not None and explicit:
        if _randomly(config):
            config.option.randomly_seed = given
            return given, "option+randomly"
        return given, "option"
    if given is not None:
        return given, "controller"
    if _randomly(config):
        return int(config.option.randomly_seed), "randomly"
    return pick(), "random"


class Reseeder:
    """Reseeds before each test; remembers which process gave every device the seed."""

    def __init__(self) -> None:
        self.seeded: tuple[int, int] | None = None  # (pid, seed) of the last full seeding
        self.state: tuple[int, tuple[Any, ...]] | None = None  # (seed, random's state right after)

    def __call__(self, seed: int) -> None:
        if self.state is not None and self.state[0] == seed:
            random.setstate(self.state[1])  # the same state as seed(seed), at half its cost
        else:
            random.seed(seed)
            self.state = (seed, random.getstate())
        numpy = sys.modules.get("numpy")
        if numpy is not None:  # loaded by the tests that use it; importing it costs a child
            numpy.random.seed(seed % 2**32)
        torch = sys.modules.get("torch")
        if getattr(torch, "manual_seed", None) is None:
            return
        if self.seeded != (os.getpid(), seed):
            # every device; one not started yet (CUDA) takes the seed when it starts, so
            # later tests need only reseed the CPU generator and the devices already started
            torch.manual_seed(seed)
            self.seeded = (os.getpid(), seed)
            return
        torch.default_generator.manual_seed(seed)  # ~1 us; torch.manual_seed costs ~0.3 ms
        for name in ("cuda", "xpu"):
            device = sys.modules.get(f"torch.{name}")
            if device is not None and device.is_initialized():
                device.manual_seed_all(seed)


def warm() -> None:
    """Load what ``reseed`` needs lazily (numpy.random) once, before children are forked."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        getattr(numpy, "random", None)
