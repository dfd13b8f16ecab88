"""A rank that makes a checkpoint itself: ``python rank_make.py RANK SIZE PORT OUT ARCH...``.
Joins the group, then writes each architecture's tiny checkpoint to OUT/rank<RANK>/ARCH."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from tandem.core.parallel.group import exit_rank, join, leave
from tandem.core.testing import make_model


def main(argv: list[str]) -> None:
    rank, size, port, out, *archs = argv
    join(int(rank), int(size), "127.0.0.1", int(port), torch.device("cpu"), 60.0)
    done = False
    try:
        for arch in archs:
            make_model(Path(out) / f"rank{rank}" / arch, size="tiny", arch=arch)
        done = True
    finally:
        leave(wait_s=60.0 if done else 0.0)


if __name__ == "__main__":
    main(sys.argv[1:])
    exit_rank()  # a failure above raised: its traceback and exit status as usual
