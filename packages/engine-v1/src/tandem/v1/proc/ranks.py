"""What the executors share about their ranks: how a lost rank is told and found."""

from __future__ import annotations


class RankLost(RuntimeError):
    """A rank of the tensor-parallel group died or failed: the engine cannot go on.

    ``who`` names the rank, ``pid`` its process (0 where unknown), ``text`` how it ended
    (its exit, or its traceback)."""

    def __init__(self, who: str, pid: int, text: str, during_startup: bool = False) -> None:
        super().__init__(f"{who} (pid {pid}): {text}")
        self.who = who
        self.pid = pid
        self.text = text
        self.during_startup = during_startup


def culprit(codes: list[int | None], reported: frozenset[int] = frozenset()) -> int | None:
    """The rank to blame among exit codes (None: running): one killed by a signal first,
    then any that exited; ``reported`` ranks said why they failed (their failure may be
    the echo of a silent peer's death, which is then the one to blame)."""
    ended = [(i, c) for i, c in enumerate(codes) if c is not None and i not in reported]
    killed = [i for i, c in ended if c < 0]
    if killed:
        return killed[0]
    return ended[0][0] if ended else None
