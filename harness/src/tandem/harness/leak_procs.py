"""Leak check: child processes a test started and left running (they are killed)."""

from __future__ import annotations

import contextlib
import os

import psutil


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


def snapshot() -> set[tuple[int, float]]:
    out = set()
    for proc in _children():
        with contextlib.suppress(psutil.Error):
            out.add((proc.pid, proc.create_time()))
    return out


def diff(before: set[tuple[int, float]], kill: bool = True) -> list[str]:
    """Describe (and kill) every live child process that was not there before."""
    out = []
    leaked = []
    for proc in _children():
        try:
            if (proc.pid, proc.create_time()) in before:
                continue
            if proc.status() == psutil.STATUS_ZOMBIE:
                with contextlib.suppress(ChildProcessError, OSError):
                    proc.wait(0)
                continue
            cmd = " ".join(proc.cmdline()) or proc.name()
        except psutil.Error:
            continue
        out.append(f"child process {proc.pid} is still alive: {cmd}")
        leaked.append(proc)
    if kill:
        for proc in leaked:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(leaked, timeout=2)
    return out
