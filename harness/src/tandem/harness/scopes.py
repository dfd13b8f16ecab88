"""Fixtures wider than a test: what each one changed is its own, checked at its teardown.

When a module-, class-, package- or session-scoped fixture is set up, the state before and
after is compared: that change is the fixture's footprint and is taken off the current
test's account. When the fixture is torn down, whatever of its footprint is still there
(an env var it set, a process it started, a patch it made) is a leak of that fixture,
reported on the test whose teardown ended it, and undone.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

import psutil

from . import checks, leak_attrs, leak_env, leak_ops, leak_procs
from .options import Settings


@dataclass(slots=True)
class Footprint:
    label: str
    before: checks.Snap
    after: checks.Snap


_FOOTPRINTS: dict[int, Footprint] = {}
_TEARDOWN: dict[int, checks.Snap] = {}  # state just before a wider fixture's teardown code


def wider(fixturedef: Any) -> bool:
    return getattr(fixturedef, "scope", "function") != "function"


def label(fixturedef: Any, nodeid: str) -> str:
    return f"fixture {fixturedef.argname!r} ({fixturedef.scope} scope, set up for {nodeid})"


def set_up(fixturedef: Any, nodeid: str, before: checks.Snap, after: checks.Snap) -> None:
    """Remember what a wider fixture's setup changed, to check it when it is torn down."""
    _FOOTPRINTS[id(fixturedef)] = Footprint(label(fixturedef, nodeid), before, after)


def tearing_down(fixturedef: Any, snap: checks.Snap) -> None:
    _TEARDOWN[id(fixturedef)] = snap


def torn_down(fixturedef: Any, settings: Settings) -> tuple[checks.Snap | None, list[str]]:
    """The snapshot taken before its teardown, and the leaks of the fixture just torn down."""
    before_teardown = _TEARDOWN.pop(id(fixturedef), None)
    footprint = _FOOTPRINTS.pop(id(fixturedef), None)
    if footprint is None:
        return before_teardown, []
    leaks = _remaining(footprint, settings)
    return before_teardown, [f"{footprint.label}: {leak}" for leak in leaks]


def _remaining(fp: Footprint, settings: Settings) -> list[str]:
    a, b = fp.before, fp.after
    out: list[str] = []
    for name in sorted(set(a.env) | set(b.env)):
        old, now = a.env.get(name), os.environ.get(name)
        if old != b.env.get(name) and now != old:
            was = "unset" if old is None else repr(old)
            now_text = "unset" if now is None else repr(now)
            out.append(f"env var {name} is still {now_text} (it was {was} before the fixture)")
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old
    for name, write in leak_env.writes(a.writes, [(b.writes, 1 << 62)]).items():
        if write.value is not None and os.environ.get(name) == write.value == a.env.get(name):
            out.append(f"env var {name} was written by {write.origin} and never restored")
    for pid, created in sorted(b.procs - a.procs):
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if leak_procs.started(proc) == created and proc.status() != psutil.STATUS_ZOMBIE:
                cmd = " ".join(proc.cmdline()) or proc.name()
                out.append(f"child process {pid} it started is still alive: {cmd}")
                proc.kill()
                psutil.wait_procs([proc], timeout=2)
    for thread in b.threads - a.threads:
        thread.join(0.2)
        if thread.is_alive():
            out.append(f"non-daemon thread {thread.name!r} it started is still alive")
    missing = object()
    started = [p for p in b.patches if not any(p is q for q in a.patches)]
    others = [p for p in leak_attrs.active_patches() if not any(p is q for q in started)]
    out += leak_attrs.diff_patches(others)
    patched = {key: old for key, old in a.attrs.items() if b.attrs.get(key, missing) is not old}
    out += leak_attrs.diff(patched, ()) if patched else []
    registered = checks.new_ops(a, b, settings.ops_namespace)
    alive = leak_ops.names(settings.ops_namespace) & registered
    out += [f"custom op {name} it registered was not removed" for name in sorted(alive)]
    return out
