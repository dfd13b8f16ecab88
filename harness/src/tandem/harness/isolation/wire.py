"""Length-prefixed, pickled messages (``messages``) over pipes and sockets.

``send`` writes any number of messages in one ``write``: a child that batches the
reports of its tests wakes its parent once per batch. ``Reader`` buffers what one ``read``
brought, so several messages cost one system call. ``parse`` reads back a journal: frames
written one after the other into a file, ended by a zero-length header.
"""

from __future__ import annotations

import os
import pickle
import select
import struct

from .messages import KINDS, Message

_HEADER = struct.Struct("!I")
_PROTOCOL = pickle.HIGHEST_PROTOCOL


def send(fd: int, *messages: Message, at: int | None = None) -> None:
    """Write ``messages`` to ``fd``, all in one write where the pipe takes it.

    ``at``: write at this offset of a file instead, in one ``pwrite``. What an earlier,
    longer write left past the end stays: a ``Reader`` stops after the frames it is asked
    for, so a file rewritten at 0 reads as its newest first message.
    """
    data = b"".join(frame(m) for m in messages)
    if at is not None:
        os.pwrite(fd, data, at)
        return
    write(fd, data)


def write(fd: int, data: bytes) -> None:
    """Write frames made earlier (``frame``) to ``fd``, all of them."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def frame(message: Message) -> bytes:
    """One message as it goes on the wire: its length, then the pickle of a plain tuple,
    its kind's name and its fields' values (a dataclass pickles many times slower)."""
    body = pickle.dumps((type(message).__name__, *vars(message).values()), _PROTOCOL)
    return _HEADER.pack(len(body)) + body


def _load(body: bytes | memoryview) -> Message:
    name, *values = pickle.loads(body)
    return KINDS[name](*values)


END = _HEADER.pack(0)  # ends a journal: no message is empty


def parse(data: bytes) -> list[Message]:
    """The messages of a journal, up to its end mark (or a frame cut off mid-write)."""
    out: list[Message] = []
    at = 0
    while at + _HEADER.size <= len(data):
        size = _HEADER.unpack_from(data, at)[0]
        body = data[at + _HEADER.size : at + _HEADER.size + size]
        if size == 0 or len(body) < size:
            break
        try:
            out.append(_load(body))
        except Exception:  # torn by a crash mid-write
            break
        at += _HEADER.size + size
    return out


class Reader:
    """Messages from one file descriptor, read in large chunks.

    What one read brought is consumed from an offset: dropping each message from the
    front of the buffer would move the rest of the chunk once per message.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()
        self.at = 0  # where the next message starts in ``buffer``
        self.closed = False

    def _complete(self) -> bool:
        at, size = self.at, _HEADER.size
        if len(self.buffer) - at < size:
            return False
        return len(self.buffer) - at >= size + _HEADER.unpack_from(self.buffer, at)[0]

    def ready(self, timeout: float | None) -> bool:
        """Whether ``recv`` would return without blocking (a message, or end of file)."""
        if self._complete() or self.closed:
            return True
        return bool(select.select([self.fd], [], [], timeout)[0])

    def recv(self) -> Message | None:
        """The next message; None at end of file."""
        while not self._complete():
            if self.at:  # what is left of the last chunk goes to the front, once
                del self.buffer[: self.at]
                self.at = 0
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                self.closed = True
                return None
            self.buffer += chunk
        start = self.at + _HEADER.size
        end = start + _HEADER.unpack_from(self.buffer, self.at)[0]
        self.at = end
        with memoryview(self.buffer) as view, view[start:end] as body:
            return _load(body)  # unpickled from the buffer itself, no copy
