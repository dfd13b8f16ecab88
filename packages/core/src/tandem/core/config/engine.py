"""The resolved configs both engines run on: what ``EngineArgs.create_config()`` makes
once every field is checked and the model directory read."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tandem.core.config.device import device_type, itemsize
from tandem.core.config.parallel import ParallelConfig
from tandem.core.kv.budget import block_bytes
from tandem.core.layers.kernel_choice import KernelChoice

if TYPE_CHECKING:
    import torch

    from tandem.core.config.cache import CacheConfig
    from tandem.core.config.model import ModelConfig
    from tandem.core.config.speculative import SpeculativeConfig
    from tandem.core.models.plan import ExecutionPlan


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
    # torch's objects, or their names ("cpu", "float32") in a config made with names
    # (``EngineArgs.create_config(names=True)``: the v1 front's, without torch)
    device: torch.device
    dtype: torch.dtype
    seed: int
    num_threads: int | None
    # None: the model's dtype; "int8": int8 linear layers; "gguf": a GGUF file's quantized
    # tensors as stored (the default for a .gguf model in float32)
    quantization: str | None = None
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    speculative: SpeculativeConfig | None = None  # None: no speculative decoding
    kernels: KernelChoice = field(default_factory=KernelChoice)  # resolved once
    # what the model runs, op by op: made by the process that loads it (see models/plan.py)
    plan: ExecutionPlan | None = None

    @property
    def device_type(self) -> str:
        """``cpu`` or ``cuda``, whether ``device`` is a torch.device or a name."""
        return device_type(self.device)

    def with_torch(self) -> EngineConfig:
        """This config with torch's device and dtypes where it holds their names (in
        place; returned for chaining): what a process that runs the model needs."""
        import torch

        from tandem.core.config.device import torch_dtype

        if isinstance(self.device, str):
            self.device = torch.device(self.device)
        self.dtype = torch_dtype(self.dtype)
        self.model.dtype = torch_dtype(self.model.dtype)
        return self

    def configure_process(self) -> None:
        """Process-wide settings of the process that runs the model: torch's CPU threads
        and, for a CPU model, glibc's heap thresholds (:mod:`tandem.core.heap`)."""
        import torch

        torch.set_num_threads(self.thread_count())
        if self.device_type == "cpu":
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
    def kv_sharers(self) -> int:
        """Processes whose KV caches share one memory: every rank of every replica on
        the CPU; on CUDA (one device per tensor-parallel rank) the replicas."""
        if self.device_type == "cuda":
            return self.parallel.data_parallel_size
        return self.parallel.processes

    def resolve_kv_cache(self, available: int | None = None) -> int:
        """Size the KV cache (``CacheConfig.resolve_num_blocks``) from ``available``,
        the bytes left on this process's device after the weights (measured by
        :func:`tandem.core.kv.memory.available_memory`; not needed where the cache's size
        is given), and carry a shortened ``max_model_len`` into every config; return
        the number of blocks."""
        share = None if available is None else available // self.kv_sharers
        blocks = self.cache.resolve_num_blocks(self.kv_bytes_per_block, share)
        self.use_max_model_len(self.cache.max_model_len)
        return blocks

    def adopt_kv_cache(
        self, num_kv_blocks: int, num_local_blocks: int, max_model_len: int, kv_source: str
    ) -> None:
        """Take the KV cache another process sized (the engine core, a rank): its
        blocks (and its local layers' pool, where they have one), its context and what
        sized it."""
        self.cache.num_kv_blocks = num_kv_blocks
        if self.cache.grouped:
            self.cache.num_local_blocks = num_local_blocks
        self.cache.kv_source = kv_source
        self.use_max_model_len(max_model_len)

    def use_max_model_len(self, max_model_len: int) -> None:
        """Run with a context of ``max_model_len`` tokens (at most the configured one):
        the model, cache and scheduler configs all say it."""
        cache = self.cache
        if max_model_len != cache.max_model_len:
            cache.max_model_len = max_model_len
            cache.step_tokens = min(cache.step_tokens or max_model_len, max_model_len)
        self.model.max_model_len = max_model_len
        self.scheduler.max_model_len = max_model_len

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
        m = self.model
        heads, size = self.kv_heads_per_rank, self.cache.block_size
        return block_bytes(m.num_layers, heads, m.head_dim, size, itemsize(self.dtype))
