"""Leak check: a POSIX shared-memory segment (``/dev/shm``) a test created and left.

``/dev/shm`` is the machine's, and other processes (other test runs) create segments
in it at any time, so a new name counts as this test's only when this process still has
it open or mapped, or the name carries this process's id (as torch's segments do). Such
a segment is named and unlinked. A segment already closed here whose name says nothing
of its creator cannot be told from another process's, and is not reported.
"""

from __future__ import annotations

import contextlib
import os

from .base import Leak

SHM = "/dev/shm"
Names = frozenset[str]


def _names() -> Names:
    try:
        return frozenset(os.listdir(SHM))
    except OSError:
        return frozenset()


def _held_here() -> set[str]:
    """Segments this process has open (a descriptor) or mapped."""
    held = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/self/fd/{fd}")
                if target.startswith(SHM + "/"):
                    held.add(target[len(SHM) + 1 :].removesuffix(" (deleted)"))
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split(maxsplit=5)[-1].strip() if line.count(" ") >= 5 else ""
            if path.startswith(SHM + "/"):
                held.add(path[len(SHM) + 1 :].removesuffix(" (deleted)"))
    return held


def _unlink(name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(SHM, name))


def _leaks(new: Names, whose: str) -> list[Leak]:
    if not new:
        return []
    pid = str(os.getpid())
    held = _held_here()
    ours = sorted(n for n in new if n in held or pid in n.split("_") or pid in n.split("-"))
    return [
        Leak(f"shared-memory segment{whose} {SHM}/{name} is still there", lambda n=name: _unlink(n))
        for name in ours
    ]


class ShmCheck:
    """Snapshot: the names in ``/dev/shm``; the listing made at a test's end is the next
    test's snapshot when nothing was undone (as in ``sockets``)."""

    def __init__(self) -> None:
        self._carried: Names | None = None

    def snapshot(self) -> Names:
        carried, self._carried = self._carried, None
        return carried if carried is not None else _names()

    def compare(self, before: Names) -> list[Leak]:
        now = _names()
        leaks = _leaks(now - before, "")
        self._carried = None if leaks else now
        return leaks

    def absorb(self, snap: Names, start: Names, end: Names) -> Names:
        return snap | (end - start)

    def left_over(self, start: Names, end: Names) -> list[Leak]:
        return _leaks((end - start) & _names(), " it created")
