"""Data-parallel replicas: N engine cores, each with its own model and KV cache, behind
one client (``data_parallel_size=N``).

Each replica is a whole :class:`~tandem.v1.frontend.client.MPClient` (its engine core,
its detokenizer, its tensor-parallel ranks). A new request goes to the live replica
that holds the fewest unfinished requests (the lowest index on a tie); its aborts follow
it there. A replica that dies is reported (logged, and kept in :attr:`DPClient.lost`),
each of its requests ends with ``finish_reason="error"`` naming the replica, and the
others keep serving; only when no replica is left does the client raise
:class:`EngineDeadError`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import zmq

from tandem.v1 import messages as m
from tandem.v1.errors import EngineDeadError
from tandem.v1.frontend.client import POLL_MS, MPClient

if TYPE_CHECKING:
    from tandem.core.config.engine_args import EngineConfig
    from tandem.core.text.tokenizer import Tokenizer

log = logging.getLogger(__name__)


def replica_name(index: int) -> str:
    return f"data-parallel replica {index}"


class DPClient:
    """The client of ``size`` replicas, with :class:`MPClient`'s interface."""

    def __init__(self, size: int, ready_timeout: float) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 2:
            raise ValueError(f"data_parallel_size must be an int >= 2 here, got {size!r}")
        self.replicas: list[MPClient] = []
        try:
            for _ in range(size):
                self.replicas.append(MPClient(ready_timeout))
        except BaseException:
            self.shutdown()
            raise
        self.lost: dict[int, str] = {}  # replica index -> how it died
        self._owner: dict[str, int] = {}  # unfinished request id -> its replica
        self._samples: dict[str, int] = {}  # unfinished request id -> its number of samples
        self._pending: list[m.Result] = []  # the failed requests of a replica just lost

    # -- start-up (the same three calls as MPClient) ------------------------------------
    def configure(self, config: EngineConfig) -> None:
        for replica in self.replicas:
            replica.configure(config)

    def attach(self, tokenizer: Tokenizer) -> None:
        try:
            for i, replica in enumerate(self.replicas):
                try:
                    replica.attach(tokenizer)
                except EngineDeadError as exc:
                    raise type(exc)(f"{replica_name(i)}: {exc}", exc.error) from None
        except BaseException:
            self.shutdown()
            raise

    # -- what the engine reads ------------------------------------------------------------
    @property
    def dead(self) -> str | None:
        if len(self.lost) < len(self.replicas):
            return None
        return "; ".join(f"{replica_name(i)}: {text}" for i, text in sorted(self.lost.items()))

    @property
    def num_kv_blocks(self) -> int:
        return sum(r.num_kv_blocks for r in self.replicas)

    @property
    def attention_backend(self) -> str:
        return self.replicas[0].attention_backend

    @property
    def plan(self) -> str:
        return self.replicas[0].plan

    def kv_cache(self) -> tuple[int, int, int, str]:
        """The cache of the replica whose context is the shortest: each sized its own
        from the memory it saw, and a request must fit whichever replica takes it."""
        return min((r.kv_cache() for r in self.replicas), key=lambda size: size[2])

    @property
    def pids(self) -> dict[str, int]:
        """Every process of every replica, named after its replica."""
        return {
            f"{replica_name(i)} {name}": pid
            for i, replica in enumerate(self.replicas)
            for name, pid in replica.pids.items()
        }

    @property
    def ipc_dirs(self) -> list[str]:
        return [r.ipc_dir for r in self.replicas if r.ipc_dir is not None]

    def loads(self) -> list[int]:
        """Unfinished requests per replica (-1 for a lost one)."""
        counts = [0] * len(self.replicas)
        for i in self._owner.values():
            counts[i] += 1
        return [-1 if i in self.lost else c for i, c in enumerate(counts)]

    # -- use ------------------------------------------------------------------------------
    def _alive(self) -> None:
        text = self.dead
        if text is not None:
            raise EngineDeadError(f"{text}\nThe engine is unusable; create a new one.")

    def send(self, msg: m.AddRequest | m.Abort | m.GetStats) -> None:
        self._alive()
        if isinstance(msg, m.AddRequest):
            loads = self.loads()
            target = min((c, i) for i, c in enumerate(loads) if c >= 0)[1]
            rid = msg.request.request_id
            self._owner[rid] = target
            self._samples[rid] = msg.request.n
            self._guarded(target, lambda r: r.send(msg))
        elif isinstance(msg, m.Abort):
            self._abort(msg)
        else:
            raise TypeError("DPClient.send: ask stats() for the replicas' counts")

    def _abort(self, msg: m.Abort) -> None:
        by_replica: dict[int, m.Abort] = {}
        for rid in msg.request_ids:
            i = self._owner.pop(rid, None)
            self._samples.pop(rid, None)
            if i is not None and i not in self.lost:
                prev = by_replica.get(i, m.Abort([]))
                by_replica[i] = m.Abort([*prev.request_ids, rid], prev.samples)
        for rid, index in msg.samples:
            i = self._owner.get(rid)
            if i is not None and i not in self.lost:
                prev = by_replica.get(i, m.Abort([]))
                by_replica[i] = m.Abort(prev.request_ids, [*prev.samples, (rid, index)])
        for i, part in by_replica.items():
            self._guarded(i, lambda r, part=part: r.send(part))

    def _guarded(self, index: int, call: object) -> object:
        """``call(replica)``; a replica found dead is recorded and its requests fail."""
        try:
            return call(self.replicas[index])  # type: ignore[operator]
        except EngineDeadError as exc:
            self._lose(index, str(exc).split("\nThe engine is unusable")[0])
            return None

    def _lose(self, index: int, text: str) -> None:
        self.lost[index] = text
        log.error("tandem: %s is lost: %s", replica_name(index), text)
        why = f"{replica_name(index)} died: {text}"
        for rid in [rid for rid, i in self._owner.items() if i == index]:
            del self._owner[rid]
            samples = [
                m.Completion(j, "", [], None, None, "error", None)
                for j in range(self._samples.pop(rid, 1))
            ]
            self._pending.append(m.Result(rid, None, samples, True, 0, error=why))
        self.replicas[index].shutdown()
        self._alive()

    def check(self) -> None:
        """Record replicas that died; EngineDeadError only when none is left."""
        self._alive()
        for i in range(len(self.replicas)):
            if i not in self.lost:
                self._guarded(i, MPClient.check)

    def results(self, block: bool) -> list[m.Result]:
        """Every replica's results available now (and the failed requests of a replica
        just lost); with ``block``, wait until there is at least one."""
        self._alive()
        while True:
            out, self._pending = self._pending, []
            for i in range(len(self.replicas)):
                if i not in self.lost:
                    out += self._guarded(i, lambda r: r.results(False)) or []
            for res in out:
                if res.finished:
                    self._owner.pop(res.request_id, None)
                    self._samples.pop(res.request_id, None)
            if out or not block:
                return out
            if not self._wait():
                self.check()

    def _wait(self) -> bool:
        poller = zmq.Poller()
        for i, replica in enumerate(self.replicas):
            if i not in self.lost:
                poller.register(replica.inbox, zmq.POLLIN)
        return bool(poller.poll(POLL_MS))

    def stats(self) -> m.CoreStats:
        """The live replicas' counts added up."""
        self._alive()
        snaps = [
            snap
            for i in range(len(self.replicas))
            if i not in self.lost and (snap := self._guarded(i, MPClient.stats)) is not None
        ]
        self._alive()
        fields = m.CoreStats.__struct_fields__
        return m.CoreStats(*(sum(getattr(s, f) for s in snaps) for f in fields))  # type: ignore[arg-type]

    def shutdown(self) -> None:
        for replica in self.replicas:
            replica.shutdown()
