"""One rank of a tensor-parallel group, whatever starts it (a local process, a Ray actor).

It joins the group through the rendezvous store the engine core hosts, builds its shard
of the model, and runs every step the core hands all ranks. All ranks compute the same
tokens (the logits are gathered whole on each), so each keeps its input batch as rank 0
does; only rank 0's result goes back to the core.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from tandem.core.parallel.group import join, leave
from tandem.v1.worker.model_runner import ModelRunner

if TYPE_CHECKING:
    from tandem.core.config.engine_args import EngineConfig
    from tandem.v1.core.step import SchedulerOutput, StepOutput


@dataclass(frozen=True, slots=True)
class RankSetup:
    """Where rank ``rank`` of ``size`` meets the others: the store at ``host:port``;
    ``timeout_s`` bounds the rendezvous and every collective."""

    rank: int
    size: int
    host: str
    port: int
    timeout_s: float

    @property
    def name(self) -> str:
        return f"tensor-parallel rank {self.rank}"


def rank_config(config: EngineConfig, setup: RankSetup) -> EngineConfig:
    """``config`` as rank ``setup.rank`` runs it: on CUDA, its own device."""
    if config.device.type != "cuda":
        return config
    index = setup.rank % max(torch.cuda.device_count(), 1)
    return dataclasses.replace(config, device=torch.device("cuda", index))


class RankWorker:
    """A rank's model runner, joined to its group; ``close`` leaves the group."""

    def __init__(self, config: EngineConfig, setup: RankSetup) -> None:
        self.setup = setup
        config = rank_config(config, setup)
        if config.device.type == "cuda":
            torch.cuda.set_device(config.device)
        tp = join(setup.rank, setup.size, setup.host, setup.port, config.device, setup.timeout_s)
        try:
            self.runner = ModelRunner(config, tp=tp)
        except BaseException:
            leave()
            raise

    @property
    def num_kv_blocks(self) -> int:
        return self.runner.num_kv_blocks

    @property
    def attention_backend(self) -> str:
        return self.runner.attention_backend

    @property
    def plan(self) -> str:
        return self.runner.plan

    @property
    def max_model_len(self) -> int:
        return self.runner.max_model_len

    @property
    def kv_source(self) -> str:
        return self.runner.kv_source

    @property
    def num_local_kv_blocks(self) -> int:
        return self.runner.num_local_kv_blocks

    def execute(self, step: SchedulerOutput) -> StepOutput | None:
        """The step's result on rank 0; None on the others (they ran the same step)."""
        result = self.runner.execute(step)
        return result if self.setup.rank == 0 else None

    def close(self) -> None:
        # the peers close too: wait for them (briefly: a dead one fails the wait at once)
        leave(wait_s=min(self.setup.timeout_s, 5.0))
