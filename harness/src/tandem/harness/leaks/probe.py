"""The probe: runs inside every Python child process of the code under test.

While it isolates, the harness puts a folder on ``PYTHONPATH`` whose ``sitecustomize.py``
calls ``start()`` at the child's start-up, and names a report folder in ``ENV``. The
probe watches the child's imports of watched modules (``watcher``) and, at the end of
each outermost watched import, writes a JSON report into that folder as soon as it sees

- a ``mock.patch(...).start()`` still active, or an attribute of a watched module that is
  no longer its clean object (a patch made while importing, e.g. in an engine's worker);
- an ``os.environ`` write made by watched code while it was being imported.

The child may end with ``os._exit`` (no atexit), so nothing waits for its end. The
harness reads and removes the reports after each test (``children``). Standard library
only, and only modules loaded at start-up: every Python child pays for this.
"""

from __future__ import annotations

import os
import sys

from .watcher import CleanState, ImportWatcher, active_patches, describe_patch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

ENV = "HARNESS_CHILD_PROBE"  # lines: report folder, the harness's package, watched prefixes
_SKIPPED_FRAMES = ("os", "_collections_abc")  # os.environ.update / setdefault call through


class Probe:
    def __init__(self, folder: str, own: str, prefixes: list[str]) -> None:
        self.folder = folder
        self.watcher = ImportWatcher(own)
        self.watcher.before_outermost = self._started
        self.watcher.after_outermost = self._finished
        self.patches: tuple[object, ...] = ()
        self.env_writes: list[str] = []
        self.reported = 0
        self.active = True
        self.watcher.watch(prefixes)
        _trace_environ(self)

    def stop(self) -> None:
        self.active = False
        self.watcher.uninstall()

    def _started(self, name: str) -> None:
        self.patches = tuple(active_patches())
        self.env_writes = []

    def _finished(self, name: str) -> None:
        if not self.active:
            return
        found = [describe_patch(p) for p in active_patches() if not _among(p, self.patches)]
        for module_name, clean in list(self.watcher.clean.items()):
            module = sys.modules.get(module_name)
            if module is None or clean.intact(module):
                continue
            found += [text for _, text, _ in clean.changes(module_name, module)]
            self.watcher.clean[module_name] = CleanState(module)  # told once
        found += self.env_writes
        self.env_writes = []
        if found:
            self._write([f"{text} (while importing {name})" for text in dict.fromkeys(found)])

    def env_written(self, key: str, old: str | None, new: str | None) -> None:
        """A write to os.environ: noted when watched code made it during a watched import."""
        if not self.active or self.watcher.depth == 0 or old == new:
            return
        frame = sys._getframe(2)
        while frame is not None and frame.f_globals.get("__name__") in _SKIPPED_FRAMES:
            frame = frame.f_back
        module = frame.f_globals.get("__name__", "") if frame is not None else ""
        if frame is None or not isinstance(module, str) or not self.watcher.watched(module):
            return
        where = f"{frame.f_code.co_filename}:{frame.f_lineno} ({module})"
        change = "removed" if new is None else f"set to {new!r}"
        self.env_writes.append(f"env var {key} was {change} by {where}")

    def _write(self, problems: list[str]) -> None:
        import json  # only a child with something to tell pays for it

        self.reported += 1
        path = os.path.join(self.folder, f"{os.getpid()}-{self.reported}.json")
        argv = getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv]
        data = {"pid": os.getpid(), "argv": list(argv), "problems": problems}
        try:
            with open(path + ".part", "w") as f:
                json.dump(data, f)
            os.replace(path + ".part", path)
        except OSError:  # the harness has gone (its folder with it)
            pass


def _among(item: object, items: tuple[object, ...]) -> bool:
    return any(item is other for other in items)


def _trace_environ(probe: Probe) -> None:
    cls = type(os.environ)

    def wrap(original: Callable[..., None], deleting: bool) -> Callable[..., None]:
        def traced(self: object, key: str, *value: str) -> None:
            old = os.environ.get(key) if self is os.environ else None
            original(self, key, *value)
            if self is os.environ:
                probe.env_written(key, old, None if deleting else value[0])

        traced.__name__ = original.__name__
        traced.__qualname__ = original.__qualname__
        return traced

    cls.__setitem__ = wrap(cls.__setitem__, False)  # type: ignore[method-assign]
    cls.__delitem__ = wrap(cls.__delitem__, True)  # type: ignore[method-assign]


_PROBE: list[Probe] = []


def start() -> None:
    """Start the probe if the harness asked for it (``ENV``); once per process."""
    config = os.environ.get(ENV)
    if not config or _PROBE:
        return
    folder, own, *prefixes = config.split("\n")
    if prefixes:
        _PROBE.append(Probe(folder, own, prefixes))


def stop() -> None:
    """Stop a probe this process inherited (a pytest process that runs the harness itself)."""
    for probe in _PROBE:
        probe.stop()
