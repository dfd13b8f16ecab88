"""The executor an engine core runs: the model in its own process, or the ranks of a
tensor-parallel group through the ``mp`` or ``ray`` backend."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tandem.v1.worker.model_runner import ModelRunner

if TYPE_CHECKING:
    from tandem.core.config.engine_args import EngineConfig
    from tandem.v1.core.step import Executor


def make_executor(config: EngineConfig, workdir: str | None = None) -> Executor:
    """One rank: a :class:`ModelRunner` right here (no indirection in the step loop).

    ``workdir``: a folder whoever made it removes (the core process's IPC folder), where
    the ``mp`` executor keeps its sockets, so a core killed before its own clean-up
    leaves nothing behind; without one the executor makes and removes its own."""
    parallel = config.parallel
    if parallel.tensor_parallel_size == 1:
        return ModelRunner(config)
    if parallel.distributed_executor_backend == "ray":
        from tandem.v1.proc.ray_executor import RayExecutor

        return RayExecutor(config)
    from tandem.v1.proc.mp_executor import MPExecutor

    return MPExecutor(config, workdir=workdir)
