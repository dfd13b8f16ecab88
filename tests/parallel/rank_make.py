"""A rank that makes a checkpoint itself: ``python rank_make.py RANK SIZE PORT OUT ARCH...``.
Joins the group, then writes each architecture's tiny checkpoint to OUT/rank<RANK>/ARCH."""

from __future__ import annotations

from pathlib import Path

from rank_group import in_group, run_rank

from tandem.core.testing import make_model


def main(argv: list[str]) -> None:
    rank, size, port, out, *archs = argv
    with in_group(rank, size, port):
        for arch in archs:
            make_model(Path(out) / f"rank{rank}" / arch, size="tiny", arch=arch)


if __name__ == "__main__":
    run_rank(main)
