"""How a child process ends once its work is done: its output flushed, then ``os._exit``.

The interpreter's own teardown only frees memory the OS takes back anyway, and takes
seconds with torch loaded; worse, torch's static destructors may find a transport thread
of a process group still joinable and abort the process (SIGABRT, "terminate called
without an active exception") after its work was done and reported. So every child the
project starts (an engine's core, detokenizer and rank processes, a script run as a
tensor-parallel rank) ends through :func:`exit_child`, after it has closed what it opened
(its sockets, its process group).
"""

from __future__ import annotations

import os
import sys


def exit_child(code: int = 0) -> None:
    """End this process with ``code`` without the interpreter's teardown; what it printed
    is flushed first (``os._exit`` drops what is still in Python's buffers)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
