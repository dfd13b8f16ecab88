"""Per-test leak checks: snapshot before setup, compare after teardown, name every culprit.

A fixture wider than function scope (module, class, package, session) is set up during one
test and torn down during another: what it changes while being set up or torn down is
moved out of that test's account (``rebase``) into the fixture's own (``scopes``), which
is checked when the fixture is torn down.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from . import imports, leak_attrs, leak_env, leak_ops, leak_procs, leak_threads
from .options import Settings


@dataclass(slots=True)
class Snap:
    env: dict[str, str]
    writes: int  # position in the env write log
    procs: set[tuple[int, float]]
    threads: set[Any]
    attrs: dict[tuple[str, str], Any]
    loaded: int  # position in the log of watched imports
    patches: list[Any]
    ops: set[str] | int
    op_problems: int
    ignore: frozenset[str] = field(default_factory=frozenset)
    skip_writes: list[tuple[int, int]] = field(default_factory=list)  # wider fixtures' writes
    skip_ops: set[str] = field(default_factory=set)  # ops wider fixtures registered


def take(settings: Settings, ignore: frozenset[str] = frozenset()) -> Snap:
    return Snap(
        env=leak_env.snapshot(),
        writes=leak_env.mark(),
        procs=leak_procs.snapshot(),
        threads=leak_threads.snapshot(),
        attrs=leak_attrs.snapshot(settings.watch_prefixes),
        loaded=imports.mark(),
        patches=leak_attrs.active_patches(),
        ops=leak_ops.snapshot(settings.ops_namespace),
        op_problems=len(leak_ops.problems()),
        ignore=ignore,
    )


def new_ops(a: Snap, b: Snap, namespace: str) -> set[str]:
    if isinstance(a.ops, int) and isinstance(b.ops, int):
        return leak_ops.defined_between(a.ops, b.ops)
    return leak_ops.names(namespace) - (a.ops if isinstance(a.ops, set) else set())


def rebase(snap: Snap, a: Snap, b: Snap, settings: Settings) -> None:
    """Take what changed between ``a`` and ``b`` (a wider fixture at work) off ``snap``."""
    for name in set(a.env) | set(b.env):
        if a.env.get(name) != b.env.get(name):
            if name in b.env:
                snap.env[name] = b.env[name]
            else:
                snap.env.pop(name, None)
    snap.skip_writes.append((a.writes, b.writes))
    snap.procs |= b.procs - a.procs
    snap.threads |= b.threads - a.threads
    missing = object()
    for key in set(a.attrs) | set(b.attrs):
        value = b.attrs.get(key, missing)
        if a.attrs.get(key, missing) is not value:
            if value is missing:
                snap.attrs.pop(key, None)
            else:
                snap.attrs[key] = value
    snap.patches = snap.patches + [p for p in b.patches if not any(p is q for q in a.patches)]
    snap.skip_ops |= new_ops(a, b, settings.ops_namespace)


def compare(snap: Snap, settings: Settings) -> list[str]:
    """Leaks since ``snap`` (state is restored where it can be)."""
    written = leak_env.writes(snap.writes, snap.skip_writes)
    leaks = leak_env.diff(snap.env, snap.ignore, written)
    leak_env.restore(snap.env, snap.ignore)
    leaks += leak_attrs.diff_patches(snap.patches)
    leaks += leak_attrs.diff(snap.attrs, settings.watch_prefixes)
    if imports.mark() > snap.loaded:  # modules the test imported: against their clean state
        leaks += imports.changed(snap.loaded, {name for name, _ in snap.attrs})
    leaks += leak_procs.diff(snap.procs)
    leaks += leak_threads.diff(snap.threads)
    leaks += leak_ops.diff(snap.ops, settings.ops_namespace, snap.skip_ops)
    leaks += leak_ops.problems()[snap.op_problems :]
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
