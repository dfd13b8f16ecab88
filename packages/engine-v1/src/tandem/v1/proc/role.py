"""The process main that the engine core's and a rank's child share.

Each child owns a PULL socket (what it is asked) and a PUSH socket (what it answers),
sets itself up in two stages, says it is ready, and serves until SIGTERM
(:class:`~tandem.v1.proc.procs.Terminate`). A failure once it can answer is reported
as a ``Failed`` message down the child's report pipe, which the parent reads once it
sees the exit, and on the answer socket (without waiting for a reader: the pipe has it
already), which lingers a moment for it, so the parent reads the error rather than only
an exit code; a failure before that propagates (and the child's main reports it).
"""

from __future__ import annotations

import contextlib
from typing import Protocol, TypeVar

import zmq

from tandem.core.child_failure import send_report
from tandem.v1.proc.procs import Terminate

# how long a failed child waits at exit for its ``Failed`` message to leave
FAILED_LINGER_MS = 2000

T = TypeVar("T")


class Role(Protocol[T]):
    """One kind of child: how it opens, builds, serves and closes."""

    def open(self, inp: zmq.Socket, out: zmq.Socket) -> bool:
        """Bind or connect the sockets; what fails here cannot be reported.

        False when the parent gave up before sending the payload (the child exits 0).
        """
        ...

    def build(self) -> T | None:
        """Build what serves; a failure is reported as a start-up failure. None as False in open."""
        ...

    def ready(self, it: T) -> list[bytes]:
        """The frames that say the child is ready."""
        ...

    def serve(self, it: T, inp: zmq.Socket, out: zmq.Socket) -> None:
        """Answer requests until stopped."""
        ...

    def failed(self, exc: Exception, startup: bool) -> list[bytes]:
        """The frames that report ``exc`` (called inside its ``except`` block); the last
        one is the encoded ``Failed`` message, which also goes down the report pipe."""
        ...

    def close(self) -> None:
        """Release what build made, whether or not it finished."""
        ...


def run_process(role: Role[T], report_fd: int | None = None) -> int:
    """Run ``role`` between its two sockets; the child's exit code. A failure is
    reported down the pipe ``report_fd`` too (None: there is none)."""
    ctx = zmq.Context()
    inp = ctx.socket(zmq.PULL)
    out = ctx.socket(zmq.PUSH)
    linger = 0
    try:
        if not role.open(inp, out):
            return 0
        try:
            it = role.build()
            if it is None:
                return 0
        except Exception as exc:
            linger = FAILED_LINGER_MS
            report(out, role.failed(exc, True), report_fd)
            return 1
        out.send_multipart(role.ready(it))
        try:
            role.serve(it, inp, out)
        except Exception as exc:
            linger = FAILED_LINGER_MS
            report(out, role.failed(exc, False), report_fd)
            return 1
        return 0
    except Terminate:
        return 0
    finally:
        role.close()
        inp.close(linger=0)
        out.close(linger=linger)
        ctx.term()


def report(out: zmq.Socket, frames: list[bytes], report_fd: int | None) -> None:
    """Send a failure down the report pipe, then on ``out`` if it can go at once (a
    socket with no reader yet would block: the parent reads the pipe)."""
    send_report(report_fd, frames[-1])
    with contextlib.suppress(zmq.Again):
        out.send_multipart(frames, zmq.NOBLOCK)
