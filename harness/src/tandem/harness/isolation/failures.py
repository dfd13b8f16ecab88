"""What the parent says when a child could not report a test: the texts and the reports.

A crash or a timeout fails the phase the child had not reported yet, with the signal or
exit code and the child's last output; a teardown report follows, so the test is complete.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .child import crash_log
from .pool import Child

Log = Callable[[pytest.TestReport], None]
PHASES = ("setup", "call", "teardown")


@dataclass(slots=True)
class Outcome:
    reports: list[pytest.TestReport] = field(default_factory=list)
    done: bool = False
    exit: tuple[str, int | None] | None = None  # pytest.exit() in the child: (reason, code)
    interrupted: str = ""  # KeyboardInterrupt in the child: where it was raised


def crash_text(child: Child, nodeid: str, last_output: str) -> str:
    code = child.status if child.status is not None else 0
    how = f"exited with code {code}"
    if code < 0:
        with contextlib.suppress(ValueError):
            how = f"was killed by signal {signal.Signals(-code).name}"
    return f"Crash: the child process (pid {child.pid}) {how} while running {nodeid}" + last_output


def last_output(config: pytest.Config, child: Child, folder: Path) -> str:
    """The end of what the child printed (and its fault log), as report sections."""
    parts = []
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is not None and child.proc is None:
        with contextlib.suppress(Exception):
            out, err = capman.read_global_capture()
            parts += [("last stdout", out), ("last stderr", err)]
    if child.proc is not None:  # spawned: its output went to its own files
        for name, path in (("last stdout", child.out), ("last stderr", child.err)):
            with contextlib.suppress(OSError, TypeError):
                parts.append((name, Path(path).read_text(errors="replace")))
    with contextlib.suppress(OSError):
        parts.append(("fault log", crash_log(folder, child.pid).read_text()))
    return "".join(f"\n\n--- {name} ---\n{_clip(name, text)}" for name, text in parts if text)


def fail(item: pytest.Item, engine: str | None, log: Log, outcome: Outcome, text: str) -> None:
    """Fail the first phase not reported yet with ``text``; then a passed teardown."""
    whens = {r.when for r in outcome.reports}
    when = next((w for w in PHASES if w not in whens), "teardown")
    props = list(item.user_properties)
    if engine is not None and ("engine", engine) not in props:
        props.append(("engine", engine))
    keywords = {k: 1 for k in item.keywords}
    phases = [("failed", text, when)] + (
        [("passed", None, "teardown")] if when != "teardown" else []
    )
    for result, longrepr, phase in phases:
        report = pytest.TestReport(
            item.nodeid, item.location, keywords, result, longrepr, phase, user_properties=props
        )  # type: ignore[arg-type]
        outcome.reports.append(report)
        log(report)


def _clip(name: str, text: str, size: int = 3000) -> str:
    """The interesting end of an output: the last lines, or a fault log's newest frames."""
    if len(text) <= size:
        return text
    return text[:size] + "\n..." if name == "fault log" else "...\n" + text[-size:]
