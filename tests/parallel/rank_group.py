"""What every rank script of this folder (``rank_*.py``) does around its work: join the
group whose rendezvous store the test hosts, leave it, and end the process as the
engine's own ranks end (``exit_child``). A script run as a rank imports it as
``rank_group`` (its folder is ``sys.path[0]``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from tandem.core.child_exit import exit_child
from tandem.core.parallel.group import TensorParallel, join, leave


@contextmanager
def in_group(rank: str, size: str, port: str) -> Iterator[TensorParallel]:
    """This process as rank ``rank`` of ``size`` (gloo on the CPU, 60 s to meet and for
    each collective), the store at 127.0.0.1:``port``; the group is left on the way out:
    after the work, once the other ranks are done too (60 s at most), after a failure at
    once (a failed rank does not wait for the others)."""
    tp = join(int(rank), int(size), "127.0.0.1", int(port), torch.device("cpu"), 60.0)
    done = False
    try:
        yield tp
        done = True
    finally:
        leave(wait_s=60.0 if done else 0.0)


def run_rank(main: Callable[[list[str]], None]) -> None:
    """A rank script's run: ``main`` of its arguments (it joins and leaves the group), then
    ``exit_child``, the process's end without the interpreter's teardown. A failure in
    ``main`` raises: its traceback and exit status as usual."""
    main(sys.argv[1:])
    exit_child()
