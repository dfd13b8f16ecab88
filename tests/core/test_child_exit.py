"""How a child process ends (``tandem.core.child_exit``): with its code, what it printed
still in Python's buffers written out, and no exit handler run."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_a_child_ends_with_its_code_and_its_output_flushed() -> None:
    script = textwrap.dedent(
        """
        import atexit, sys
        from tandem.core.child_exit import exit_child
        atexit.register(lambda: print("teardown ran"))
        print("out, unflushed", end="")
        print("err, unflushed", end="", file=sys.stderr)
        exit_child(3)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 3
    assert done.stdout == "out, unflushed"
    assert done.stderr == "err, unflushed"
