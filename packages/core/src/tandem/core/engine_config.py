"""The resolved configs both engines run on: what ``EngineArgs.create_config()`` makes
once every field is checked and the model directory read (:mod:`tandem.core.config`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tandem.core.parallel.config import ParallelConfig

if TYPE_CHECKING:
    import torch

    from tandem.core.cache_config import CacheConfig
    from tandem.core.model_config import ModelConfig
    from tandem.core.speculative.config import SpeculativeConfig


@dataclass(slots=True)
class SchedulerConfig:
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_chunked_prefill: bool
    enable_prefix_caching: bool


@dataclass(slots=True)
class EngineConfig:
    model: ModelConfig
    cache: CacheConfig
    scheduler: SchedulerConfig
    device: torch.device
    dtype: torch.dtype
    seed: int
    num_threads: int | None
    # None: the model's dtype; "int8": int8 linear layers; "gguf": a GGUF file's quantized
    # tensors as stored (the default for a .gguf model in float32)
    quantization: str | None = None
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    speculative: SpeculativeConfig | None = None  # None: no speculative decoding

    def configure_process(self) -> None:
        """Process-wide settings of the process that runs the model: torch's CPU threads
        and, for a CPU model, glibc's heap thresholds (:mod:`tandem.core.heap`)."""
        import torch

        torch.set_num_threads(self.thread_count())
        if self.device.type == "cpu":
            from tandem.core.heap import keep_activations_in_heap

            keep_activations_in_heap()

    def thread_count(self) -> int:
        """CPU threads a process that runs the model uses: ``num_threads`` when given,
        else ``TANDEM_NUM_THREADS``, else the cores this process may run on, divided
        among the processes that run a model (tensor-parallel ranks, data-parallel
        replicas)."""
        if self.num_threads is not None:
            return self.num_threads
        from tandem.core import envs

        value = envs.TANDEM_NUM_THREADS
        if value is not None:
            if value < 1:
                raise ValueError(f"TANDEM_NUM_THREADS must be an integer >= 1, got {value}")
            return value
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            cores = os.cpu_count() or 1
        return max(cores // self.parallel.processes, 1)

    @property
    def kv_heads_per_rank(self) -> int:
        """KV heads one rank's cache holds (its share, or the one it shares)."""
        from tandem.core.parallel.partition import kv_head_range

        lo, hi = kv_head_range(self.model.num_kv_heads, self.parallel.tensor_parallel_size, 0)
        return hi - lo

    @property
    def kv_bytes_per_block(self) -> int:
        """Bytes of one KV block over all layers (K and V) at the model's dtype, in one
        rank's cache."""
        from tandem.core.kv_cache import kv_cache_bytes_per_block

        m = self.model
        return kv_cache_bytes_per_block(
            m.num_layers, self.kv_heads_per_rank, m.head_dim, self.cache.block_size, self.dtype
        )
