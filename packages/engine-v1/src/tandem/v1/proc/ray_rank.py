"""Ray, as engine v1 uses it: found (or refused with how to install it), joined, and the
actor that holds one tensor-parallel rank.

Ray is an optional extra: ``pip install 'tandem-engine-v1[ray]'``. Nothing here imports
it before :func:`require_ray` is called.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tandem.core.config.engine_args import EngineConfig
    from tandem.v1.core.step import SchedulerOutput, StepOutput
    from tandem.v1.worker.rank import RankSetup

INSTALL_HINT = (
    "distributed_executor_backend='ray' needs Ray, which is not installed; install it with "
    "pip install 'tandem-engine-v1[ray]' (or pip install ray), or use "
    "distributed_executor_backend='mp' on one machine"
)


def require_ray() -> Any:
    """The ``ray`` module; ImportError saying how to install it when it is missing."""
    try:
        import ray
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    return ray


def restore_env(before: dict[str, str]) -> None:
    """Put ``os.environ`` back as it was (``ray.init`` sets variables of its own)."""
    for name in [n for n in os.environ if n not in before]:
        del os.environ[name]
    for name, value in before.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def connect(ray: Any) -> bool:
    """Join the Ray cluster this process can find (``ray.init`` already called, the
    ``RAY_ADDRESS`` variable, or a cluster started on this machine), else start a local
    one. True when this call connected (and its caller must disconnect: ``ray.shutdown``
    ends a local Ray it started, and leaves a cluster it joined running)."""
    if ray.is_initialized():
        return False
    quiet = {"log_to_driver": False, "configure_logging": False}
    try:
        ray.init(address=os.environ.get("RAY_ADDRESS") or "auto", **quiet)
        return True  # connected: this process's own connection, closed at shutdown
    except ConnectionError:
        pass
    ray.init(include_dashboard=False, **quiet)
    return True


class RankActor:
    """One rank in a Ray actor: :class:`~tandem.v1.worker.rank.RankWorker` inside."""

    def __init__(self) -> None:
        self.worker: Any = None

    def pid(self) -> int:
        return os.getpid()

    def start(self, config: EngineConfig, setup: RankSetup) -> tuple[int, str, int, str, int]:
        """Join the group and build the shard: (KV blocks, attention backend, the context
        the cache was sized for, what sized it, the local layers' blocks)."""
        from tandem.v1.worker.rank import RankWorker

        w = self.worker = RankWorker(config, setup)
        return (
            w.num_kv_blocks,
            w.attention_backend,
            w.max_model_len,
            w.kv_source,
            w.num_local_kv_blocks,
        )

    def execute(self, step: SchedulerOutput) -> StepOutput | None:
        return self.worker.execute(step)

    def close(self) -> None:
        """Leave the process group (the actor itself is killed after)."""
        if self.worker is not None:
            self.worker.close()
            self.worker = None
