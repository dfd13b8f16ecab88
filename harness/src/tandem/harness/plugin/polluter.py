"""``--find-polluter TEST_ID``: bisect the tests run before TEST_ID down to the polluter.

Every trial runs a subset of the earlier tests (same order, same seeds) and then TEST_ID in
one fresh child, and looks only at TEST_ID's outcome.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from ..isolation.runner import Driver

_TRIALS = itertools.count()


def _target(items: list[pytest.Item], wanted: str) -> int:
    for index, item in enumerate(items):
        if item.nodeid == wanted:
            return index
    matches = [i for i, item in enumerate(items) if item.nodeid.endswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    raise pytest.UsageError(
        f"--find-polluter: {wanted!r} names {len(matches)} collected tests; give a full test id"
        f" (one of the collected ids, e.g. {items[0].nodeid!r})"
        if items
        else f"--find-polluter: no tests were collected, so {wanted!r} cannot be found"
    )


def _trial(driver: Driver, subset: list[pytest.Item], target: pytest.Item) -> bool:
    """True when ``target`` fails after ``subset``."""
    unit = ("polluter", next(_TRIALS))
    chain = [*subset, target]
    failed = False
    for item, nextitem in zip(chain, [*chain[1:], None]):
        outcome = driver.run(item, nextitem, lambda report: None, unit=unit)
        if item is target:
            failed = any(r.failed for r in outcome.reports)
    driver.finish()
    return failed


def hunt(
    driver: Driver, items: list[pytest.Item], wanted: str, say: Callable[[str], None]
) -> str | None:
    """The node id of the polluter (or None), explaining each step through ``say``."""
    index = _target(items, wanted)
    target, earlier = items[index], items[:index]
    say(f"find-polluter: {target.nodeid} after {len(earlier)} earlier tests")
    if _trial(driver, [], target):
        say("find-polluter: the test fails on its own; nothing pollutes it")
        return None
    if not _trial(driver, earlier, target):
        say("find-polluter: the test passes after all earlier tests; no polluter")
        return None
    while len(earlier) > 1:
        half = len(earlier) // 2
        first, second = earlier[:half], earlier[half:]
        if _trial(driver, first, target):
            earlier = first
        elif _trial(driver, second, target):
            earlier = second
        else:
            names = ", ".join(i.nodeid for i in earlier)
            say(f"find-polluter: no single polluter; together these pollute it: {names}")
            return None
        say(f"find-polluter: narrowed to {len(earlier)} test(s)")
    say(f"find-polluter: polluter is {earlier[0].nodeid}")
    return earlier[0].nodeid
