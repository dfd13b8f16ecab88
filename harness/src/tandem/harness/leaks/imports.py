"""Patches made at import time, and hooks that run as soon as a module is imported.

The per-test checks compare against a snapshot taken when a test starts, so a
``mock.patch(...).start()`` or an assignment executed while an engine module or a test
module is imported would be invisible to them: every test would run with the swap. The
watcher (``watcher``) therefore records the attributes of every watched module the moment
its own code has run (its *clean* state). Whatever changes a module's clean state later
is a patch: during a watched import (a preload, a test module) it fails the run at the end
of collection, naming the import; during a test it is that test's leak.

The same watcher runs callbacks right after a module is imported (``on_import``): the op
recorder is installed the moment torch is loaded, even when a test loads it lazily. The
watcher of a run belongs to the run (``plugin.state.HarnessState``), not to this module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from . import attributes
from .watcher import ImportWatcher, active_patches, describe_patch

OWN = __name__.rpartition(".")[0].rpartition(".")[0]  # the harness itself is never watched


def since_import(watcher: ImportWatcher) -> list[str]:
    """Every change of a watched module's attributes since its import (nothing is undone)."""
    return [text for _, text, _ in attributes.changes(watcher)]


@contextlib.contextmanager
def watch(watcher: ImportWatcher, what: str, problems: list[str]) -> Iterator[None]:
    """Record in ``problems`` what importing ``what`` changed in the watcher's modules."""
    if not watcher.prefixes:
        yield
        return
    watcher.install()
    before = attributes.dirty(watcher)
    patches = active_patches()
    try:
        yield
    finally:
        found = [describe_patch(p) for p in active_patches() if not any(p is q for q in patches)]
        found += [
            text
            for key, text, _ in attributes.changes(watcher)
            if key not in before or attributes.now(key) is not before[key]
        ]
        problems += [f"{change} (while importing {what})" for change in dict.fromkeys(found)]
