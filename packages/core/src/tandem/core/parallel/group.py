"""The collectives a tensor-parallel model calls, and joining / leaving the group.

Every rank runs the same layers on the same tokens; the only exchanges are a sum after
each row-parallel projection (``all_reduce``) and the vocabulary shards of the logits
put side by side (``gather_columns``); at start-up, a ``barrier`` and the ranks' ``least``
memory size every rank's KV cache alike. A collective that fails (a peer died, or the
group's timeout ran out) raises :class:`CollectiveError`: the rank cannot go on, and an
engine must stop rather than fail one request and carry on.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor


class CollectiveError(RuntimeError):
    """A collective over the tensor-parallel group failed; the group is unusable."""


@dataclass(frozen=True, slots=True)
class TensorParallel:
    """This process's place in a tensor-parallel group (the default process group)."""

    rank: int
    size: int

    def all_reduce(self, x: Tensor) -> Tensor:
        """``x`` summed over the ranks, in place. x: [T, C]."""
        try:
            dist.all_reduce(x)
        except Exception as exc:
            raise CollectiveError(f"all_reduce over {self.size} ranks failed: {exc}") from exc
        return x

    def barrier(self) -> None:
        """Wait until every rank is here."""
        try:
            dist.barrier()
        except Exception as exc:
            raise CollectiveError(f"barrier over {self.size} ranks failed: {exc}") from exc

    def least(self, value: int) -> int:
        """The smallest of the ranks' ``value``s (each rank passes its own)."""
        device = "cuda" if dist.get_backend() == "nccl" else "cpu"
        x = torch.tensor([value], dtype=torch.int64, device=device)
        try:
            dist.all_reduce(x, op=dist.ReduceOp.MIN)
        except Exception as exc:
            raise CollectiveError(f"all_reduce (min) over {self.size} ranks failed: {exc}") from exc
        return int(x.item())

    def gather_columns(self, x: Tensor, full: int) -> Tensor:
        """Every rank's columns side by side, the padding past ``full`` cut off.
        x: [N, Vl] -> [N, full]."""
        parts = [torch.empty_like(x) for _ in range(self.size)]
        try:
            dist.all_gather(parts, x.contiguous())
        except Exception as exc:
            raise CollectiveError(f"all_gather over {self.size} ranks failed: {exc}") from exc
        return torch.cat(parts, dim=1)[:, :full]


def backend_for(device: torch.device) -> str:
    """gloo for CPU tensors, nccl for CUDA ones."""
    return "nccl" if device.type == "cuda" else "gloo"


def join(
    rank: int,
    size: int,
    host: str,
    port: int,
    device: torch.device,
    timeout_s: float,
) -> TensorParallel:
    """Join the group whose rendezvous store listens on ``host:port`` (the engine core
    hosts it). ``timeout_s`` bounds the rendezvous and every collective."""
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore(host, port, size, is_master=False, timeout=timeout)
    dist.init_process_group(
        backend_for(device), store=store, rank=rank, world_size=size, timeout=timeout
    )
    return TensorParallel(rank, size)


def leave(wait_s: float = 0.0) -> None:
    """Destroy this process's group, if it has one (idempotent).

    With ``wait_s`` (a rank that ends normally, its peers ending too) every rank first
    waits for the others, at most ``wait_s`` seconds: a rank that tore its connections
    down while a peer still finished its last collective over them made that peer's
    transport fail as it exited (gloo: SIGABRT, "terminate called without an active
    exception"). A peer that does not come in time (it died) is not waited for longer;
    the group is destroyed either way.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    if wait_s > 0:
        _wait_for_peers(wait_s)
    dist.destroy_process_group()


def _wait_for_peers(wait_s: float) -> None:
    """A barrier bounded by ``wait_s`` (gloo's monitored one; others use the group's)."""
    try:
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=wait_s))
        else:
            dist.barrier()
    except Exception:  # a peer is gone: nothing left to wait for
        return
