"""The detokenizer's loop: it fronts the core.

Requests and aborts from the client are registered here and then forwarded to the core
on the same ordered pipe, so the core never sees an abort before its request, and this
process never sees tokens of a request it does not know. A request whose text cannot be
set up fails here, with a Result to the client, and never reaches the core.
"""

from __future__ import annotations

import zmq

from tandem.v1 import messages as m
from tandem.v1.detokenizer.processor import OutputProcessor


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
            for raw in _drain(from_client):
                msg = m.to_core.decode(raw)
                if isinstance(msg, m.AddRequest):
                    failed = proc.add(msg)
                    if failed is not None:
                        to_client.send(m.encode(m.Results([failed])))
                        continue
                elif isinstance(msg, m.Abort):
                    proc.abort(msg.request_ids)
                to_core.send(raw)
        if from_core in ready:
            for raw in _drain(from_core):
                msg = m.from_core.decode(raw)
                if not isinstance(msg, m.CoreOutputs):
                    to_client.send(raw)  # the core's StatsReply / Ready / Failed
                    continue
                results, stopped = proc.process(msg.outputs)
                if stopped:
                    to_core.send(m.encode(m.Abort([], stopped)))
                if results:
                    to_client.send(m.encode(m.Results(results, msg.stats)))


def _drain(sock: zmq.Socket) -> list[bytes]:
    """Every message waiting on ``sock`` now."""
    out = []
    while True:
        try:
            out.append(sock.recv(zmq.NOBLOCK))
        except zmq.Again:
            return out
