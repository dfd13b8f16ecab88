"""Leak check: a POSIX shared-memory segment (``/dev/shm``) a test created and left.

``/dev/shm`` is the machine's, and other processes (other test runs) create segments
in it at any time, so a new name counts as this test's only when this process still has
it open or mapped, or the name carries this process's id (as torch's segments do). Such
a segment is named and unlinked. A segment already closed here whose name says nothing
of its creator cannot be told from another process's, and is not reported.

The folder is listed only when it may have changed: a name made or removed there sets
the folder's change time, and a folder whose stat is the same as at the last listing,
with a change time older than that listing by more than the clock's coarse step, has the
same names (a change in the same step as the listing cannot be told apart: then it is
listed again).
"""

from __future__ import annotations

import contextlib
import os
import time

from .base import Leak

SHM = "/dev/shm"
Names = frozenset[str]
STEP_NS = 50_000_000  # a change this much older than a listing is in it, whatever the clock


class _Listing:
    """``/dev/shm``'s names, listed again only when its stat says they may have changed."""

    def __init__(self) -> None:
        self.stamp: tuple[int, ...] | None = None  # the folder's stat at the last listing
        self.names: Names = frozenset()

    def __call__(self) -> Names:
        try:
            st = os.stat(SHM)
        except OSError:
            self.stamp = None
            return frozenset()
        stamp = (st.st_ino, st.st_size, st.st_nlink, st.st_mtime_ns, st.st_ctime_ns)
        if stamp == self.stamp:
            return self.names
        listed_at = time.time_ns()
        try:
            names = frozenset(os.listdir(SHM))
        except OSError:
            self.stamp = None
            return frozenset()
        settled = listed_at - max(st.st_mtime_ns, st.st_ctime_ns) > STEP_NS
        self.stamp, self.names = (stamp if settled else None), names
        return names


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
        self._names = _Listing()

    def snapshot(self) -> Names:
        carried, self._carried = self._carried, None
        return carried if carried is not None else self._names()

    def compare(self, before: Names) -> list[Leak]:
        now = self._names()
        leaks = _leaks(now - before, "")
        self._carried = None if leaks else now
        return leaks

    def absorb(self, snap: Names, start: Names, end: Names) -> Names:
        return snap | (end - start)

    def left_over(self, start: Names, end: Names) -> list[Leak]:
        return _leaks((end - start) & self._names(), " it created")
