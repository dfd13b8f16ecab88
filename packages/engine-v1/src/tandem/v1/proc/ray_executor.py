"""The ``ray`` executor: the ranks of a tensor-parallel group as Ray actors.

The actors sit in one placement group (a bundle of one CPU, or one GPU, per rank; packed
onto as few nodes as hold them), on the Ray cluster this process finds, else on a local
one it starts (:func:`~tandem.v1.proc.ray_rank.connect`). As with the ``mp`` executor,
the engine core hosts the rendezvous store, here on the address its node has in the
cluster, and every step goes to every rank; rank 0's result comes back. A rank whose
actor died, or whose start or step failed, ends the step with :class:`RankLost` naming
it and, when it raised, the exception it raised (type, message, traceback tail).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import time
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tandem.core import envs
from tandem.core.child_failure import ChildError
from tandem.v1.proc.payload import plain_config
from tandem.v1.proc.ranks import RankLost
from tandem.v1.proc.ray_rank import RankActor, connect, require_ray, restore_env
from tandem.v1.worker.rank import RankSetup

if TYPE_CHECKING:
    from tandem.core.config.engine_args import EngineConfig
    from tandem.v1.core.step import SchedulerOutput, StepOutput

_COLOURS = re.compile(r"\x1b\[[0-9;]*m")
POLL_S = 0.1
HEALTH_S = 5.0


@dataclass(slots=True)
class _Actors:
    """Everything the executor started, released by one finalizer."""

    ray: Any
    started_ray: bool = False
    group: Any = None  # the placement group
    actors: list[Any] = field(default_factory=list)
    store: Any = None  # torch.distributed.TCPStore
    env: dict[str, str] | None = None  # os.environ before this executor connected

    def close(self) -> None:
        ray = self.ray
        if self.actors:
            with contextlib.suppress(Exception):  # a dead actor has no group to leave
                ray.wait([a.close.remote() for a in self.actors], num_returns=len(self.actors),
                         timeout=3.0)  # fmt: skip
            for actor in self.actors:
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
            self.actors.clear()
        if self.group is not None:
            with contextlib.suppress(Exception):
                ray.util.remove_placement_group(self.group)
            self.group = None
        self.store = None
        if self.started_ray and ray.is_initialized():
            ray.shutdown()
        self.started_ray = False
        if self.env is not None:
            restore_env(self.env)
            self.env = None


class RayExecutor:
    def __init__(self, config: EngineConfig, ready_timeout: float | None = None) -> None:
        env = dict(os.environ)  # importing ray and ray.init set variables of their own
        ray = require_ray()
        self._res = _Actors(ray, env=env)
        self._finalizer = weakref.finalize(self, self._res.close)
        size = config.parallel.tensor_parallel_size
        self.names = [f"tensor-parallel rank {r}" for r in range(size)]
        self._pids = [0] * size
        wait = float(envs.TANDEM_ENGINE_READY_TIMEOUT) if ready_timeout is None else ready_timeout
        try:
            self._res.started_ray = connect(ray)
            if not self._res.started_ray:
                self._res.env = None  # the caller's connection: its variables are its own
            self._start(config, float(envs.TANDEM_DIST_TIMEOUT), time.monotonic() + wait)
        except BaseException:
            self.shutdown()
            raise

    def _start(self, config: EngineConfig, timeout: float, deadline: float) -> None:
        import torch.distributed as dist
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        ray, res, size = self._res.ray, self._res, len(self.names)
        unit = "GPU" if config.device.type == "cuda" else "CPU"
        res.group = placement_group([{unit: 1}] * size, strategy="PACK")
        if not ray.wait([res.group.ready()], timeout=_left(deadline))[0]:
            raise RankLost(", ".join(self.names), 0, f"no room for {size} x {{{unit}: 1}}", True)
        host = ray.util.get_node_ip_address()
        res.store = dist.TCPStore(
            host, 0, size, is_master=True, wait_for_workers=False,
            timeout=datetime.timedelta(seconds=timeout),
        )  # fmt: skip
        remote = ray.remote(RankActor)
        for r in range(size):
            where = PlacementGroupSchedulingStrategy(res.group, placement_group_bundle_index=r)
            opts = {"num_gpus": 1} if unit == "GPU" else {"num_cpus": 1}
            res.actors.append(remote.options(scheduling_strategy=where, **opts).remote())
        self._pids = self._gather([a.pid.remote() for a in res.actors], deadline, True)
        plain = plain_config(config)
        setups = [RankSetup(r, size, host, res.store.port, timeout) for r in range(size)]
        refs = [a.start.remote(plain, s) for a, s in zip(res.actors, setups)]
        ready = self._gather(refs, deadline, True)
        self.num_kv_blocks, self.attention_backend, self.max_model_len = ready[0][:3]
        self.kv_source, self.num_local_kv_blocks = ready[0][3:]

    @property
    def pids(self) -> dict[str, int]:
        return dict(zip(self.names, self._pids))

    @property
    def nodes(self) -> list[str]:
        """The Ray node id each rank runs on."""
        table = self._res.ray.util.placement_group_table(self._res.group)
        where = table["bundles_to_node_id"]
        return [where[r] for r in range(len(self.names))]

    def execute(self, step: SchedulerOutput) -> StepOutput:
        refs = [a.execute.remote(step) for a in self._res.actors]
        return self._gather(refs, None, False)[0]

    def check_health(self) -> None:
        refs = [a.pid.remote() for a in self._res.actors]
        self._gather(refs, time.monotonic() + HEALTH_S, False)

    def _gather(self, refs: list[Any], deadline: float | None, startup: bool) -> list[Any]:
        """Every rank's answer; RankLost naming the rank that died or failed (a dead
        actor before one whose collective failed because of it)."""
        ray = self._res.ray
        pending = list(refs)
        while pending:
            if deadline is not None and time.monotonic() > deadline:
                late = ", ".join(self.names[refs.index(p)] for p in pending)
                raise RankLost(late, 0, "no answer in time (TANDEM_ENGINE_READY_TIMEOUT)", startup)
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
            for ref in done:
                try:
                    ray.get(ref)
                except Exception:
                    raise self._lost(refs, startup) from None
        return ray.get(refs)

    def _lost(self, refs: list[Any], startup: bool) -> RankLost:
        """Wait briefly for every rank's end, then blame a dead actor first."""
        ray = self._res.ray
        ray.wait(refs, num_returns=len(refs), timeout=1.0)
        failures: list[tuple[int, BaseException]] = []
        for r, ref in enumerate(refs):
            with contextlib.suppress(ray.exceptions.GetTimeoutError):
                try:
                    ray.get(ref, timeout=0)
                except ray.exceptions.GetTimeoutError:
                    raise
                except Exception as exc:
                    failures.append((r, exc))
        dead = [f for f in failures if isinstance(f[1], ray.exceptions.RayActorError)]
        r, exc = (dead or failures)[0]
        if dead:
            return RankLost(self.names[r], self._pids[r], f"its actor died: {exc}", startup)
        return RankLost(self.names[r], self._pids[r], "", startup, raised(exc))

    def shutdown(self) -> None:
        self._finalizer()


def raised(exc: BaseException) -> ChildError:
    """What an actor raised, unwrapped from Ray's error: the exception is its ``cause``,
    and its text is the traceback as formatted in the actor (colour codes removed)."""
    cause = getattr(exc, "cause", None)
    if not isinstance(cause, BaseException):
        return ChildError.of(exc)
    text = getattr(exc, "traceback_str", None)
    if not isinstance(text, str):
        text = _COLOURS.sub("", str(exc))
    return ChildError.of(cause, text)


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.1)
