"""Leak check: a listening TCP socket a test opened in its process and left open.

The snapshot is cheap: the socket inodes among this process's open descriptors (listed
in ``/proc/self/fd``). A descriptor that can seek (a file, ``/dev/null``: most of them,
pytest's capture files among them) is no socket, and asking costs a fraction of an
``fstat``; the others are ``fstat``-ed: a socket's inode is the one the kernel's tables
name, and asking the descriptor itself costs a fraction of reading its link in ``/proc``,
which took most of a test's whole leak check. Only when new ones appear are
the kernel's tables of listening sockets (``/proc/net/tcp``, ``tcp6``) read to tell which
of them listen, and on what address. A Python socket object that holds one is named and
closed; a socket held in native code (a C++ store, a server library) is named by its
address and descriptor. Linux only: elsewhere the check sees nothing.

A test's end and the next test's start are back to back (only the harness's own
bookkeeping runs between them), so the scan made at a test's end is the next test's
snapshot when it found nothing to undo: one scan per test instead of two.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import stat
from typing import TYPE_CHECKING

from .base import Leak

if TYPE_CHECKING:
    import socket

Inodes = frozenset[tuple[int, str]]  # (fd, inode)
LISTEN = "0A"


def _socket_fds(unseekable: set[int] | None = None) -> Inodes:
    """The socket descriptors open now. ``unseekable``: descriptors that could not seek at
    the last look (pipes, sockets), ``fstat``-ed at once; kept up to date here. Only which
    call comes first depends on it: every descriptor is looked at each time."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return frozenset()
    out = []
    hint = unseekable if unseekable is not None else set()
    lseek, fstat, is_socket, here = os.lseek, os.fstat, stat.S_ISSOCK, os.SEEK_CUR
    for name in names:
        fd = int(name)
        if fd not in hint:
            try:
                lseek(fd, 0, here)  # a socket never seeks (ESPIPE), whatever its state
                continue
            except OSError as exc:
                if exc.errno == errno.EBADF:  # the listing's own descriptor, closed by now
                    continue
        try:
            st = fstat(fd)
        except OSError:
            hint.discard(fd)
            continue
        if stat.S_ISREG(st.st_mode):  # reopened as a file since: seek first again
            hint.discard(fd)
            continue
        hint.add(fd)
        if is_socket(st.st_mode):
            out.append((fd, str(st.st_ino)))
    return frozenset(out)


def _hex_address(text: str) -> str:
    """``0100007F:1F90`` (the kernel's form) -> ``127.0.0.1:8080``; IPv6 kept as hex."""
    host, port = text.split(":")
    if len(host) == 8:
        ip = ".".join(str(int(host[i : i + 2], 16)) for i in (6, 4, 2, 0))
    else:
        ip = "[" + host + "]"
    return f"{ip}:{int(port, 16)}"


def _listening(inodes: set[str]) -> dict[str, str]:
    """inode -> address of those of ``inodes`` that are listening TCP sockets."""
    found: dict[str, str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            next(f, None)
            for line in f:
                cols = line.split()
                if len(cols) > 9 and cols[3] == LISTEN and cols[9] in inodes:
                    found[cols[9]] = _hex_address(cols[1])
    return found


def _owner(fd: int) -> socket.socket | None:
    """The Python socket object that holds descriptor ``fd``, if one does."""
    import socket

    for obj in gc.get_objects():
        if isinstance(obj, socket.socket):
            with contextlib.suppress(OSError):
                if obj.fileno() == fd:
                    return obj
    return None


def _leaks(fds: Inodes, whose: str) -> list[Leak]:
    if not fds:
        return []
    where = _listening({inode for _, inode in fds})
    out = []
    for fd, inode in sorted(fds):
        if inode not in where:
            continue
        sock = _owner(fd)
        held = f"a {type(sock).__name__} object" if sock is not None else "native code"
        text = f"listening socket{whose} on {where[inode]} is still open (fd {fd}, held by {held})"
        out.append(Leak(text, sock.close if sock is not None else None))
    return out


class SocketCheck:
    """Snapshot: the socket descriptors open in this process."""

    def __init__(self) -> None:
        self._carried: Inodes | None = None  # the last test's end scan, nothing undone since
        self._unseekable: set[int] = set()  # descriptors that did not seek at the last scan

    def snapshot(self) -> Inodes:
        carried, self._carried = self._carried, None
        return carried if carried is not None else _socket_fds(self._unseekable)

    def compare(self, before: Inodes) -> list[Leak]:
        now = _socket_fds(self._unseekable)
        leaks = _leaks(now - before, "")
        self._carried = None if leaks else now
        return leaks

    def absorb(self, snap: Inodes, start: Inodes, end: Inodes) -> Inodes:
        return snap | (end - start)

    def left_over(self, start: Inodes, end: Inodes) -> list[Leak]:
        return _leaks((end - start) & _socket_fds(), " it opened")
