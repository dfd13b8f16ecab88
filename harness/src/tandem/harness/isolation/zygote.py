"""The zygote: a warm process that forks a fresh child for every isolation unit.

It is forked from the pytest process after collection, never runs a test itself, and so
stays as clean as the moment it was made; a child forked from it costs milliseconds. It
reaps its children and tells the parent how each one ended.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import socket
import sys
from collections.abc import Callable

from ..leaks import processes
from . import wire
from .cuda import ForkUnsafe
from .messages import Exited, Forked, ForkRefused, Message

ChildMain = Callable[[int, int], None]


class Zygote:
    """The parent's handle on the zygote process."""

    def __init__(self, child_main: ChildMain, guard: Callable[[], None]) -> None:
        self.child_main = child_main
        self.guard = guard
        self.pid = 0
        self.sock: socket.socket | None = None
        self.reader: wire.Reader | None = None
        self.exits: dict[int, int] = {}

    def start(self) -> None:
        self.guard()
        parent_end, zygote_end = socket.socketpair()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            processes.die_with_parent()
            parent_end.close()
            code = 0
            try:
                _serve(zygote_end, self.child_main, self.guard)
            except BaseException:  # the zygote must never return into pytest
                code = 1
            os._exit(code)
        zygote_end.close()
        # the parent's own collections never walk (and so never copy) the pages it shares
        # with the zygote: what exists now is the collected session, alive to the end
        gc.freeze()
        self.pid, self.sock = pid, parent_end
        self.reader = wire.Reader(parent_end.fileno())

    def fork(self, cmd_r: int, res_w: int) -> int:
        """Ask the zygote for a child reading commands on ``cmd_r``; returns its pid."""
        if self.sock is None:
            self.start()
        assert self.sock is not None and self.reader is not None
        socket.send_fds(self.sock, [b"F"], [cmd_r, res_w])
        while True:
            message = self.reader.recv()
            match message:
                case None:
                    raise RuntimeError("tandem-harness: the zygote died")
                case ForkRefused(reason):
                    raise ForkUnsafe(reason)
                case Forked(pid):
                    return pid
                case _:
                    self.note(message)

    def note(self, message: Message) -> None:
        if isinstance(message, Exited):
            self.exits[message.pid] = message.status

    def poll(self) -> None:
        """Read every exit notice that is waiting, without blocking."""
        while self.reader is not None and self.reader.ready(0):
            message = self.reader.recv()
            if message is None:
                self.sock = self.reader = None
                return
            self.note(message)

    def kill(self) -> None:
        """End the zygote now; its children die with it (they watch their parent)."""
        if self.pid:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
        self.stop()

    def stop(self) -> None:
        if self.sock is None:
            return
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(self.pid, 0)
        self.sock = self.reader = None


def _serve(sock: socket.socket, child_main: ChildMain, guard: Callable[[], None]) -> None:
    # children never walk (and so never copy) the zygote's objects; no collection first: it
    # would walk (and copy) every page of the heap once more, for the garbage of collection
    gc.freeze()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        ready = select.select([sock, wake_r], [], [])[0]
        if wake_r in ready:
            os.read(wake_r, 4096)
            _reap(sock)
        if sock not in ready:
            continue
        data, fds, _, _ = socket.recv_fds(sock, 16, 2)
        if not data:
            return
        cmd_r, res_w = fds
        try:
            guard()
        except Exception as exc:
            wire.send(sock.fileno(), ForkRefused(str(exc)))
            os.close(cmd_r)
            os.close(res_w)
            continue
        pid = os.fork()
        if pid == 0:
            processes.die_with_parent()
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            sock.close()
            os.close(wake_r)
            os.close(wake_w)
            child_main(cmd_r, res_w)
            os._exit(0)
        os.close(cmd_r)
        os.close(res_w)
        wire.send(sock.fileno(), Forked(pid))
        _reap(sock)


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        wire.send(sock.fileno(), Exited(pid, status))
