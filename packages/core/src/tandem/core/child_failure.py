"""How a process tells the process that started it why it failed.

A child that fails (its model does not load, its KV cache does not fit) exits, and all
its parent sees by itself is an exit code. So the child describes its exception as a
:class:`ChildError` (type, message, the last lines of its traceback) and writes the
report down a pipe of its own just before it exits (:func:`send_report`); the parent
reads the pipe once it sees the exit (:class:`ReportPipe`) and raises an error that
names the child's exception, as an in-process engine would raise it. The report never
waits for another process to relay it, nor for a socket the child may not have opened.
A child that dies without an exception (a signal, ``os._exit``) writes nothing, and the
parent tells its exit code or signal instead.

What the pipe carries is opaque bytes (each engine encodes its own failure message, a
:class:`ChildError` inside); a report is kept under :data:`MAX_REPORT_BYTES`, which a
pipe holds whole, so the child's write never blocks on a parent that is not reading.
"""

from __future__ import annotations

import os
import traceback

import msgspec

TAIL_LINES = 24  # traceback lines kept after its first one
MAX_MESSAGE_CHARS = 2000
MAX_TRACEBACK_CHARS = 4000
# a report's most (6000 characters of up to 4 bytes, and a few names) fits in it, and a
# pipe holds it whole (Linux gives a pipe 64 KiB unless a user has used up the quota)
MAX_REPORT_BYTES = 32 * 1024


class ChildError(msgspec.Struct, array_like=True, frozen=True):
    """An exception raised in another process, as text the parent can raise about."""

    type_name: str  # ``ValueError``; ``module.Name`` for a type outside the builtins
    message: str  # ``str(exc)``
    traceback: str = ""  # the traceback's first line, then its last TAIL_LINES lines

    @classmethod
    def of(cls, exc: BaseException, traceback_text: str | None = None) -> ChildError:
        """``exc`` described; ``traceback_text`` replaces its own traceback (one formatted
        elsewhere, as Ray does for an actor's exception)."""
        if not isinstance(exc, BaseException):
            raise TypeError(f"exc must be an exception, got {type(exc).__name__}")
        if traceback_text is None:
            traceback_text = "".join(traceback.format_exception(exc))
        return cls(type_name(exc), _cut(str(exc), MAX_MESSAGE_CHARS), tail(traceback_text))

    @property
    def summary(self) -> str:
        """``Type: message``, as Python prints an exception's last line."""
        return f"{self.type_name}: {self.message}" if self.message else self.type_name

    def describe(self) -> str:
        """The summary, then the traceback's last lines when there are any."""
        if not self.traceback:
            return self.summary
        return f"{self.summary}\nits traceback (last lines):\n{self.traceback.rstrip()}"


def type_name(exc: BaseException) -> str:
    cls = type(exc)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def tail(text: str, lines: int = TAIL_LINES) -> str:
    """``text``'s first line and its last ``lines`` lines (the frames nearest the
    error and the error itself), at most MAX_TRACEBACK_CHARS characters."""
    parts = text.rstrip().splitlines()
    if len(parts) > lines + 2:
        cut = len(parts) - 1 - lines
        parts = [parts[0], f"  ... ({cut} lines cut)", *parts[-lines:]]
    out = "\n".join(parts)
    return out if len(out) <= MAX_TRACEBACK_CHARS else "..." + out[-MAX_TRACEBACK_CHARS:]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ReportPipe:
    """The parent's end of one child's report pipe.

    Give :attr:`child_fd` to the child (``subprocess.Popen(pass_fds=[fd])`` and its
    number on the command line), call :meth:`started` once it runs, and :meth:`read`
    after it has exited; :meth:`close` when done with it.
    """

    def __init__(self) -> None:
        self._read, self.child_fd = os.pipe()
        os.set_blocking(self._read, False)
        self._data = b""

    def started(self) -> None:
        """Close the child's end here: the child holds its own copy."""
        if self.child_fd >= 0:
            os.close(self.child_fd)
            self.child_fd = -1

    def read(self) -> bytes:
        """What the child reported so far (b"" when nothing); repeatable."""
        while self._read >= 0:
            try:
                chunk = os.read(self._read, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            self._data += chunk
        return self._data

    def close(self) -> None:
        self.started()
        if self._read >= 0:
            self.read()  # what was written stays readable after close
            os.close(self._read)
            self._read = -1


def send_report(fd: int | None, data: bytes) -> bool:
    """The child's side: write ``data`` down the report pipe ``fd`` (None: there is
    none) without blocking; False when it did not go whole (too long, or no one to read
    it). A child reports once, as it exits: the parent reads one report per pipe."""
    if fd is None or fd < 0 or len(data) > MAX_REPORT_BYTES:
        return False
    try:
        os.set_blocking(fd, False)
        return os.write(fd, data) == len(data)
    except OSError:  # a closed pipe: the parent is gone or stopped listening
        return False
