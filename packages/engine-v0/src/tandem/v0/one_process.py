"""What engine v0 cannot do: it runs one model in the caller's process."""

from __future__ import annotations

from typing import Any

_ONE_PROCESS = (("tensor_parallel_size", 1), ("data_parallel_size", 1))


def check_single_process(args: Any) -> None:
    """ValueError naming the argument when ``args`` (EngineArgs, or an EngineConfig's
    parallel part) asks for more than one process."""
    source = getattr(args, "parallel", args)
    for name, allowed in _ONE_PROCESS:
        value = getattr(source, name, allowed)
        if value != allowed:
            raise ValueError(
                f"engine v0 runs the model in one process: {name} must be {allowed}, "
                f"got {value}; engine='v1' runs {name}={value}"
            )
    backend = getattr(source, "distributed_executor_backend", "mp")
    if backend != "mp":
        raise ValueError(
            f"engine v0 runs the model in one process: distributed_executor_backend must be "
            f"'mp', got {backend!r}; engine='v1' runs distributed_executor_backend={backend!r}"
        )
