"""Leak check: child processes a test started and left running (they are killed).

The process that runs tests becomes a child subreaper (Linux): a process that its parent
left behind (``sh -c "server &"``, a daemon's double fork) is re-parented to it instead of
to init, so it shows up here as a child and is named and ended like any other.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Callable

import psutil

from .base import Leak

_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1

Procs = frozenset[tuple[int, float]]  # (pid, start time) of live descendants


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux only); True when it took effect."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(signum: int = 9) -> bool:
    """Have the kernel send ``signum`` to this process when its parent dies (Linux only)."""
    return _prctl(_PR_SET_PDEATHSIG, signum)


def end_all() -> None:
    """Kill every descendant still alive (a process that is about to exit calls this)."""
    for leak in ProcessCheck().compare(frozenset()):
        if leak.undo is not None:
            leak.undo()


def _children() -> list[psutil.Process]:
    """Descendants of this process: from /proc's children files (fast), else a psutil scan."""
    root = os.getpid()
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return psutil.Process().children(recursive=True)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for task in _listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except OSError:
                continue
            todo.extend(kids)
            for kid in kids:
                with contextlib.suppress(psutil.Error):
                    out.append(psutil.Process(kid))
    return out


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def started(proc: psutil.Process) -> float:
    """When ``proc`` started, as a value that never changes for one process.

    On Linux the start time in clock ticks since boot (``/proc/PID/stat``): psutil's
    ``create_time()`` adds the boot time, which the kernel recomputes from the wall clock
    and which can move by a second on a machine whose clock is adjusted, so the same
    process would look new.
    """
    try:
        with open(f"/proc/{proc.pid}/stat", "rb") as f:
            tail = f.read().rpartition(b")")[2].split()
        return float(tail[19])  # field 22 (starttime); fields counted after "(comm)"
    except (OSError, IndexError, ValueError):
        return proc.create_time()


def _kill(proc: psutil.Process) -> Callable[[], None]:
    def undo() -> None:
        with contextlib.suppress(psutil.Error):
            proc.kill()
        psutil.wait_procs([proc], timeout=2)

    return undo


def _alive(proc: psutil.Process) -> bool:
    """Whether ``proc`` still runs; a zombie child is reaped on the way."""
    if proc.status() != psutil.STATUS_ZOMBIE:
        return True
    with contextlib.suppress(ChildProcessError, OSError, psutil.Error):
        proc.wait(0)
    return False


class ProcessCheck:
    """Live descendants that were not there before (orphans included, on Linux)."""

    def snapshot(self) -> Procs:
        out = set()
        for proc in _children():
            with contextlib.suppress(psutil.Error):
                out.add((proc.pid, started(proc)))
        return frozenset(out)

    def compare(self, before: Procs) -> list[Leak]:
        out = []
        for proc in _children():
            try:
                if (proc.pid, started(proc)) in before or not _alive(proc):
                    continue
                cmd = " ".join(proc.cmdline()) or proc.name()
            except psutil.Error:
                continue
            out.append(Leak(f"child process {proc.pid} is still alive: {cmd}", _kill(proc)))
        return out

    def absorb(self, snap: Procs, start: Procs, end: Procs) -> Procs:
        return snap | (end - start)

    def left_over(self, start: Procs, end: Procs) -> list[Leak]:
        out = []
        for pid, created in sorted(end - start):
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                if started(proc) == created and proc.status() != psutil.STATUS_ZOMBIE:
                    cmd = " ".join(proc.cmdline()) or proc.name()
                    text = f"child process {pid} it started is still alive: {cmd}"
                    out.append(Leak(text, _kill(proc)))
        return out
