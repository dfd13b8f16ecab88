"""The detokenizer's child process: its sockets, its tokenizer, then its loop
(:mod:`tandem.v1.detokenizer.loop`)."""

from __future__ import annotations

import os
import sys

import zmq

from tandem.core.child_failure import ChildError
from tandem.v1 import messages as m
from tandem.v1.proc.ipc import endpoint, read_payload
from tandem.v1.proc.procs import Terminate
from tandem.v1.proc.role import FAILED_LINGER_MS, report


def run(ipc_dir: str, report_fd: int | None = None) -> int:
    ctx = zmq.Context()
    from_client = ctx.socket(zmq.PULL)
    to_client = ctx.socket(zmq.PUSH)
    to_core = ctx.socket(zmq.PUSH)
    from_core = ctx.socket(zmq.PULL)
    socks = [from_client, to_client, to_core, from_core]
    linger = 0
    try:
        from_client.connect(endpoint(ipc_dir, "client_in"))
        to_client.connect(endpoint(ipc_dir, "client_out"))
        to_core.connect(endpoint(ipc_dir, "core_in"))
        from_core.connect(endpoint(ipc_dir, "core_out"))
        try:
            from tandem.core.heap import release_free_heap
            from tandem.v1.detokenizer.loop import loop
            from tandem.v1.detokenizer.processor import OutputProcessor
            from tandem.v1.proc.payload import load_decoder

            payload = read_payload(sys.stdin.buffer)
            if payload is None:  # the client gave up before sending the tokenizer
                return 0
            proc = OutputProcessor(load_decoder(payload))
            del payload
            release_free_heap()  # the decoder's JSON, parsed
        except Exception as exc:
            linger = FAILED_LINGER_MS
            report(to_client, [_failed(exc, True)], report_fd)
            return 1
        to_client.send(m.encode(m.Ready("detokenizer", os.getpid())))
        try:
            loop(proc, from_client, to_client, to_core, from_core)
        except Exception as exc:
            linger = FAILED_LINGER_MS
            report(to_client, [_failed(exc, False)], report_fd)
            return 1
        return 0
    except Terminate:
        return 0
    finally:
        for sock in socks:
            sock.close(linger=linger if sock is to_client else 0)
        ctx.term()


def _failed(exc: Exception, startup: bool) -> bytes:
    return m.encode(m.Failed("detokenizer", os.getpid(), startup, ChildError.of(exc)))
