"""The process main that the engine core's and a rank's child share.

Each child owns a PULL socket (what it is asked) and a PUSH socket (what it answers),
sets itself up in two stages, says it is ready, and serves until SIGTERM
(:class:`~tandem.v1.proc.procs.Terminate`). A failure once it can answer is sent
as a ``Failed`` message and the answer socket lingers, so the parent reads the error
rather than only an exit code; a failure before that propagates.
"""

from __future__ import annotations

from typing import Protocol, TypeVar

import zmq

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
        """The frames that report ``exc`` (called inside its ``except`` block)."""
        ...

    def close(self) -> None:
        """Release what build made, whether or not it finished."""
        ...


def run_process(role: Role[T]) -> int:
    """Run ``role`` between its two sockets; the child's exit code."""
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
            out.send_multipart(role.failed(exc, True))
            return 1
        out.send_multipart(role.ready(it))
        try:
            role.serve(it, inp, out)
        except Exception as exc:
            linger = FAILED_LINGER_MS
            out.send_multipart(role.failed(exc, False))
            return 1
        return 0
    except Terminate:
        return 0
    finally:
        role.close()
        inp.close(linger=0)
        out.close(linger=linger)
        ctx.term()
