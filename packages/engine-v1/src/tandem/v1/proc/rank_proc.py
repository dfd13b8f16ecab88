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
import traceback
from typing import TYPE_CHECKING

import zmq

from tandem.v1 import messages as m
from tandem.v1.proc.ipc import endpoint, read_payload
from tandem.v1.proc.procs import Terminate

if TYPE_CHECKING:
    from tandem.v1.worker.rank import RankWorker


def run(ipc_dir: str) -> int:
    ctx = zmq.Context()
    inp = ctx.socket(zmq.PULL)
    out = ctx.socket(zmq.PUSH)
    worker: RankWorker | None = None
    linger = 0
    try:
        from tandem.v1.worker.rank import RankWorker  # torch loads while the core resolves

        payload = read_payload(sys.stdin.buffer)
        if payload is None:  # the executor gave up before sending the setup
            return 0
        setup = payload["setup"]
        inp.connect(endpoint(ipc_dir, f"rank{setup.rank}_in"))
        out.connect(endpoint(ipc_dir, "ranks_out"))
        try:
            worker = RankWorker(payload["config"], setup)
        except Exception:
            linger = 2000
            _failed(out, setup.name, True)
            return 1
        ready = m.Ready(setup.name, os.getpid(), worker.num_kv_blocks, worker.attention_backend)
        out.send_multipart([b"ready", m.encode(ready)])
        try:
            serve(worker, inp, out)
        except Exception:
            linger = 2000
            _failed(out, setup.name, False)
            return 1
        return 0
    except Terminate:
        return 0
    finally:
        if worker is not None:
            worker.close()
        inp.close(linger=0)
        out.close(linger=linger)
        ctx.term()


def _failed(out: zmq.Socket, who: str, startup: bool) -> None:
    failed = m.Failed(who, os.getpid(), traceback.format_exc(), startup)
    out.send_multipart([b"failed", m.encode(failed)])


def serve(worker: RankWorker, inp: zmq.Socket, out: zmq.Socket) -> None:
    """Run each step as it arrives; rank 0 sends its result back."""
    while True:
        step = pickle.loads(inp.recv())
        result = worker.execute(step)
        if result is not None:
            out.send_multipart([b"out", pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)])
