"""A child's journal: what it has not sent its parent yet, in a side file the parent can read.

The child writes frames (``wire.frame``) into a shared memory mapping of the file: a
write is a copy into memory, no system call, and the kernel's page cache holds it at
once, so the parent reads it even after the child was killed. Each write puts the new
frames and a fresh end mark first and the header that replaces the old end mark last:
a parent reading while the child writes sees either the old journal or the new one
whole. Where the file cannot be mapped, each write is one ``pwrite`` instead.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from . import wire
from .messages import Message

SIZE = 1 << 16  # the mapping's first size; it doubles as a batch needs


def journal_file(folder: Path, pid: int) -> Path:
    return folder / f"child-{pid}.journal"


def journal(folder: Path, pid: int) -> list[Message]:
    """What a child had not sent yet, in order (its tests' starts included)."""
    try:
        data = journal_file(folder, pid).read_bytes()
    except OSError:
        return []
    return wire.parse(data)


class Journal:
    """The writing side, in the child: ``append`` frames, ``clear`` once they are sent."""

    def __init__(self, folder: Path) -> None:
        self.offset = 0  # where the end mark is
        self.map: mmap.mmap | None = None
        self.fd = os.open(
            journal_file(folder, os.getpid()), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600
        )
        try:
            os.ftruncate(self.fd, SIZE)  # all zeros: an empty journal
            self.map = mmap.mmap(self.fd, SIZE)
        except (OSError, ValueError):
            return  # pwrite it is
        os.close(self.fd)  # the mapping holds the file
        self.fd = -1

    def append(self, data: bytes) -> None:
        """Add ``data`` (whole frames) after what the journal holds."""
        if not data:
            return
        start, end = self.offset, self.offset + len(data)
        self.offset = end
        if self.map is None:
            os.pwrite(self.fd, data + wire.END, start)
            return
        if end + len(wire.END) > len(self.map):
            self.map.resize(max(2 * len(self.map), 2 * (end + len(wire.END))))
        head = len(wire.END)
        self.map[start + head : end] = data[head:]
        self.map[end : end + head] = wire.END
        self.map[start : start + head] = data[:head]  # last: the new frames are complete

    def clear(self) -> None:
        """Empty the journal (its frames were sent)."""
        if not self.offset:
            return
        self.offset = 0
        if self.map is None:
            os.pwrite(self.fd, wire.END, 0)
        else:
            self.map[: len(wire.END)] = wire.END
