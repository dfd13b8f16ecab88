"""Clients of the engine core: in another process (``MPClient``) or in this one.

Both offer ``send(msg)``, ``results(block)``, ``stats()`` and ``shutdown()``. ``MPClient`` owns two
children (engine core, detokenizer), four ``ipc://`` sockets in a private temporary
directory and a ZMQ context; all of them live in a ``_Resources`` object that a
``weakref.finalize`` releases, so an engine dropped without ``shutdown()`` still
cleans up, and the finalizer keeps no reference to the client itself.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import zmq

from tandem.core.text.tokenizer import Tokenizer
from tandem.v1 import messages as m
from tandem.v1.errors import EngineDeadError, EngineStartupError
from tandem.v1.proc.ipc import endpoint, write_payload
from tandem.v1.proc.payload import core_config, detokenizer_setup
from tandem.v1.proc.procs import Child, describe_exit, launch, stop

if TYPE_CHECKING:
    from tandem.core.child_failure import ChildError
    from tandem.core.config.engine_args import EngineConfig

POLL_MS = 100
ROLES = ("core", "detokenizer")


@dataclass(slots=True)
class _Resources:
    ipc_dir: str | None = None
    ctx: zmq.Context | None = None
    sockets: list[zmq.Socket] = field(default_factory=list)
    procs: dict[str, Child] = field(default_factory=dict)

    def close(self) -> None:
        stop(list(self.procs.values()))
        for sock in self.sockets:
            sock.close(linger=0)
        self.sockets.clear()
        if self.ctx is not None:
            self.ctx.term()
            self.ctx = None
        if self.ipc_dir is not None:
            shutil.rmtree(self.ipc_dir, ignore_errors=True)
            self.ipc_dir = None


class MPClient:
    """Talks to the detokenizer process, which fronts the engine-core process.

    Start-up comes in three calls so that the children's imports overlap the caller's
    own work: constructing the client starts both children at once (torch and the
    model code load in the core meanwhile); :meth:`configure` hands the core its
    config once resolved; :meth:`attach` hands the detokenizer its tokenizer and
    waits until both children are ready.
    """

    def __init__(self, ready_timeout: float) -> None:
        self._res = res = _Resources()
        self._finalizer = weakref.finalize(self, res.close)
        self.dead: str | None = None
        self.num_kv_blocks = 0
        self.attention_backend = ""  # the core's, as its Ready message says
        self.plan = ""  # the model's execution plan, as the core's Ready message says
        self.max_model_len = 0  # the context the core sized its cache for (Ready)
        self.kv_source = ""  # what sized it
        self.num_local_kv_blocks = 0  # the local layers' pool, where they have one
        self.worker_pids: dict[str, int] = {}  # the core's children (tensor-parallel ranks)
        # the core's counts as of the latest Results seen (cheap, possibly a step old)
        self.last_stats: m.CoreStats | None = None
        self._pending: list[m.Result] = []  # results read while waiting for a StatsReply
        self._deadline = time.monotonic() + ready_timeout
        self._timeout = ready_timeout
        try:
            res.ipc_dir = tempfile.mkdtemp(prefix="tandem-v1-")
            for role in ROLES:
                res.procs[role] = launch(role, res.ipc_dir)
            res.ctx = zmq.Context()
            self._out = res.ctx.socket(zmq.PUSH)
            self._in = res.ctx.socket(zmq.PULL)
            res.sockets += [self._out, self._in]
            self._out.bind(endpoint(res.ipc_dir, "client_in"))
            self._in.bind(endpoint(res.ipc_dir, "client_out"))
        except BaseException:
            self.shutdown()
            raise

    def configure(self, config: EngineConfig) -> None:
        """Send the engine core its config (an EngineConfig)."""
        self._hand_over("core", {"config": core_config(config)})

    def attach(self, tokenizer: Tokenizer) -> None:
        """Send the detokenizer its tokenizer; wait until both children are ready."""
        self._hand_over("detokenizer", detokenizer_setup(tokenizer))
        try:
            self._handshake()
        except BaseException:
            self.shutdown()
            raise

    def _hand_over(self, role: str, payload: dict[str, Any]) -> None:
        proc = self._res.procs[role]
        if proc.stdin is None or proc.stdin.closed:
            raise RuntimeError(f"MPClient: the {role} process already has its payload")
        try:
            write_payload(proc.stdin, payload)
        except BrokenPipeError:
            pass  # the child is gone: the handshake reports its traceback or its exit
        except BaseException:
            self.shutdown()
            raise

    def kv_cache(self) -> tuple[int, int, int, str]:
        """The core's KV cache as its Ready said: (blocks, the local layers' blocks, the
        context it was sized for, what sized it)."""
        return self.num_kv_blocks, self.num_local_kv_blocks, self.max_model_len, self.kv_source

    @property
    def pids(self) -> dict[str, int]:
        """Every process of the engine by name: the children, then the core's own."""
        return {**{role: p.pid for role, p in self._res.procs.items()}, **self.worker_pids}

    @property
    def ipc_dir(self) -> str | None:
        return self._res.ipc_dir

    @property
    def inbox(self) -> zmq.Socket:
        """The socket results arrive on (to wait on several clients at once)."""
        return self._in

    def _handshake(self) -> None:
        waiting = set(ROLES)
        while waiting:
            if time.monotonic() > self._deadline:
                raise EngineStartupError(
                    f"engine v1: {', '.join(sorted(waiting))} not ready after "
                    f"{self._timeout:g} s (TANDEM_ENGINE_READY_TIMEOUT)"
                )
            if not self._in.poll(POLL_MS):
                self._check_procs(startup=True)
                continue
            msg = m.to_client.decode(self._in.recv())
            if isinstance(msg, m.Ready):
                waiting.discard(msg.who)
                if msg.who == "core":
                    self.num_kv_blocks = msg.num_kv_blocks
                    self.attention_backend = msg.attention_backend
                    self.plan = msg.plan
                    self.max_model_len, self.kv_source = msg.max_model_len, msg.kv_source
                    self.num_local_kv_blocks = msg.num_local_kv_blocks
                    self.worker_pids = dict(msg.workers)
            elif isinstance(msg, m.Failed):
                raise EngineStartupError(self._failure_text(msg), msg.error)

    def _failure_text(self, msg: m.Failed) -> str:
        """``engine v1: the core process (pid N) failed to start (exited with code 1):
        ValueError: ...``, then the last lines of its traceback."""
        proc = self._res.procs.get(msg.who)
        code = ""
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = f" ({describe_exit(proc.wait(timeout=5))})"
        stage = "failed to start" if msg.during_startup else "failed"
        return f"engine v1: the {msg.who} process (pid {msg.pid}) {stage}{code}: {msg.describe()}"

    def _check_procs(self, startup: bool = False) -> None:
        """Raise for the first child that has exited: with the failure it reported down
        its report pipe, else with its exit code or signal."""
        error = EngineStartupError if startup else EngineDeadError
        for role, proc in self._res.procs.items():
            code = proc.poll()
            if code is None:
                continue
            failed = proc.last_words()
            if failed is not None:
                raise error(self._failure_text(failed), failed.error)
            what = "died during start-up" if startup else "died"
            raise error(
                f"engine v1: the {role} process (pid {proc.pid}) {what}: {describe_exit(code)}"
            )

    # -- use -----------------------------------------------------------------------
    def _alive(self) -> None:
        if self.dead is not None:
            raise EngineDeadError(f"{self.dead}\nThe engine is unusable; create a new one.")

    def _die(self, text: str, error: ChildError | None = None) -> EngineDeadError:
        self.dead = text
        stop(list(self._res.procs.values()), grace=1.0)
        return EngineDeadError(f"{text}\nThe engine is unusable; create a new one.", error)

    def send(self, msg: m.AddRequest | m.Abort | m.GetStats) -> None:
        self._alive()
        data = m.encode(msg)
        while True:
            try:
                self._out.send(data, zmq.NOBLOCK)
                return
            except zmq.Again:
                self._watch()
                self._out.poll(POLL_MS, zmq.POLLOUT)

    def check(self) -> None:
        """EngineDeadError when a child has died (or already had), else nothing."""
        self._alive()
        self._watch()

    def _watch(self) -> None:
        try:
            self._check_procs()
        except EngineDeadError as exc:
            if exc.error is None:  # no report in its pipe: one may still come on the socket
                deadline = time.monotonic() + 0.5
                while self._in.poll(max(int((deadline - time.monotonic()) * 1000), 0)):
                    msg = m.to_client.decode(self._in.recv())
                    if isinstance(msg, m.Failed):
                        raise self._die(self._failure_text(msg), msg.error) from None
            raise self._die(str(exc), exc.error) from None

    def _read(self) -> m.CoreStats | None:
        """Take every message waiting now; results go to ``_pending``; a StatsReply's stats."""
        reply = None
        while self._in.poll(0):
            msg = m.to_client.decode(self._in.recv())
            if isinstance(msg, m.Results):
                self._pending.extend(msg.results)
                if msg.stats is not None:
                    self.last_stats = msg.stats
            elif isinstance(msg, m.StatsReply):
                reply = self.last_stats = msg.stats
            elif isinstance(msg, m.Failed):
                raise self._die(self._failure_text(msg), msg.error)
        return reply

    def results(self, block: bool) -> list[m.Result]:
        """Every result available now; with ``block``, wait until there is at least one."""
        self._alive()
        while True:
            self._read()
            if self._pending or not block:
                out, self._pending = self._pending, []
                return out
            if not self._in.poll(POLL_MS):
                self._watch()

    def stats(self) -> m.CoreStats:
        """Ask the core for its counts now (after every message sent before this call)."""
        self.send(m.GetStats())
        while True:
            reply = self._read()
            if reply is not None:
                return reply
            if not self._in.poll(POLL_MS):
                self._watch()

    def shutdown(self) -> None:
        self._finalizer()
