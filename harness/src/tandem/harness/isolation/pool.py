"""Child processes of one pytest process: forked from the zygote, or spawned; reaped late.

A stopped child is not waited for: the zygote reaps it, and one still alive 10 s later
is killed (its whole process group, so what it started goes too).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..leaks import probe
from ..settings import Settings
from . import cuda, wire
from .messages import Run, Stop
from .zygote import Zygote

_SPAWNED = itertools.count()

ChildMain = Callable[[int, int, Path], None]  # (command fd, result fd, crash-log folder)


@dataclass(slots=True)
class Child:
    pid: int
    cmd_w: int
    res_r: int
    unit: Any
    proc: subprocess.Popen[bytes] | None = None
    status: int | None = None
    out: str | None = None  # a spawned child's stdout and stderr files
    err: str | None = None
    queued: list[Run] = field(default_factory=list)  # sent ahead, in the order it runs them
    ahead: dict[str, Any] = field(default_factory=dict)  # nodeid -> item, of those sent ahead
    last: Any = None  # the item of the last command sent
    done: set[str] = field(default_factory=set)  # the tests it told the parent it finished
    ready: bool = True  # a spawned child is not until it says so
    reader: wire.Reader = field(init=False)

    def __post_init__(self) -> None:
        self.reader = wire.Reader(self.res_r)


class Pool:
    """Starts, stops and reaps children; owns the zygote and the crash-log folder.

    ``child_main`` runs in a forked child (it never returns); a spawned child is a new
    pytest told ``--harness-worker`` and the run's ``seed``.
    """

    def __init__(
        self, config: pytest.Config, settings: Settings, seed: int, child_main: ChildMain
    ) -> None:
        self.config = config
        self.settings = settings
        self.seed = seed
        self.child_main = child_main
        self._folder: Path | None = None
        self.zygote: Zygote | None = None
        self.ending: list[tuple[Child, float]] = []  # told to stop, not yet seen to exit

    @property
    def folder(self) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="tandem-harness-"))
        return self._folder

    def _start(self, unit: Any) -> Child:
        if self.settings.start_method == "spawn":
            cmd_r, cmd_w = os.pipe()
            res_r, res_w = os.pipe()
            try:
                return self._spawn(cmd_r, cmd_w, res_r, res_w, unit)
            finally:
                os.close(cmd_r)
                os.close(res_w)
        if self.zygote is None:
            folder, main = self.folder, self.child_main
            self.zygote = Zygote(lambda c, r: main(c, r, folder), cuda.guard)
        if self.zygote.sock is None:
            # forked before this child's pipes exist: the zygote, and so every child it
            # forks, holds none of them (a child holding its own pipe's write end would
            # never see it end, nor the parent its result pipe's)
            self.zygote.start()
        cmd_r, cmd_w = os.pipe()
        res_r, res_w = os.pipe()
        pid = self.zygote.fork(cmd_r, res_w)
        os.close(cmd_r)
        os.close(res_w)
        return Child(pid, cmd_w, res_r, unit)

    def _spawn(self, cmd_r: int, cmd_w: int, res_r: int, res_w: int, unit: Any) -> Child:
        """A fresh interpreter running pytest as a child: safe after CUDA was initialised."""
        args = _child_args(list(self.config.invocation_params.args))
        argv = [
            sys.executable,
            "-m",
            "pytest",
            *args,
            "-p",
            "no:xdist",
            f"--harness-worker={cmd_r},{res_w},{self.folder}",
            "-q",
            "--isolate",
            "none",
            "--harness-seed",
            str(self.seed),
        ]
        if not _uncaptured(args):  # what a test prints reaches the output files too
            argv.append("--capture=tee-sys")
        n = next(_SPAWNED)
        out, err = self.folder / f"spawn-{n}.out", self.folder / f"spawn-{n}.err"
        env = {k: v for k, v in os.environ.items() if k != probe.ENV}  # it is a harness itself
        with open(out, "wb") as out_file, open(err, "wb") as err_file:
            proc = subprocess.Popen(
                argv,
                pass_fds=(cmd_r, res_w),
                cwd=str(self.config.invocation_params.dir),
                stdout=out_file,
                stderr=err_file,
                env=env,
            )
        return Child(proc.pid, cmd_w, res_r, unit, proc, out=str(out), err=str(err), ready=False)

    def _kill(self, child: Child) -> None:
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(OSError):
                kill(child.pid, signal.SIGKILL)
        if child.proc is not None:
            child.status = child.proc.wait()

    def _close(self, child: Child) -> None:
        for fd in (child.cmd_w, child.res_r):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _stop(self, child: Child) -> None:
        with contextlib.suppress(OSError):
            wire.send(child.cmd_w, Stop())
        self._close(child)
        self.ending.append((child, time.monotonic() + 10))

    def _sweep(self, wait: bool = False) -> None:
        while self.ending:
            now = time.monotonic()
            left = []
            for child, deadline in self.ending:
                if self._status(child) is not None:
                    continue
                if now >= deadline:
                    self._kill(child)
                    continue
                left.append((child, deadline))
            self.ending = left
            if not wait or not left:
                return
            time.sleep(0.005)

    def _status(self, child: Child) -> int | None:
        if child.status is not None:
            return child.status
        if child.proc is not None:
            code = child.proc.poll()
            child.status = None if code is None else code
        elif self.zygote is not None:
            self.zygote.poll()
            child.status = self.zygote.exits.pop(child.pid, None)
            if child.status is not None:
                child.status = os.waitstatus_to_exitcode(child.status)
        return child.status

    def close_all(self) -> None:
        self._sweep(wait=True)
        if self.zygote is not None:
            self.zygote.stop()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)


_VALUED = (
    "-n",
    "--numprocesses",
    "--dist",
    "--maxprocesses",
    "--find-polluter",
    "--engine-report",
    "--junitxml",
    "--junit-xml",
    "--isolate",
    "--harness-start",
    "--harness-seed",
)


def _child_args(args: list[str]) -> list[str]:
    """The parent's arguments minus those a spawned child must not act on (xdist, reports)."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in _VALUED:
            skip = True
            continue
        if arg.startswith(tuple(f"{name}=" for name in _VALUED)) or (
            arg.startswith("-n") and arg[2:].isdigit()
        ):
            continue
        out.append(arg)
    return out


def _uncaptured(args: list[str]) -> bool:
    """Whether the user turned capturing off (``-s``, ``--capture=no``)."""
    pairs = zip(args, [*args[1:], ""])
    return any(
        a == "-s" or a == "--capture=no" or (a == "--capture" and b == "no") for a, b in pairs
    )
