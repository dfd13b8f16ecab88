"""Entry point of engine v1's child processes:
``python -m tandem.v1.proc.child ROLE DIR PPID [REPORT_FD]``.

Sets up the life-cycle guards (parent-death signal, parent watch, SIGTERM -> clean
exit, SIGINT ignored: the parent stops its children) before importing anything heavy,
then runs the role's loop. ``REPORT_FD`` is the pipe a failure is reported down
(:mod:`tandem.core.child_failure`); the role reports what it raises, and what escapes
it is reported here.
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import signal
import sys

from tandem.core.child_exit import exit_child
from tandem.core.child_failure import ChildError, send_report
from tandem.v1 import messages as m
from tandem.v1.proc.procs import (
    SIGNALLED,
    Terminate,
    install_signal_handlers,
    set_parent_death_signal,
    watch_parent,
)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (3, 4) or not all(a.isdigit() for a in args[2:]):
        print(
            "usage: python -m tandem.v1.proc.child {core,detokenizer,rank} IPC_DIR PARENT_PID "
            "[REPORT_FD]",
            file=sys.stderr,
        )
        return 2
    role, ipc_dir, ppid_text = args[:3]
    parent = int(ppid_text)
    report_fd = int(args[3]) if len(args) == 4 else None
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the signal was armed
        return 0
    install_signal_handlers()
    watch_parent(parent, last_words=lambda: shutil.rmtree(ipc_dir, ignore_errors=True))
    faulthandler.enable()
    try:
        if role == "core":
            from tandem.v1.proc.core_proc import run
        elif role == "detokenizer":
            from tandem.v1.proc.detok_proc import run
        elif role == "rank":
            from tandem.v1.proc.rank_proc import run
        else:
            print(f"role must be one of core, detokenizer, rank; got {role!r}", file=sys.stderr)
            return 2
        return run(ipc_dir, report_fd)
    except Terminate:
        return 0
    except Exception as exc:  # raised where the role could not report it itself
        send_report(report_fd, m.encode(m.Failed(role, os.getpid(), True, ChildError.of(exc))))
        raise
    finally:
        # a second SIGTERM (parent-death signal, then the parent watch) must not cut this short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if SIGNALLED.is_set() or os.getppid() != parent:
            # stopped, or orphaned: the parent may have died without its clean-up (its
            # pid stays our parent's while its other threads exit), so the socket
            # directory goes now; a live parent's own removal ignores what is gone
            shutil.rmtree(ipc_dir, ignore_errors=True)


if __name__ == "__main__":
    code = main()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    exit_child(code)  # run() has closed its sockets
