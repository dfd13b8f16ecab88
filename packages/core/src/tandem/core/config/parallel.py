"""How many processes run a model, as ``EngineArgs`` asks and the engines read it.

Kept apart from :mod:`tandem.core.config.engine_args` and free of torch at import, like it: checking
the arguments must not load torch in a process that only starts children.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tandem.core.validate import check_int

if TYPE_CHECKING:
    import torch

    from tandem.core.spec.model import ModelSpec

EXECUTOR_BACKENDS = ("mp", "ray")


@dataclass(slots=True)
class ParallelConfig:
    """``tensor_parallel_size`` ranks share each layer (one engine core drives them
    through ``distributed_executor_backend``: local processes, or Ray actors), and
    ``data_parallel_size`` engine cores each hold a whole model."""

    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    distributed_executor_backend: str = "mp"

    def validate(self) -> None:
        check_int("tensor_parallel_size", self.tensor_parallel_size, lo=1)
        check_int("data_parallel_size", self.data_parallel_size, lo=1)
        if self.distributed_executor_backend not in EXECUTOR_BACKENDS:
            raise ValueError(
                "distributed_executor_backend must be one of "
                f"{', '.join(EXECUTOR_BACKENDS)}, got {self.distributed_executor_backend!r}"
            )

    @property
    def processes(self) -> int:
        """Processes that each run a model (a rank of one replica), with their own threads."""
        return self.tensor_parallel_size * self.data_parallel_size


def check_splits(parallel: ParallelConfig, spec: ModelSpec, device: torch.device | str) -> None:
    """The model (its spec) splits over the ranks and the devices are there, before any
    process starts: a ValueError naming the field otherwise."""
    from tandem.core.config.device import device_type
    from tandem.core.parallel.partition import check_tensor_parallel

    size = parallel.tensor_parallel_size
    check_tensor_parallel(spec, size)
    if device_type(device) != "cuda":
        return
    import torch

    if torch.cuda.device_count() < size:
        raise ValueError(
            f"tensor_parallel_size={size} needs {size} CUDA devices, "
            f"found {torch.cuda.device_count()}"
        )
