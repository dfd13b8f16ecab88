"""Leak check: child processes a test started and left running (they are killed).

The process that runs tests becomes a child subreaper (Linux): a process that its parent
left behind (``sh -c "server &"``, a daemon's double fork) is re-parented to it instead of
to init, so it shows up here as a child and is named and ended like any other.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .base import Leak

if TYPE_CHECKING:
    import psutil

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_PR_SET_PDEATHSIG = 1

Procs = frozenset[tuple[int, float]]  # (pid, start time) of live descendants


@functools.cache
def _ps() -> Any:
    """psutil, imported the first time a descendant is looked at (most tests start none)."""
    import psutil

    return psutil


@functools.cache
def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return _libc().prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def is_subreaper() -> bool:
    """Whether this process adopts its orphaned descendants (the kernel knows; a fork does
    not inherit it)."""
    if not sys.platform.startswith("linux"):
        return False
    flag = ctypes.c_int(0)
    try:
        asked = _libc().prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
    return asked and flag.value != 0


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux only); True when it took effect."""
    return is_subreaper() or _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(signum: int = 9) -> bool:
    """Have the kernel send ``signum`` to this process when its parent dies (Linux only)."""
    return _prctl(_PR_SET_PDEATHSIG, signum)


def end_all() -> None:
    """Kill every descendant still alive (a process that is about to exit calls this)."""
    for leak in ProcessCheck().compare(frozenset()):
        if leak.undo is not None:
            leak.undo()


def _none_started() -> bool:
    """Whether this process has no child at all, live or unreaped (one system call).

    Every descendant still running has a child of this process above it, or is one itself
    once orphaned (this process is their subreaper), so then there is nothing to look for.
    The child found is left as it was (``WNOWAIT``). False where it cannot be told.
    """
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    except (AttributeError, OSError):  # no waitid here
        return False
    return False


def _children() -> list[psutil.Process]:
    """Descendants of this process: from /proc's children files (fast), else a psutil scan."""
    if _none_started():
        return []
    root = os.getpid()
    psutil = _ps()
    if not _proc_children_files():
        return psutil.Process().children(recursive=True)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for task in _listdir(f"/proc/{pid}/task"):
            kids = [int(k) for k in _read(f"/proc/{pid}/task/{task}/children").split()]
            todo.extend(kids)
            for kid in kids:
                with contextlib.suppress(psutil.Error):
                    out.append(psutil.Process(kid))
    return out


@functools.cache
def _proc_children_files() -> bool:
    """Whether the kernel lists each task's children in /proc (Linux with CONFIG_PROC_CHILDREN)."""
    return os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def _read(path: str) -> bytes:
    """A small /proc file's content (b"" if it is gone); no buffered file object."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return b""
    try:
        return os.read(fd, 1 << 16)
    except OSError:
        return b""
    finally:
        os.close(fd)


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
        tail = _read(f"/proc/{proc.pid}/stat").rpartition(b")")[2].split()
        return float(tail[19])  # field 22 (starttime); fields counted after "(comm)"
    except (OSError, IndexError, ValueError):
        return proc.create_time()


def _kill(proc: psutil.Process) -> Callable[[], None]:
    def undo() -> None:
        with contextlib.suppress(_ps().Error):
            proc.kill()
        _ps().wait_procs([proc], timeout=2)

    return undo


def _alive(proc: psutil.Process) -> bool:
    """Whether ``proc`` still runs; a zombie child is reaped on the way."""
    psutil = _ps()
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
            with contextlib.suppress(_ps().Error):
                out.add((proc.pid, started(proc)))
        return frozenset(out)

    def compare(self, before: Procs) -> list[Leak]:
        out = []
        for proc in _children():
            try:
                if (proc.pid, started(proc)) in before or not _alive(proc):
                    continue
                cmd = " ".join(proc.cmdline()) or proc.name()
            except _ps().Error:
                continue
            out.append(Leak(f"child process {proc.pid} is still alive: {cmd}", _kill(proc)))
        return out

    def absorb(self, snap: Procs, start: Procs, end: Procs) -> Procs:
        return snap | (end - start)

    def left_over(self, start: Procs, end: Procs) -> list[Leak]:
        out: list[Leak] = []
        if not end - start:
            return out  # psutil is not even imported
        psutil = _ps()
        for pid, created in sorted(end - start):
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                if started(proc) == created and proc.status() != psutil.STATUS_ZOMBIE:
                    cmd = " ".join(proc.cmdline()) or proc.name()
                    text = f"child process {pid} it started is still alive: {cmd}"
                    out.append(Leak(text, _kill(proc)))
        return out
