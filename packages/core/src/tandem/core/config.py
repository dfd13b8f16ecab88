"""``EngineArgs`` (what a user passes) and the resolved configs both engines run on.

``EngineArgs.create_config()`` validates every field, reads the model directory
(``config.json``, weights, ``generation_config.json``) and resolves the defaults that
depend on it (max_model_len, dtype, device, token budget). The KV cache size depends on
the per-block byte size, which only the engine knows: ``CacheConfig.resolve_num_blocks``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch

from tandem.core.sampling_params import check_bool, check_int

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
DTYPES: dict[str, torch.dtype | None] = {
    "auto": None,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
DEVICES = ("auto", "cpu", "cuda")
DEFAULT_KV_CACHE_BYTES = 1 << 30
MIN_BATCHED_TOKENS = 2048

WEIGHTS_INDEX = "model.safetensors.index.json"


@dataclass(slots=True)
class ModelConfig:
    path: Path
    hf_config: Any  # transformers.PretrainedConfig
    architecture: str
    dtype: torch.dtype
    max_model_len: int
    weight_files: list[Path]
    tokenizer: Path
    generation_config: dict[str, Any] = field(default_factory=dict)

    @property
    def num_layers(self) -> int:
        return int(self.hf_config.num_hidden_layers)

    @property
    def num_heads(self) -> int:
        return int(self.hf_config.num_attention_heads)

    @property
    def num_kv_heads(self) -> int:
        kv = getattr(self.hf_config, "num_key_value_heads", None)
        return int(kv) if kv is not None else self.num_heads

    @property
    def hidden_size(self) -> int:
        return int(self.hf_config.hidden_size)

    @property
    def head_dim(self) -> int:
        dim = getattr(self.hf_config, "head_dim", None)
        return int(dim) if dim is not None else self.hidden_size // self.num_heads

    @property
    def vocab_size(self) -> int:
        return int(self.hf_config.vocab_size)

    @property
    def max_position_embeddings(self) -> int | None:
        return getattr(self.hf_config, "max_position_embeddings", None)

    @property
    def eos_token_ids(self) -> list[int]:
        """EOS ids from config.json and generation_config.json (a model may have several)."""
        out: list[int] = []
        for raw in (
            getattr(self.hf_config, "eos_token_id", None),
            self.generation_config.get("eos_token_id"),
        ):
            for i in raw if isinstance(raw, (list, tuple)) else [raw]:
                if isinstance(i, int) and not isinstance(i, bool) and i not in out:
                    out.append(i)
        return out


@dataclass(slots=True)
class CacheConfig:
    block_size: int
    num_kv_blocks: int | None  # None until resolve_num_blocks() runs
    kv_cache_memory_bytes: int | None  # None: 1 GiB, capped at max_num_seqs full sequences
    max_num_seqs: int
    max_model_len: int
    enable_prefix_caching: bool

    @property
    def blocks_per_seq(self) -> int:
        """Blocks one sequence of max_model_len tokens needs."""
        return math.ceil(self.max_model_len / self.block_size)

    def resolve_num_blocks(self, bytes_per_block: int) -> int:
        """Fix ``num_kv_blocks`` from the byte budget (unless set explicitly); return it."""
        check_int("bytes_per_block", bytes_per_block, lo=1)
        if self.num_kv_blocks is not None:
            blocks, source = self.num_kv_blocks, f"num_kv_blocks={self.num_kv_blocks}"
        else:
            budget = self.kv_cache_memory_bytes
            if budget is None:
                full = self.max_num_seqs * self.blocks_per_seq * bytes_per_block
                budget = min(DEFAULT_KV_CACHE_BYTES, full)
            blocks = budget // bytes_per_block
            source = f"kv_cache_memory_bytes={budget} ({bytes_per_block} bytes per block)"
        if blocks < self.blocks_per_seq:
            raise ValueError(
                f"the KV cache holds {blocks} blocks of {self.block_size} tokens "
                f"({source}), but one sequence of max_model_len={self.max_model_len} needs "
                f"{self.blocks_per_seq}; raise num_kv_blocks or kv_cache_memory_bytes, "
                f"or lower max_model_len"
            )
        self.num_kv_blocks = blocks
        return blocks


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

    @property
    def kv_bytes_per_block(self) -> int:
        """Bytes of one KV block over all layers (K and V) at the model's dtype."""
        m = self.model
        itemsize = torch.empty((), dtype=self.dtype).element_size()
        return 2 * m.num_layers * m.num_kv_heads * m.head_dim * self.cache.block_size * itemsize


@dataclass(slots=True)
class EngineArgs:
    model: str
    tokenizer: str | None = None
    dtype: str = "auto"
    device: str = "auto"
    seed: int = 0
    max_model_len: int | None = None
    block_size: int = 16
    num_kv_blocks: int | None = None
    kv_cache_memory_bytes: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    num_threads: int | None = None

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
        if isinstance(self.dtype, torch.dtype):
            if self.dtype not in DTYPES.values():
                raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype}")
        elif self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        check_int("seed", self.seed, lo=0)
        check_int("max_model_len", self.max_model_len, lo=1, none_ok=True)
        check_int("block_size", self.block_size, lo=1)
        if self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {self.block_size}")
        check_int("num_kv_blocks", self.num_kv_blocks, lo=1, none_ok=True)
        check_int("kv_cache_memory_bytes", self.kv_cache_memory_bytes, lo=1, none_ok=True)
        check_int("max_num_seqs", self.max_num_seqs, lo=1)
        check_int("max_num_batched_tokens", self.max_num_batched_tokens, lo=1, none_ok=True)
        check_bool("enable_prefix_caching", self.enable_prefix_caching)
        check_bool("enable_chunked_prefill", self.enable_chunked_prefill)
        check_int("num_threads", self.num_threads, lo=1, none_ok=True)

    def create_config(self) -> EngineConfig:
        self.validate()
        device = resolve_device(self.device)
        model = load_model_config(
            self.model,
            tokenizer=self.tokenizer,
            dtype=self.dtype,
            device=device,
            max_model_len=self.max_model_len,
            supported=SUPPORTED_ARCHITECTURES,
        )
        max_len = model.max_model_len
        batched = self.max_num_batched_tokens
        if batched is None:
            batched = max(MIN_BATCHED_TOKENS, max_len)
        elif not self.enable_chunked_prefill and batched < max_len:
            raise ValueError(
                f"max_num_batched_tokens must be >= max_model_len={max_len} when "
                f"enable_chunked_prefill is False (a whole prompt runs in one step), "
                f"got {batched}"
            )
        cache = CacheConfig(
            block_size=self.block_size,
            num_kv_blocks=self.num_kv_blocks,
            kv_cache_memory_bytes=self.kv_cache_memory_bytes,
            max_num_seqs=self.max_num_seqs,
            max_model_len=max_len,
            enable_prefix_caching=self.enable_prefix_caching,
        )
        if self.num_kv_blocks is not None:
            cache.resolve_num_blocks(1)  # an explicit count is checked against max_model_len
        scheduler = SchedulerConfig(
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=batched,
            max_model_len=max_len,
            enable_chunked_prefill=self.enable_chunked_prefill,
            enable_prefix_caching=self.enable_prefix_caching,
        )
        return EngineConfig(
            model=model,
            cache=cache,
            scheduler=scheduler,
            device=device,
            dtype=model.dtype,
            seed=self.seed,
            num_threads=self.num_threads,
        )


def resolve_device(device: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; ``cuda`` without CUDA is an error."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    has_cuda = torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        raise ValueError("device='cuda' was requested but CUDA is not available; use 'cpu'")
    if device == "auto":
        device = "cuda" if has_cuda else "cpu"
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype, device: torch.device, hf_config: Any) -> torch.dtype:
    """``auto`` -> float32 on CPU, the checkpoint's dtype on CUDA (float16 if unset)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    chosen = DTYPES.get(dtype)
    if chosen is not None:
        return chosen
    if device.type == "cpu":
        return torch.float32
    raw = getattr(hf_config, "dtype", None) or vars(hf_config).get("torch_dtype")
    if isinstance(raw, str):
        raw = DTYPES.get(raw.removeprefix("torch."))
    if isinstance(raw, torch.dtype) and raw in DTYPES.values() and raw != torch.float32:
        return raw
    return torch.float16


def _read_hf_config(root: Path, supported: tuple[str, ...]) -> tuple[Any, str]:
    if not root.exists():
        raise ValueError(f"model directory does not exist: {root}")
    if not root.is_dir():
        raise ValueError(f"model must be a directory, got a file: {root}")
    cfg_file = root / "config.json"
    if not cfg_file.is_file():
        raise ValueError(f"no config.json in the model directory {root}")
    try:
        raw = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"could not parse {cfg_file}: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{cfg_file} must hold a JSON object, got {type(raw).__name__}")
    archs = raw.get("architectures") or []
    arch = next((a for a in archs if a in supported), None)
    if arch is None:
        raise ValueError(
            f"unsupported architecture {archs!r} in {cfg_file}; supported: {', '.join(supported)}"
        )
    from transformers import AutoConfig

    try:
        hf_config = AutoConfig.from_pretrained(str(root), local_files_only=True)
    except Exception as exc:  # transformers raises many kinds; keep the cause
        raise ValueError(f"could not load {cfg_file} with transformers: {exc}") from exc
    return hf_config, arch


def find_weight_files(root: Path) -> list[Path]:
    """The safetensors files of a checkpoint: from the shard index, or every *.safetensors."""
    index = root / WEIGHTS_INDEX
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"could not parse {index} (needs a 'weight_map'): {exc}") from None
        files = [root / name for name in names]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ValueError(f"{index} names missing shard(s): {', '.join(missing)}")
        if not files:
            raise ValueError(f"{index} has an empty weight_map")
        return files
    files = sorted(root.glob("*.safetensors"))
    if not files:
        raise ValueError(f"no weights in {root}: expected *.safetensors files or {WEIGHTS_INDEX}")
    return files


def _read_generation_config(root: Path) -> dict[str, Any]:
    gen = root / "generation_config.json"
    if not gen.is_file():
        return {}
    try:
        raw = json.loads(gen.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"could not parse {gen}: {exc}") from None
    return raw if isinstance(raw, dict) else {}


def load_model_config(
    model: str | os.PathLike[str],
    tokenizer: str | os.PathLike[str] | None = None,
    dtype: str | torch.dtype = "auto",
    device: torch.device | None = None,
    max_model_len: int | None = None,
    supported: tuple[str, ...] = SUPPORTED_ARCHITECTURES,
) -> ModelConfig:
    """Read and check a local Hugging Face model directory."""
    root = Path(model).expanduser()
    hf_config, arch = _read_hf_config(root, supported)
    weights = find_weight_files(root)
    limit = getattr(hf_config, "max_position_embeddings", None)
    if max_model_len is None:
        if limit is None:
            raise ValueError(
                f"{root / 'config.json'} has no max_position_embeddings; set max_model_len"
            )
        max_model_len = int(limit)
    elif limit is not None and max_model_len > limit:
        raise ValueError(
            f"max_model_len must be <= {limit} (the model's max_position_embeddings), "
            f"got {max_model_len}"
        )
    tok = root if tokenizer is None else Path(tokenizer).expanduser()
    if not tok.is_dir():
        raise ValueError(f"tokenizer must be an existing directory, got {tok}")
    device = device if device is not None else resolve_device("auto")
    return ModelConfig(
        path=root,
        hf_config=hf_config,
        architecture=arch,
        dtype=resolve_dtype(dtype, device, hf_config),
        max_model_len=max_model_len,
        weight_files=weights,
        tokenizer=tok,
        generation_config=_read_generation_config(root),
    )
