"""Waiting on processes and paths, shared by the suites that start child processes.

Importable as ``proc_watch`` from any test module (pytest puts ``tests/`` on ``sys.path``
for its rootdir conftest).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable

import psutil


def descendants() -> set[int]:
    """Live (non-zombie) descendant pids of this process."""
    out = set()
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                out.add(proc.pid)
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: Iterable[int], timeout: float = 10.0) -> list[int]:
    """Wait until every pid has exited; the ones still running after ``timeout``."""
    left = list(pids)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        left = [pid for pid in left if alive(pid)]
        if left:
            time.sleep(0.05)
    return [pid for pid in left if alive(pid)]


def wait_removed(path: str | os.PathLike[str], timeout: float = 5.0) -> bool:
    """Wait until ``path`` no longer exists; whether it is gone."""
    deadline = time.monotonic() + timeout
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not os.path.exists(path)


def listening_ports(pids: Iterable[int]) -> set[int]:
    """TCP ports on which any of ``pids`` listens."""
    ports = set()
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            for conn in psutil.Process(pid).net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN:
                    ports.add(conn.laddr.port)
    return ports


def listening_anywhere(ports: Iterable[int]) -> set[int]:
    """Which of ``ports`` some process on this machine still listens on."""
    wanted = set(ports)
    found = set()
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port in wanted:
            found.add(conn.laddr.port)
    return found


def shm_segments() -> set[str]:
    """Names under /dev/shm (POSIX shared memory segments)."""
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()
