"""A tensor-parallel rank's child process: its sockets, its shard, then its loop.

It reads its payload (the config and its :class:`~tandem.v1.worker.rank.RankSetup`)
from stdin, connects to the engine core's executor, says it is ready, and then runs
every step that arrives. Replies travel as two frames, a kind (``ready``, ``failed``,
``out``) and the body: msgspec for the first two, a pickled ``StepOutput`` for the last.
"""

from __future__ import annotations

import os
import pickle
import sys
from importlib import import_module
from typing import TYPE_CHECKING, Any

import zmq

from tandem.core.child_failure import ChildError
from tandem.v1 import messages as m
from tandem.v1.proc.ipc import endpoint, read_payload
from tandem.v1.proc.role import run_process

if TYPE_CHECKING:
    from tandem.v1.worker.rank import RankWorker


def run(ipc_dir: str, report_fd: int | None = None) -> int:
    return run_process(_Rank(ipc_dir), report_fd)


class _Rank:
    """A rank's parts for :func:`~tandem.v1.proc.role.run_process`."""

    def __init__(self, ipc_dir: str) -> None:
        self.ipc_dir = ipc_dir
        self.payload: dict[str, Any] = {}
        self.worker: RankWorker | None = None

    def open(self, inp: zmq.Socket, out: zmq.Socket) -> bool:
        import_module("tandem.v1.worker.rank")  # torch loads while the core resolves
        payload = read_payload(sys.stdin.buffer)
        if payload is None:  # the executor gave up before sending the setup
            return False
        self.payload = payload
        inp.connect(endpoint(self.ipc_dir, f"rank{payload['setup'].rank}_in"))
        out.connect(endpoint(self.ipc_dir, "ranks_out"))
        return True

    def build(self) -> RankWorker:
        from tandem.v1.worker.rank import RankWorker

        self.worker = RankWorker(self.payload["config"], self.payload["setup"])
        return self.worker

    def ready(self, worker: RankWorker) -> list[bytes]:
        name = self.payload["setup"].name
        ready = m.Ready(
            name,
            os.getpid(),
            worker.num_kv_blocks,
            worker.attention_backend,
            max_model_len=worker.max_model_len,
            kv_source=worker.kv_source,
            num_local_kv_blocks=worker.num_local_kv_blocks,
            plan=worker.plan,
        )
        return [b"ready", m.encode(ready)]

    def serve(self, worker: RankWorker, inp: zmq.Socket, out: zmq.Socket) -> None:
        serve(worker, inp, out)

    def failed(self, exc: Exception, startup: bool) -> list[bytes]:
        who = self.payload["setup"].name
        return [b"failed", m.encode(m.Failed(who, os.getpid(), startup, ChildError.of(exc)))]

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()


def serve(worker: RankWorker, inp: zmq.Socket, out: zmq.Socket) -> None:
    """Run each step as it arrives; rank 0 sends its result back."""
    while True:
        step = pickle.loads(inp.recv())
        result = worker.execute(step)
        if result is not None:
            out.send_multipart([b"out", pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)])
