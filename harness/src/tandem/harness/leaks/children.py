"""Leak check: what the probe saw in Python child processes of the code under test.

A patch made inside an engine's worker process (a fresh interpreter the test process
started) is invisible to checks that look at the test process. So, while the harness
isolates, every Python child gets the probe (``probe``): a folder on ``PYTHONPATH`` holds
a ``sitecustomize.py`` that starts it (and then runs the ``sitecustomize`` it stands in
front of, if there is one), and ``probe.ENV`` names the report folder and what to watch.
At the start and at the end of each test every live child that has loaded watched code
is asked to check itself (its socket in the report folder, see ``probe``), so a patch it
made at any time, not only while importing, is named; then the reports are read and
removed, and each problem fails the test, naming the child by its pid and command line.
A test with no such child and no report pays for one directory listing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import probe
from .base import Leak

SITECUSTOMIZE = '''\
"""Written by tandem-harness: starts its probe in this Python process (see its README)."""
import os
import sys

MARK = "tandem-harness-probe-site"


def _tandem_harness_probe():
    try:
        from tandem.harness.leaks import probe
    except Exception:  # another interpreter, without the harness: nothing to watch
        probe = None
    if probe is not None:
        probe.start()
    import importlib.machinery
    import importlib.util

    # every folder of this kind (an outer harness may have put its own) is passed over
    rest = [p for p in sys.path if not os.path.exists(os.path.join(p or os.curdir, MARK))]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:  # the one this file stands in front of
        module = importlib.util.module_from_spec(spec)
        sys.modules["sitecustomize"] = module
        spec.loader.exec_module(module)


_tandem_harness_probe()
'''


ANSWER = 2.0  # seconds a child may take to answer the harness's question


@dataclass(frozen=True)
class Reports:
    present: frozenset[str]  # report files waiting when the snapshot was taken
    skip: frozenset[str] = frozenset()  # reports that belong to a wider fixture


class ChildProbeCheck:
    """Sets up the probe for this process's Python children; reads what they reported."""

    def __init__(self, own: str, prefixes: tuple[str, ...], scratch: Path | None = None) -> None:
        probe.stop()  # a probe inherited from an outer harness: this process checks itself
        self.home = Path(tempfile.mkdtemp(prefix="tandem-harness-probe-", dir=scratch))
        self.folder = self.home / "reports"
        self.folder.mkdir()
        site = self.home / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        (site / "tandem-harness-probe-site").touch()  # the mark SITECUSTOMIZE looks for
        path = os.environ.get("PYTHONPATH", "")
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), path) if p)
        os.environ[probe.ENV] = "\n".join((str(self.folder), own, *prefixes))

    def close(self) -> None:
        """Remove the folders (the env vars stay: a late child finds nothing and moves on)."""
        shutil.rmtree(self.home, ignore_errors=True)

    def _names(self) -> frozenset[str]:
        """The reports waiting, once every live child has been asked to check itself."""
        try:
            names = os.listdir(self.folder)
        except OSError:
            return frozenset()
        live = [n for n in names if n.endswith(probe.SOCKET_SUFFIX)]
        if live:
            for name in live:
                self._ask(self.folder / name)
            with contextlib.suppress(OSError):
                names = os.listdir(self.folder)
        return frozenset(n for n in names if n.endswith(".json"))

    def _ask(self, path: Path) -> None:
        """Ask one child to check itself; it answers once its report (if any) is written.

        A child that is gone leaves its socket file: removed. One too busy to answer
        within ``ANSWER`` seconds (its thread cannot get the interpreter) is passed over.
        """
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(ANSWER)
            try:
                conn.connect(str(path))
                conn.sendall(probe.ASK)
                conn.recv(len(probe.DONE))
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(OSError):
                    path.unlink()
            except OSError:  # a timeout, or the child died while answering
                pass

    def _read(self, names: frozenset[str], label: str = "") -> list[Leak]:
        out = []
        for name in sorted(names):
            path = self.folder / name
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            with contextlib.suppress(OSError):
                path.unlink()
            who = f"Python child process {data.get('pid')} ({' '.join(data.get('argv', []))})"
            out += [Leak(f"{who}{label}: {problem}") for problem in data.get("problems", [])]
        return out

    def snapshot(self) -> Reports:
        return Reports(self._names())

    def compare(self, before: Reports) -> list[Leak]:
        names = self._names() - before.skip
        if not names:
            return []
        early = names & before.present  # found when the test started: it is not known whose
        return self._read(early, " (reported before this test started)") + self._read(names - early)

    def absorb(self, snap: Reports, start: Reports, end: Reports) -> Reports:
        return Reports(snap.present, snap.skip | (end.present - start.present))

    def left_over(self, start: Reports, end: Reports) -> list[Leak]:
        return self._read((end.present - start.present) & self._names(), " it started")
