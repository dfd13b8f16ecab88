"""The engine core's busy loop in its child process.

It starts importing torch and the model code at once, then reads its config from
stdin (the client sends it once resolved). It blocks on its input socket only while
it has nothing to do (waking once a second to check its executor's processes);
otherwise it drains every pending message without waiting and runs one step. Outputs no
one reads before their sample ends wait here (:mod:`tandem.v1.proc.hold`), so a
final-only request wakes the detokenizer once per sample instead of once per token. A
lost tensor-parallel rank is reported as that rank's failure, so the client names it.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import zmq

from tandem.core.child_failure import ChildError
from tandem.v1 import messages as m
from tandem.v1.proc.hold import OutputHold
from tandem.v1.proc.ipc import endpoint, read_payload
from tandem.v1.proc.ranks import RankLost
from tandem.v1.proc.role import run_process

if TYPE_CHECKING:
    from tandem.v1.core.engine_core import EngineCore
    from tandem.v1.core.step import Executor

IDLE_CHECK_MS = 1000


def run(ipc_dir: str, report_fd: int | None = None) -> int:
    return run_process(_Core(ipc_dir), report_fd)


class _Core:
    """The engine core's parts for :func:`~tandem.v1.proc.role.run_process`."""

    def __init__(self, ipc_dir: str) -> None:
        self.ipc_dir = ipc_dir
        self.executor: Executor | None = None

    def open(self, inp: zmq.Socket, out: zmq.Socket) -> bool:
        inp.bind(endpoint(self.ipc_dir, "core_in"))
        out.bind(endpoint(self.ipc_dir, "core_out"))
        return True

    def build(self) -> EngineCore | None:
        # the heavy imports run while the client is still resolving the config
        from tandem.v1.core.engine_core import EngineCore
        from tandem.v1.proc.executors import make_executor

        payload = read_payload(sys.stdin.buffer)
        if payload is None:  # the client gave up before sending the config
            return None
        config = payload["config"].with_torch()  # the client's may hold names
        self.executor = make_executor(config, workdir=self.ipc_dir)
        return EngineCore(config, self.executor)

    def ready(self, core: EngineCore) -> list[bytes]:
        backend = core.runner.attention_backend
        workers = getattr(self.executor, "pids", {})
        cache = core.config.cache
        ready = m.Ready(
            "core",
            os.getpid(),
            core.num_kv_blocks,
            backend,
            workers,
            max_model_len=cache.max_model_len,
            kv_source=cache.kv_source,
            num_local_kv_blocks=cache.num_local_blocks or 0,
            plan=getattr(core.runner, "plan", ""),
        )
        return [m.encode(ready)]

    def serve(self, core: EngineCore, inp: zmq.Socket, out: zmq.Socket) -> None:
        loop(core, inp, out)

    def failed(self, exc: Exception, startup: bool) -> list[bytes]:
        return [m.encode(_failed(exc, startup))]

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown()


def _failed(exc: Exception, startup: bool) -> m.Failed:
    """The failure to report: a lost rank's own (the client names it), else the core's."""
    if isinstance(exc, RankLost):
        return m.Failed(exc.who, exc.pid, startup or exc.during_startup, exc.error, exc.text)
    return m.Failed("core", os.getpid(), startup, ChildError.of(exc))


def loop(core: EngineCore, inp: zmq.Socket, out: zmq.Socket) -> None:
    poller = zmq.Poller()
    poller.register(inp, zmq.POLLIN)
    hold = OutputHold()
    while True:
        idle = not core.has_work()
        if not poller.poll(IDLE_CHECK_MS if idle else 0):
            if idle:
                core.runner.check_health()
        else:
            while True:
                try:
                    raw = inp.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                msg = m.to_core.decode(raw)
                if isinstance(msg, m.GetStats):
                    out.send(m.encode(m.StatsReply(core.stats())))
                    continue
                hold.track(msg)
                done = hold.pass_on(core.handle(msg))
                if done:
                    out.send(m.encode(m.CoreOutputs(done, core.stats())))
        if core.has_work():
            outputs = hold.pass_on(core.step())
            if outputs:
                out.send(m.encode(m.CoreOutputs(outputs, core.stats())))
