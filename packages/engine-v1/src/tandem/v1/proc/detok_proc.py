"""The detokenizer's loop in its child process.

It fronts the core: requests and aborts from the client are registered here and then
forwarded to the core on the same ordered pipe, so the core never sees an abort
before its request, and this process never sees tokens of a request it does not know.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import TYPE_CHECKING

import zmq

from tandem.v1.proc import messages as m
from tandem.v1.proc.ipc import endpoint, read_payload
from tandem.v1.proc.procs import Terminate

if TYPE_CHECKING:
    from tandem.v1.frontend.output_processor import OutputProcessor


def run(ipc_dir: str) -> int:
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
            from tandem.v1.frontend.output_processor import OutputProcessor
            from tandem.v1.proc.payload import load_decoder

            payload = read_payload(sys.stdin.buffer)
            if payload is None:  # the client gave up before sending the tokenizer
                return 0
            proc = OutputProcessor(load_decoder(payload))
        except Exception:
            linger = 2000
            to_client.send(
                m.encode(m.Failed("detokenizer", os.getpid(), traceback.format_exc(), True))
            )
            return 1
        to_client.send(m.encode(m.Ready("detokenizer", os.getpid())))
        try:
            loop(proc, from_client, to_client, to_core, from_core)
        except Exception:
            linger = 2000
            to_client.send(
                m.encode(m.Failed("detokenizer", os.getpid(), traceback.format_exc(), False))
            )
            return 1
        return 0
    except Terminate:
        return 0
    finally:
        for sock in socks:
            sock.close(linger=linger if sock is to_client else 0)
        ctx.term()


def loop(
    proc: OutputProcessor,
    from_client: zmq.Socket,
    to_client: zmq.Socket,
    to_core: zmq.Socket,
    from_core: zmq.Socket,
) -> None:
    poller = zmq.Poller()
    poller.register(from_client, zmq.POLLIN)
    poller.register(from_core, zmq.POLLIN)
    while True:
        ready = dict(poller.poll())
        if from_client in ready:
            while True:
                try:
                    raw = from_client.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                msg = m.to_core.decode(raw)
                if isinstance(msg, m.AddRequest):
                    proc.add(msg)
                elif isinstance(msg, m.Abort):
                    proc.abort(msg.request_ids)
                to_core.send(raw)
        if from_core in ready:
            while True:
                try:
                    raw = from_core.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                msg = m.from_core.decode(raw)
                if not isinstance(msg, m.CoreOutputs):
                    to_client.send(raw)  # the core's StatsReply / Ready / Failed
                    continue
                results, stopped = proc.process(msg.outputs)
                if stopped:
                    to_core.send(m.encode(m.Abort([], stopped)))
                if results:
                    to_client.send(m.encode(m.Results(results, msg.stats)))
