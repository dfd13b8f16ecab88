"""Per-test leak checks: snapshot before setup, compare after teardown, name every culprit.

Things changed while a wider-scoped fixture (module, class, session) was being set up for
this test belong to that fixture, not to the test, and are excused for this test.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from . import leak_attrs, leak_env, leak_ops, leak_procs, leak_threads
from .options import Settings


@dataclass(slots=True)
class Snap:
    env: dict[str, str]
    procs: set[tuple[int, float]]
    threads: set[Any]
    attrs: dict[tuple[str, str], Any]
    patches: list[Any]
    ops: set[str] | int
    excused: Snap | None = None
    ignore: frozenset[str] = field(default_factory=frozenset)
    wider: list[Any] = field(default_factory=list)
    before_teardown: dict[str, str] | None = None


def take(settings: Settings, ignore: frozenset[str]) -> Snap:
    return Snap(
        env=leak_env.snapshot(),
        procs=leak_procs.snapshot(),
        threads=leak_threads.snapshot(),
        attrs=leak_attrs.snapshot(settings.watch_prefixes),
        patches=leak_attrs.active_patches(),
        ops=leak_ops.snapshot(settings.ops_namespace),
        ignore=ignore,
    )


def _wider(item: pytest.Item) -> list[Any]:
    info = getattr(item, "_fixtureinfo", None)
    out = []
    for defs in getattr(info, "name2fixturedefs", {}).values():
        if defs and getattr(defs[-1], "scope", "function") != "function":
            out.append(defs[-1])
    return out


def wider_setup_pending(item: pytest.Item) -> bool:
    """True when this test's setup will create a fixture wider than function scope."""
    return any(getattr(f, "cached_result", 1) is None for f in _wider(item))


def teardown_starts(item: pytest.Item, snap: Snap) -> None:
    """Before teardown: remember the live wider fixtures, in case this teardown ends them."""
    snap.wider = [f for f in _wider(item) if getattr(f, "cached_result", None) is not None]
    if snap.wider:
        snap.before_teardown = leak_env.snapshot()


def excuse(snap: Snap, settings: Settings) -> None:
    """After setup: remember what the wider fixtures changed, so it is not blamed."""
    snap.excused = take(settings, snap.ignore)


def compare(snap: Snap, settings: Settings) -> list[str]:
    """Leaks since ``snap`` (state is restored where it can be)."""
    ignore = set(snap.ignore)
    procs, threads, attrs, patches, ops = (
        snap.procs,
        snap.threads,
        snap.attrs,
        snap.patches,
        snap.ops,
    )
    if snap.excused is not None:
        after = snap.excused
        ignore |= {k for k in set(after.env) | set(snap.env) if after.env.get(k) != snap.env.get(k)}
        procs, threads = procs | after.procs, threads | after.threads
        ops = after.ops if isinstance(ops, int) else ops | after.ops  # type: ignore[operator]
        attrs = {**after.attrs, **{k: v for k, v in attrs.items() if k not in after.attrs}}
        patches = patches + after.patches
    if snap.before_teardown is not None and any(
        getattr(f, "cached_result", None) is None for f in snap.wider
    ):
        env, now = snap.before_teardown, leak_env.snapshot()
        ignore |= {k for k in set(env) | set(now) if env.get(k) != now.get(k)}
    frozen = frozenset(ignore)
    leaks = leak_env.diff(snap.env, frozen)
    leak_env.restore(snap.env, frozen)
    leaks += leak_attrs.diff_patches(patches)
    leaks += leak_attrs.diff(attrs, settings.watch_prefixes)
    leaks += leak_procs.diff(procs)
    leaks += leak_threads.diff(threads)
    leaks += leak_ops.diff(ops, settings.ops_namespace)
    return leaks


def blame(nodeid: str, report: pytest.TestReport, leaks: list[str], mode: str) -> None:
    """Fail the teardown report with the leaks (``fail``), or attach them to it (``warn``)."""
    text = f"leak check: {nodeid} left state behind:\n" + "\n".join(f"  - {x}" for x in leaks)
    if mode == "warn":
        report.sections.append(("harness leaks (warn)", text))
        report.user_properties.extend(("harness_leak", leak) for leak in leaks)
        return
    report.outcome = "failed"
    if report.longrepr is None:
        report.longrepr = text
    else:
        report.sections.append(("harness leaks", text))
