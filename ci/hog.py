"""Run a command beside a CPU hog: one busy-looping process per core, at the lowest priority.

    python -m ci.hog [--per-core N] -- COMMAND...

The hog takes whatever CPU the command leaves, so every wait the command makes runs late
and every race it has gets more room: a test that depends on timing fails here first. The
hog processes end with the command (also when it is interrupted); the exit status is the
command's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence

SPIN = "import os\nos.nice(19)\nwhile True:\n    pass\n"


def start(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` busy-looping interpreters at nice 19 (``SPIN``)."""
    return [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(count)]


def stop(hogs: Sequence[subprocess.Popen[bytes]]) -> None:
    for hog in hogs:
        hog.kill()
    for hog in hogs:
        hog.wait()


def run(command: Sequence[str], per_core: int = 1) -> int:
    """``command``'s exit status, run to its end beside ``per_core`` hogs on every core."""
    if not command:
        raise ValueError("command: expected a program and its arguments, got nothing")
    if per_core < 1:
        raise ValueError(f"per_core: expected an integer >= 1, got {per_core}")
    hogs = start(per_core * (os.cpu_count() or 1))
    try:
        return subprocess.call(list(command))
    finally:
        stop(hogs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci.hog", description=__doc__.splitlines()[0])
    parser.add_argument("--per-core", type=int, default=1, help="hog processes per core")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.per_core < 1:
        parser.error(f"--per-core: expected an integer >= 1, got {args.per_core}")
    if not command:
        parser.error("COMMAND: expected a program to run after --")
    return run(command, args.per_core)


if __name__ == "__main__":
    raise SystemExit(main())
