"""What the executors share about their ranks: how a lost rank is told and found."""

from __future__ import annotations

from tandem.core.child_failure import ChildError
from tandem.v1 import messages as m


class RankLost(RuntimeError):
    """A rank of the tensor-parallel group died or failed: the engine cannot go on.

    ``who`` names the rank, ``pid`` its process (0 where unknown), ``error`` the
    exception it raised, if it raised one, else ``text`` says how it ended (its exit)."""

    def __init__(
        self,
        who: str,
        pid: int,
        text: str,
        during_startup: bool = False,
        error: ChildError | None = None,
    ) -> None:
        super().__init__(f"{who} (pid {pid}): {error.describe() if error is not None else text}")
        self.who = who
        self.pid = pid
        self.text = text
        self.during_startup = during_startup
        self.error = error

    @classmethod
    def reported(cls, failed: m.Failed) -> RankLost:
        """The loss a rank's own ``Failed`` report tells."""
        return cls(failed.who, failed.pid, failed.ended, failed.during_startup, failed.error)


def culprit(codes: list[int | None], reported: frozenset[int] = frozenset()) -> int | None:
    """The rank to blame among exit codes (None: running): one killed by a signal first,
    then any that exited; ``reported`` ranks said why they failed (their failure may be
    the echo of a silent peer's death, which is then the one to blame)."""
    ended = [(i, c) for i, c in enumerate(codes) if c is not None and i not in reported]
    killed = [i for i, c in ended if c < 0]
    if killed:
        return killed[0]
    return ended[0][0] if ended else None
