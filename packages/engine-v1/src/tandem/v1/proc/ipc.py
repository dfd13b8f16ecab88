"""What the client and its children share: socket names and the start-up payload.

A child is started before its payload exists (so its imports overlap the caller's
work) and reads the payload from its stdin, a pipe the client writes once and closes.
"""

from __future__ import annotations

import os
import pickle
from typing import IO, Any


def endpoint(ipc_dir: str, name: str) -> str:
    return f"ipc://{os.path.join(ipc_dir, name)}.sock"


def write_payload(stream: IO[bytes], payload: dict[str, Any]) -> None:
    """Send ``payload`` down a child's stdin pipe and close it (the child reads to EOF)."""
    try:
        stream.write(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))
    finally:
        stream.close()


def read_payload(stream: IO[bytes]) -> dict[str, Any] | None:
    """The child's side: the payload, or None when the pipe closed without one."""
    data = stream.read()
    if not data:
        return None
    payload = pickle.loads(data)
    if not isinstance(payload, dict):
        raise TypeError(f"start-up payload must be a dict, got {type(payload).__name__}")
    return payload
