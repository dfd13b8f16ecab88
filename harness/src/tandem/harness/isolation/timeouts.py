"""Per-test timeouts for tests that run in the pytest process itself (``isolate none``).

An isolated child is killed by its parent; a test in this process cannot be, so a
``SIGALRM`` interval timer raises a test failure in the main thread, with the stack of
where the test was when its time ran out. Where no alarm can be set (off the main thread,
no ``SIGALRM``), the test fails up front instead of running without its limit.
"""

from __future__ import annotations

import signal
import threading
import time
import traceback
from types import FrameType
from typing import Any

import pytest


class Alarm:
    """One test's deadline across its setup, call and teardown."""

    def __init__(self, nodeid: str, limit: float) -> None:
        self.nodeid = nodeid
        self.limit = limit
        self.deadline = time.monotonic() + limit
        self.previous: Any = None

    @staticmethod
    def usable() -> bool:
        return hasattr(signal, "SIGALRM") and threading.current_thread() is threading.main_thread()

    def _ring(self, signum: int, frame: FrameType | None) -> None:
        where = "".join(traceback.format_stack(frame)[-12:]) if frame is not None else ""
        pytest.fail(
            f"Timeout: {self.nodeid} ran longer than {self.limit:g} s "
            f"(in-process: the harness interrupted it)\n\nwhere it was:\n{where}",
            pytrace=False,
        )

    def arm(self) -> None:
        left = self.deadline - time.monotonic()
        self.previous = signal.signal(signal.SIGALRM, self._ring)
        signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))

    def disarm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if self.previous is not None:
            signal.signal(signal.SIGALRM, self.previous)
            self.previous = None
