"""Starting, watching and stopping engine v1's child processes.

Children are fresh interpreters (``python -m tandem.v1.proc.child ROLE DIR PARENT_PID
REPORT_FD``)
started with ``subprocess`` as soon as the engine is asked for, before their
payload (config, tokenizer) is resolved, which they read from stdin once their
imports are done: nothing of the caller's state (threads, CUDA context,
open sockets, its ``__main__`` module) is inherited, a script without an
``if __name__ == "__main__"`` guard still works, and both children import in
parallel, so start-up costs one torch import (about a second or two) rather than a
fork of a possibly multi-threaded parent.

A child exits by itself when its parent goes away: it asks the kernel for SIGTERM on
parent death (``PR_SET_PDEATHSIG``; Linux only, and bound to the parent *thread*),
and a watch thread polls the parent pid as a fallback for every other case.

A child that fails writes its ``Failed`` message down a report pipe of its own before
it exits (:mod:`tandem.core.child_failure`); :meth:`Child.last_words` reads it once the
parent sees the exit, so why a child failed never depends on a socket or a relay.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from tandem.core.child_failure import ReportPipe
from tandem.v1 import messages as m

PR_SET_PDEATHSIG = 1
ROLES = ("core", "detokenizer", "rank")


# seconds an orphaned child may take to unwind before its parent watch ends it
ORPHAN_GRACE_S = 5.0


class Terminate(BaseException):
    """Raised in a child's main thread by SIGTERM: unwind and exit cleanly."""


def set_parent_death_signal(sig: int = signal.SIGTERM) -> bool:
    """Ask Linux to send ``sig`` when the parent dies; False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


# set once SIGTERM arrived: the child is being stopped (by its parent or its death)
SIGNALLED = threading.Event()


def _raise_terminate(signum: int, frame: object) -> None:
    # once: a second SIGTERM (the parent-death signal, then the parent watch, or a parent
    # that signals twice) would otherwise land in the clean-up the first one started
    if SIGNALLED.is_set():
        return
    SIGNALLED.set()
    raise Terminate(signal.Signals(signum).name)


def install_signal_handlers() -> None:
    signal.signal(signal.SIGTERM, _raise_terminate)
    # Ctrl-C in a terminal reaches the whole process group: the parent decides, and stops
    # its children with SIGTERM, so a child never dies (or prints a traceback) on its own
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def watch_parent(
    parent_pid: int,
    interval: float = 0.25,
    grace: float = ORPHAN_GRACE_S,
    last_words: Callable[[], None] | None = None,
) -> threading.Thread:
    """Daemon thread that SIGTERMs this process once ``parent_pid`` is no longer its parent.

    The SIGTERM lets the main thread unwind cleanly; if it is still running ``grace``
    seconds later (stuck where a signal cannot reach it, such as a ZMQ context waiting for
    a socket), the thread runs ``last_words`` and ends the process: an orphan never stays.
    """

    def run() -> None:
        while os.getppid() == parent_pid:
            time.sleep(interval)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace)
        if last_words is not None:
            with contextlib.suppress(Exception):
                last_words()
        os._exit(1)

    thread = threading.Thread(target=run, name="tandem-parent-watch", daemon=True)
    thread.start()
    return thread


class Child(subprocess.Popen[bytes]):
    """A child process and the parent's end of its report pipe."""

    report: ReportPipe

    def last_words(self) -> m.Failed | None:
        """The failure the child reported before it exited; None when it reported none
        (it runs, exited cleanly, or died by a signal or ``os._exit``)."""
        return m.decode_failed(self.report.read())


def launch(role: str, ipc_dir: str) -> Child:
    """Start one child; its stdout/stderr are the caller's, its stdin a pipe that
    carries its start-up payload (see :func:`tandem.v1.proc.ipc.write_payload`)."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}; got {role!r}")
    report = ReportPipe()
    fd = report.child_fd
    cmd = [sys.executable, "-m", "tandem.v1.proc.child", role, ipc_dir, str(os.getpid()), str(fd)]
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    try:
        proc = Child(cmd, stdin=subprocess.PIPE, env=env, close_fds=True, pass_fds=(fd,))
    except BaseException:
        report.close()
        raise
    report.started()
    proc.report = report
    return proc


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exited with code {returncode}"


def stop(procs: list[subprocess.Popen[bytes]], grace: float = 5.0) -> None:
    """SIGTERM every live child, wait up to ``grace`` seconds, then SIGKILL; reap all."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdin is not None and not proc.stdin.closed:
            with contextlib.suppress(OSError):  # a payload never sent
                proc.stdin.close()
        if isinstance(proc, Child):
            proc.report.close()  # what it reported stays readable
