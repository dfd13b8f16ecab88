"""What a process and its descendants cost the machine: peak resident memory, bytes written.

- :class:`TreeMonitor` polls a process and its descendants (``/proc/<pid>/status``) in a
  thread and keeps the peak of their summed ``VmRSS``, with its anonymous and file-backed
  parts at that moment. A sum of RSS counts a page shared by several processes (a
  library, a file both map) once per process: it is what the tree holds at worst.
- :func:`tree_rss` sums the tree's ``VmRSS`` at one moment (an engine's resident size
  once it runs); :func:`tree_hwm` reads each live process's own peak (``VmHWM``), exact
  but per process; :func:`tree_cpu` the tree's CPU seconds so far (less moved than wall
  time by a busy machine).
- :func:`written_bytes` reads this process's ``/proc/self/io``. The kernel adds the counts
  of a child that exited and was waited for to its parent's, so the change over a child's
  run is what the child and every descendant it reaped sent to storage (``write_bytes``:
  counted when a page of a file is dirtied, page cache or not).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import psutil

_KB = 1024


def status(pid: int) -> dict[str, int]:
    """The ``Vm*`` and ``Rss*`` lines of ``/proc/<pid>/status``, in bytes (empty if gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.startswith(("Vm", "Rss")):
                    out[key] = int(value.split()[0]) * _KB
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return {}
    return out


def _tree(pid: int) -> list[int]:
    try:
        root = psutil.Process(pid)
        return [pid, *(p.pid for p in root.children(recursive=True))]
    except psutil.Error:
        return []


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) used so far by ``pid``'s live tree and every process
    it reaped (a compiler, a finished child)."""
    total = 0.0
    for p in _tree(pid):
        try:
            t = psutil.Process(p).cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def tree_rss(pid: int | None = None) -> int:
    """The summed ``VmRSS`` of ``pid``'s live tree now (this process's by default), bytes."""
    return sum(status(p).get("VmRSS", 0) for p in _tree(os.getpid() if pid is None else pid))


def tree_hwm(pid: int) -> list[dict[str, object]]:
    """Each live process of ``pid``'s tree: its command, ``VmHWM`` and RSS parts now."""
    out = []
    for p in _tree(pid):
        st = status(p)
        try:
            cmd = " ".join(psutil.Process(p).cmdline())[-60:]
        except psutil.Error:
            continue
        out.append({"pid": p, "cmd": cmd, "hwm": st.get("VmHWM", 0)})
        out[-1] |= {k: st.get(k, 0) for k in ("RssAnon", "RssFile", "RssShmem")}
    return out


class TreeMonitor:
    """``with TreeMonitor(pid) as m: ...``: ``m.peak`` (summed VmRSS, bytes), ``m.anon``
    and ``m.file`` (its parts at the peak), polled every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid, self.interval = pid, interval
        self.peak = self.anon = self.file = 0
        self.processes = 0  # the most processes seen at once
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll()
            self._stop.wait(self.interval)

    def poll(self) -> None:
        pids = _tree(self.pid)
        stats = [status(p) for p in pids]
        total = sum(s.get("VmRSS", 0) for s in stats)
        self.processes = max(self.processes, len(pids))
        if total > self.peak:
            self.peak = total
            self.anon = sum(s.get("RssAnon", 0) for s in stats)
            self.file = sum(s.get("RssFile", 0) + s.get("RssShmem", 0) for s in stats)

    def __enter__(self) -> TreeMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def written_bytes() -> tuple[int, int]:
    """(write_bytes, cancelled_write_bytes) of this process and its reaped descendants."""
    fields = {}
    with open("/proc/self/io") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            fields[key] = int(value)
    return fields["write_bytes"], fields["cancelled_write_bytes"]


def dir_bytes(path: str | os.PathLike[str]) -> int:
    """The sizes of every file under ``path`` added up (0 if it does not exist)."""
    root = Path(path)
    if not root.exists():
        return 0
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and not f.is_symlink())
