"""The report a failing child process sends its parent (``tandem.core.child_failure``):
what it says of an exception, and the pipe it travels down, across real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tandem.core.child_failure import (
    MAX_REPORT_BYTES,
    TAIL_LINES,
    ChildError,
    ReportPipe,
    send_report,
    tail,
)


class LoadError(Exception):
    pass


def _raise(depth: int) -> None:
    if depth == 0:
        raise ValueError("the KV cache holds 1 blocks of 16 tokens, but one sequence needs 8")
    _relay(depth - 1)


def _relay(depth: int) -> None:  # two functions in turn: Python folds no repeated frame
    _raise(depth)


def _caught(depth: int) -> ValueError:
    try:
        _raise(depth)
    except ValueError as exc:
        return exc
    raise AssertionError("unreachable")


def test_an_exception_is_told_by_its_type_message_and_last_frames() -> None:
    err = ChildError.of(_caught(2))
    assert err.type_name == "ValueError"
    assert err.message.startswith("the KV cache holds 1 blocks")
    assert err.summary == f"ValueError: {err.message}"
    lines = err.traceback.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-1] == err.summary  # the line Python prints last
    assert "_raise" in err.traceback
    assert err.describe().splitlines()[:2] == [err.summary, "its traceback (last lines):"]


def test_a_long_traceback_keeps_its_head_and_its_tail() -> None:
    err = ChildError.of(_caught(60))
    lines = err.traceback.splitlines()
    assert len(lines) == TAIL_LINES + 2
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].startswith("  ... (") and lines[1].endswith(" lines cut)")
    assert lines[-1].startswith("ValueError: the KV cache holds")
    assert tail("a\nb\nc", lines=5) == "a\nb\nc"  # short: whole


def test_type_names_outside_the_builtins_are_qualified() -> None:
    err = ChildError.of(LoadError())
    assert err.type_name == f"{__name__}.LoadError"
    assert err.summary == err.type_name  # no message: the type alone
    given = ChildError.of(KeyError("w"), traceback_text="formatted elsewhere\nKeyError: 'w'")
    assert (given.summary, given.traceback) == (
        "KeyError: 'w'",
        "formatted elsewhere\nKeyError: 'w'",
    )
    assert ChildError("OSError", "disk").describe() == "OSError: disk"
    with pytest.raises(TypeError, match="exc must be an exception, got str"):
        ChildError.of("boom")  # type: ignore[arg-type]


def test_a_huge_message_stays_within_what_a_pipe_holds() -> None:
    err = ChildError.of(ValueError("\u20ac" * 100_000))
    import msgspec

    assert len(msgspec.msgpack.encode(err)) < MAX_REPORT_BYTES
    assert err.message.endswith("...")


CHILD = textwrap.dedent("""
    import os, sys
    from tandem.core.child_failure import send_report
    fd = int(sys.argv[1])
    how = sys.argv[2]
    if how == "report":
        assert send_report(fd, b"why it failed")
        sys.exit(1)
    if how == "too-long":
        assert not send_report(fd, b"x" * (1 << 20))
        sys.exit(1)
    os._exit(3)  # no word
""")


def _run_child(how: str) -> tuple[int, bytes]:
    pipe = ReportPipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(pipe.child_fd), how], pass_fds=(pipe.child_fd,)
        )
        pipe.started()
        code = proc.wait(timeout=60)
        first = pipe.read()
        assert pipe.read() == first  # repeatable
        return code, first
    finally:
        pipe.close()


@pytest.mark.parametrize(
    ("how", "want"), [("report", (1, b"why it failed")), ("too-long", (1, b"")), ("exit", (3, b""))]
)
def test_the_pipe_carries_a_report_from_a_child_that_exited(how: str, want: tuple) -> None:
    assert _run_child(how) == want


def test_the_pipe_outlives_its_close_and_refuses_no_reader() -> None:
    pipe = ReportPipe()
    fd = os.dup(pipe.child_fd)
    pipe.started()
    assert send_report(fd, b"said")
    pipe.close()
    assert pipe.read() == b"said"  # read before the close, kept
    assert not send_report(fd, b"again")  # no reader any more: refused, never blocks
    os.close(fd)
    assert not send_report(None, b"x")
