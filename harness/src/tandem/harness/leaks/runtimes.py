"""Leak checks: a distributed runtime a test left up in its process.

* :class:`ProcessGroupCheck`: a ``torch.distributed`` default process group still
  initialised (``init_process_group`` without ``destroy_process_group``);
* :class:`RayCheck`: a Ray runtime still up (``ray.init`` without ``ray.shutdown``).

Neither imports its library: a library no test imported has nothing up. Each leak is
undone the way its library takes it down.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

from .base import Leak


def _group() -> Any:
    """``torch.distributed`` when it is imported and its default group is up, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    with contextlib.suppress(Exception):
        if dist.is_available() and dist.is_initialized():
            return dist
    return None


def _describe_group(dist: Any) -> str:
    parts = []
    with contextlib.suppress(Exception):
        parts.append(f"backend {dist.get_backend()}")
    with contextlib.suppress(Exception):
        parts.append(f"rank {dist.get_rank()} of {dist.get_world_size()}")
    return ", ".join(parts)


def _destroy(dist: Any) -> None:
    dist.destroy_process_group()


class _RuntimeCheck:
    """Snapshot: whether a process-wide runtime was up; a leak is one a test left up."""

    def snapshot(self) -> bool:
        return self._up()

    def compare(self, before: bool) -> list[Leak]:
        return self._leak("") if not before else []

    def absorb(self, snap: bool, start: bool, end: bool) -> bool:
        return snap or (end and not start)

    def left_over(self, start: bool, end: bool) -> list[Leak]:
        return self._leak(" it started") if end and not start else []

    def _up(self) -> bool:
        raise NotImplementedError

    def _leak(self, whose: str) -> list[Leak]:
        raise NotImplementedError


class ProcessGroupCheck(_RuntimeCheck):
    """Whether a default torch.distributed process group was up."""

    def _up(self) -> bool:
        return _group() is not None

    def _leak(self, whose: str) -> list[Leak]:
        dist = _group()
        if dist is None:
            return []
        text = (
            f"torch.distributed process group{whose} is still initialised "
            f"({_describe_group(dist)}); call torch.distributed.destroy_process_group()"
        )
        return [Leak(text, lambda: _destroy(dist))]


def _ray() -> Any:
    """The ``ray`` module when it is imported and its runtime is up, else None."""
    ray = sys.modules.get("ray")
    if ray is None or not hasattr(ray, "is_initialized"):
        return None
    with contextlib.suppress(Exception):
        if ray.is_initialized():
            return ray
    return None


def _address(ray: Any) -> str:
    with contextlib.suppress(Exception):
        return f" (cluster {ray.get_runtime_context().gcs_address})"
    return ""


class RayCheck(_RuntimeCheck):
    """Whether a Ray runtime was up in this process."""

    def _up(self) -> bool:
        return _ray() is not None

    def _leak(self, whose: str) -> list[Leak]:
        ray = _ray()
        if ray is None:
            return []
        text = f"Ray runtime{whose} is still up{_address(ray)}; call ray.shutdown()"
        return [Leak(text, ray.shutdown)]
