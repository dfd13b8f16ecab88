"""The ``mp`` executor: the ranks of a tensor-parallel group as local child processes.

The engine core hosts the group's rendezvous store (a ``TCPStore`` on a free port of
127.0.0.1, the port chosen by the kernel, so no two engines race for one) and starts one
``python -m tandem.v1.proc.child rank DIR PID`` per rank. Each step goes to every rank
down its own socket; rank 0's result comes back on the shared one. While it waits the
executor watches the ranks, so a rank that dies (or whose collective failed because a
peer died) ends the step with :class:`RankLost` naming the rank, within a poll interval,
and with the exception the rank reported down its report pipe when it raised one.
"""

from __future__ import annotations

import contextlib
import datetime
import pickle
import shutil
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import zmq

from tandem.core import envs
from tandem.v1 import messages as m
from tandem.v1.proc.ipc import endpoint, write_payload
from tandem.v1.proc.payload import plain_config
from tandem.v1.proc.procs import Child, describe_exit, launch, stop
from tandem.v1.proc.ranks import RankLost, culprit
from tandem.v1.worker.rank import RankSetup

if TYPE_CHECKING:
    from tandem.core.config.engine_args import EngineConfig
    from tandem.v1.core.step import SchedulerOutput, StepOutput

POLL_MS = 100
HOST = "127.0.0.1"
STOP_GRACE_S = 3.0  # within the client's own grace for stopping the core


@dataclass(slots=True)
class _Ranks:
    """Everything the executor started, released by one finalizer."""

    dir: str | None = None
    store: Any = None  # torch.distributed.TCPStore: its listening socket lives with it
    ctx: zmq.Context | None = None
    sockets: list[zmq.Socket] = field(default_factory=list)
    procs: list[Child] = field(default_factory=list)

    def close(self) -> None:
        stop(self.procs, grace=STOP_GRACE_S)
        for sock in self.sockets:
            sock.close(linger=0)
        self.sockets.clear()
        if self.ctx is not None:
            self.ctx.term()
            self.ctx = None
        self.store = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


class MPExecutor:
    def __init__(
        self, config: EngineConfig, ready_timeout: float | None = None, workdir: str | None = None
    ) -> None:
        self._res = _Ranks()
        self._finalizer = weakref.finalize(self, self._res.close)
        size = config.parallel.tensor_parallel_size
        self.names = [f"tensor-parallel rank {r}" for r in range(size)]
        wait = float(envs.TANDEM_ENGINE_READY_TIMEOUT) if ready_timeout is None else ready_timeout
        try:
            self._start(config, float(envs.TANDEM_DIST_TIMEOUT), workdir)
            first = self._wait_ready(time.monotonic() + wait)
            self.num_kv_blocks, self.max_model_len = first.num_kv_blocks, first.max_model_len
            self.attention_backend, self.kv_source = first.attention_backend, first.kv_source
            self.num_local_kv_blocks = first.num_local_kv_blocks
            self.plan = first.plan  # rank 0's
        except BaseException:
            self.shutdown()
            raise

    def _start(self, config: EngineConfig, timeout: float, workdir: str | None) -> None:
        """Launch the ranks first (their imports take the longest), then host the store
        and the sockets, then hand each rank its setup. The sockets' folder is made inside
        ``workdir`` when given (see :func:`~tandem.v1.proc.executors.make_executor`)."""
        import torch.distributed as dist

        res, size = self._res, len(self.names)
        res.dir = tempfile.mkdtemp(prefix="tandem-tp-", dir=workdir)
        res.procs = [launch("rank", res.dir) for _ in range(size)]
        res.store = dist.TCPStore(
            HOST, 0, size, is_master=True, wait_for_workers=False,
            timeout=datetime.timedelta(seconds=timeout),
        )  # fmt: skip
        res.ctx = zmq.Context()
        self._to_ranks = [res.ctx.socket(zmq.PUSH) for _ in range(size)]
        self._from_ranks = res.ctx.socket(zmq.PULL)
        res.sockets += [*self._to_ranks, self._from_ranks]
        for r, sock in enumerate(self._to_ranks):
            sock.bind(endpoint(res.dir, f"rank{r}_in"))
        self._from_ranks.bind(endpoint(res.dir, "ranks_out"))
        plain = plain_config(config)
        for r, proc in enumerate(res.procs):
            setup = RankSetup(r, size, HOST, res.store.port, timeout)
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):  # a rank gone: the wait names it
                write_payload(proc.stdin, {"config": plain, "setup": setup})

    @property
    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in zip(self.names, self._res.procs)}

    def _wait_ready(self, deadline: float) -> m.Ready:
        """Rank 0's Ready, once every rank has sent its own (they size the same cache)."""
        ready: dict[str, m.Ready] = {}
        while len(ready) < len(self.names):
            if time.monotonic() > deadline:
                waiting = ", ".join(n for n in self.names if n not in ready)
                raise RankLost(waiting, 0, "not ready in time (TANDEM_ENGINE_READY_TIMEOUT)", True)
            if not self._from_ranks.poll(POLL_MS):
                self._check(startup=True)
                continue
            _, body = self._from_ranks.recv_multipart()
            msg = m.from_core.decode(body)
            if isinstance(msg, m.Failed):
                raise self._lost(msg)
            if isinstance(msg, m.Ready):
                ready[msg.who] = msg
        return ready[self.names[0]]

    def execute(self, step: SchedulerOutput) -> StepOutput:
        data = pickle.dumps(step, protocol=pickle.HIGHEST_PROTOCOL)
        for sock in self._to_ranks:
            sock.send(data)
        while True:
            if not self._from_ranks.poll(POLL_MS):
                self._check()
                continue
            kind, body = self._from_ranks.recv_multipart()
            if kind == b"out":
                return pickle.loads(body)
            msg = m.from_core.decode(body)
            if isinstance(msg, m.Failed):
                raise self._lost(msg)

    def check_health(self) -> None:
        self._check()

    def _check(self, startup: bool = False) -> None:
        codes = [proc.poll() for proc in self._res.procs]
        dead = culprit(codes)
        if dead is not None:
            raise self._ended(dead, codes[dead], startup)

    def _ended(self, rank: int, code: int | None, startup: bool = False) -> RankLost:
        """Rank ``rank`` exited: the failure it reported, else its exit code or signal."""
        proc = self._res.procs[rank]
        failed = proc.last_words()
        if failed is not None:
            return RankLost.reported(failed)
        return RankLost(self.names[rank], proc.pid, describe_exit(code), startup)

    def _lost(self, failed: m.Failed) -> RankLost:
        """A rank reported a failure: name a peer that died without a word meanwhile
        instead (a failed collective is the echo of a peer's death), else the reporter."""
        reports = {failed.who: failed}
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            while self._from_ranks.poll(0):
                kind, body = self._from_ranks.recv_multipart()
                msg = m.from_core.decode(body) if kind == b"failed" else None
                if isinstance(msg, m.Failed):
                    reports.setdefault(msg.who, msg)
            codes = [p.poll() for p in self._res.procs]
            told = frozenset(i for i, name in enumerate(self.names) if name in reports)
            dead = culprit(codes, told)
            if dead is not None:
                return self._ended(dead, codes[dead])
            time.sleep(0.05)
        return RankLost.reported(failed)

    def shutdown(self) -> None:
        self._finalizer()
