"""``EngineArgs`` (what a user passes), and the resolved configs both engines run on
(defined in :mod:`tandem.core.config.engine`, importable from here).

``EngineArgs`` checks every field when it is made; ``create_config()`` reads the model directory
(``config.json``, weights, ``generation_config.json``) and resolves the defaults that
depend on it (max_model_len, dtype, device, token budget). The KV cache's size depends
on the memory left once the weights are loaded, which only the engine knows
(``EngineConfig.resolve_kv_cache``, :mod:`tandem.core.kv.budget`); a ``max_model_len``
not given may shrink there to what the cache holds.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, fields, replace
from typing import Any

from tandem.core.config.cache import CacheConfig
from tandem.core.config.device import DEVICES, DTYPE_NAMES
from tandem.core.config.engine import EngineConfig, SchedulerConfig
from tandem.core.config.parallel import ParallelConfig, check_splits
from tandem.core.config.speculative import SpeculativeConfig, check_target
from tandem.core.kv.budget import DEFAULT_KV_CACHE_CAP_BYTES, DEFAULT_KV_CACHE_MEMORY_FRACTION
from tandem.core.kv.window import kv_window, local_layers
from tandem.core.layers.kernel_choice import (
    ATTENTION_BACKENDS,
    DECODE_STACKS,
    LINEAR_KERNELS,
    check_switch,
    resolve_kernels,
)
from tandem.core.validate import check_bool, check_float, check_int, check_range

# Re-exported on first use (each imports torch): checking EngineArgs stays torch-free.
_LAZY = {
    "DTYPES": "tandem.core.config.device",
    "resolve_device": "tandem.core.config.device",
    "resolve_dtype": "tandem.core.config.device",
    "SUPPORTED_ARCHITECTURES": "tandem.core.config.model",
    "WEIGHTS_INDEX": "tandem.core.config.model",
    "ModelConfig": "tandem.core.config.model",
    "find_weight_files": "tandem.core.config.model",
    "load_model_config": "tandem.core.config.model",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_KV_CACHE_MEMORY_FRACTION",
    "DEVICES",
    "CacheConfig",
    "EngineArgs",
    "EngineConfig",
    "ParallelConfig",
    "SchedulerConfig",
    *_LAZY,
]

# Tokens per step unless max_num_batched_tokens is given. With chunked prefill a step
# takes at most this many, whatever max_model_len is: past ~2048 rows a CPU matmul's rate
# falls (SmolLM2's prefill steps of 8192 rows ran its MLP at 143-146 GFLOP/s, steps of
# 2048 at ~200, and the offline throughput run took 38.6-41 s against 35-36 s).
# Without chunked prefill a step must hold a whole prompt: max_model_len, if larger.
DEFAULT_BATCHED_TOKENS = 2048
QUANTIZATIONS = (None, "int8", "gguf")


@dataclass(slots=True, frozen=True)
class EngineArgs:
    """What a user asks of an engine; every field is checked once, when it is made
    (frozen, so nothing can change it afterwards: ``dataclasses.replace`` makes a
    checked copy)."""

    model: str
    tokenizer: str | None = None
    dtype: str = "auto"
    device: str = "auto"
    seed: int = 0
    max_model_len: int | None = None
    block_size: int = 16
    num_kv_blocks: int | None = None
    kv_cache_memory_bytes: int | None = None
    # None: DEFAULT_KV_CACHE_MEMORY_FRACTION; num_kv_blocks, then kv_cache_memory_bytes,
    # take precedence over it
    kv_cache_memory_fraction: float | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    num_threads: int | None = None
    quantization: str | None = None
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    distributed_executor_backend: str = "mp"
    speculative_config: dict[str, Any] | SpeculativeConfig | None = None
    speculative_model: str | None = None
    num_speculative_tokens: int | None = None
    # kernel switches (tandem.core.layers.kernel_choice); None: the environment variable's value
    attention_backend: str | None = None
    cpu_linear: str | None = None
    decode_stack: str | None = None

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_kwargs(cls, model: str, **kwargs: Any) -> EngineArgs:
        """Build from keyword arguments, naming any unknown one and the allowed ones."""
        unknown = sorted(set(kwargs) - set(cls.field_names()))
        if unknown:
            raise TypeError(
                f"unknown engine argument(s) {', '.join(unknown)}; "
                f"allowed: {', '.join(cls.field_names())}"
            )
        return cls(model=model, **kwargs)

    def validate(self) -> None:
        """Check every field's type and range (not the files: see create_config)."""
        for name in ("model", "tokenizer"):
            value = getattr(self, name)
            if value is None and name == "tokenizer":
                continue
            if not isinstance(value, (str, os.PathLike)) or not str(value):
                raise TypeError(f"{name} must be a non-empty path (str), got {value!r}")
        names = ", ".join(DTYPE_NAMES)
        torch = sys.modules.get("torch")  # a torch.dtype can only come with torch imported
        if torch is not None and isinstance(self.dtype, torch.dtype):
            from tandem.core.config.device import dtypes

            if self.dtype not in dtypes().values():
                raise ValueError(f"dtype must be one of {names}, got {self.dtype}")
        elif not isinstance(self.dtype, str) or self.dtype not in DTYPE_NAMES:
            raise ValueError(f"dtype must be one of {names}, got {self.dtype!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        check_int("seed", self.seed, lo=0)
        check_int("max_model_len", self.max_model_len, lo=1, none_ok=True)
        check_int("block_size", self.block_size, lo=1)
        if self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {self.block_size}")
        check_int("num_kv_blocks", self.num_kv_blocks, lo=1, none_ok=True)
        check_int("kv_cache_memory_bytes", self.kv_cache_memory_bytes, lo=1, none_ok=True)
        if self.kv_cache_memory_fraction is not None:
            fraction = check_float("kv_cache_memory_fraction", self.kv_cache_memory_fraction)
            check_range("kv_cache_memory_fraction", fraction, 0.0, 1.0, lo_open=True)
        check_int("max_num_seqs", self.max_num_seqs, lo=1)
        check_int("max_num_batched_tokens", self.max_num_batched_tokens, lo=1, none_ok=True)
        check_bool("enable_prefix_caching", self.enable_prefix_caching)
        check_bool("enable_chunked_prefill", self.enable_chunked_prefill)
        check_int("num_threads", self.num_threads, lo=1, none_ok=True)
        if self.quantization not in QUANTIZATIONS:
            raise ValueError(
                f"quantization must be one of {', '.join(map(str, QUANTIZATIONS))}, "
                f"got {self.quantization!r}"
            )
        check_switch("attention_backend", self.attention_backend, ATTENTION_BACKENDS)
        check_switch("cpu_linear", self.cpu_linear, LINEAR_KERNELS)
        check_switch("decode_stack", self.decode_stack, DECODE_STACKS)
        self.parallel_config().validate()
        self.speculative()

    def speculative(self) -> SpeculativeConfig | None:
        spec = SpeculativeConfig.from_args(
            self.speculative_config, self.speculative_model, self.num_speculative_tokens
        )
        return None if spec is None else spec.check_parallel(self.parallel_config())

    def parallel_config(self) -> ParallelConfig:
        return ParallelConfig(
            self.tensor_parallel_size, self.data_parallel_size, self.distributed_executor_backend
        )

    def _quantization(self, model: Any) -> str | None:
        """``quantization``, or "gguf" (as stored) for a .gguf file read in float32."""
        from tandem.core.config.device import dtype_of

        dtype = dtype_of(model.dtype)
        if self.quantization is None:
            gguf = model.gguf is not None and dtype == "float32"
            return "gguf" if gguf else None
        if self.quantization == "gguf":
            if model.gguf is None:
                raise ValueError(
                    "quantization='gguf' needs a model read from a .gguf file, got "
                    f"{os.fspath(self.model)!r}"
                )
            if dtype != "float32":
                raise ValueError(f"quantization='gguf' runs with dtype float32, got {dtype}")
        return self.quantization

    def create_config(self, names: bool = False) -> EngineConfig:
        """The resolved config, with torch's device and dtypes; with ``names`` their
        names instead (``cpu``, ``float32``), made without importing torch where no GPU
        can be there (:func:`tandem.core.config.device.cuda_available`): the v1 front's, whose
        core process calls ``EngineConfig.with_torch``."""
        from tandem.core.config.device import device_name
        from tandem.core.config.model import SUPPORTED_ARCHITECTURES, load_model_config

        device = device_name(self.device)
        model = load_model_config(
            self.model,
            tokenizer=self.tokenizer,
            dtype=self.dtype,
            device=device,
            max_model_len=self.max_model_len,
            supported=SUPPORTED_ARCHITECTURES,
            names=True,
        )
        max_len = model.max_model_len
        batched = self.max_num_batched_tokens
        if batched is None:
            batched = DEFAULT_BATCHED_TOKENS
            if not self.enable_chunked_prefill:
                batched = max(batched, max_len)
        elif not self.enable_chunked_prefill and batched < max_len:
            raise ValueError(
                f"max_num_batched_tokens must be >= max_model_len={max_len} when "
                f"enable_chunked_prefill is False (a whole prompt runs in one step), "
                f"got {batched}"
            )
        windows = model.windows
        local, local_window = local_layers(windows)
        cache = CacheConfig(
            block_size=self.block_size,
            num_kv_blocks=self.num_kv_blocks,
            kv_cache_memory_bytes=self.kv_cache_memory_bytes,
            max_num_seqs=self.max_num_seqs,
            max_model_len=max_len,
            enable_prefix_caching=self.enable_prefix_caching,
            sliding_window=kv_window(windows),
            step_tokens=min(batched, max_len) if self.enable_chunked_prefill else max_len,
            kv_cache_memory_fraction=self.fraction(),
            kv_cache_memory_cap=(
                DEFAULT_KV_CACHE_CAP_BYTES if self.kv_cache_memory_fraction is None else None
            ),
            max_model_len_given=self.max_model_len is not None,
            local_layers=local,
            local_window=local_window,
            num_layers=model.num_layers,
        )
        scheduler = SchedulerConfig(
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=batched,
            max_model_len=max_len,
            enable_chunked_prefill=self.enable_chunked_prefill,
            enable_prefix_caching=self.enable_prefix_caching,
        )
        config = EngineConfig(
            model=model,
            cache=cache,
            scheduler=scheduler,
            device=device,
            dtype=model.dtype,
            seed=self.seed,
            num_threads=self.num_threads,
            quantization=self._quantization(model),
            parallel=self.parallel_config(),
            speculative=check_target(self.speculative(), model),
            kernels=resolve_kernels(self.attention_backend, self.cpu_linear, self.decode_stack),
        )
        if self.tensor_parallel_size > 1:
            check_splits(config.parallel, config.model.spec, config.device)
        if self.quantization == "int8" and (device != "cpu" or model.dtype != "float32"):
            raise ValueError(
                "quantization='int8' runs on the CPU with dtype float32, "
                f"got device={device!r} dtype={model.dtype}"
            )
        if not cache.needs_memory:
            # a count or byte budget too small for one sequence (of the max_model_len
            # given, or of one block) fails here, not in the engine's child
            replace(cache).resolve_num_blocks(config.kv_bytes_per_block)
        return config if names else config.with_torch()

    def fraction(self) -> float:
        """``kv_cache_memory_fraction``, or its default."""
        given = self.kv_cache_memory_fraction
        return DEFAULT_KV_CACHE_MEMORY_FRACTION if given is None else float(given)
