"""Building a model from a Hugging Face checkpoint directory of safetensors files.

The model is built on the meta device (no random init), materialised on the target
device, then filled by streaming one tensor at a time out of each file, so peak host
memory stays near one tensor rather than one checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import Tensor, nn

from tandem.core.layers.kernel_choice import KernelChoice
from tandem.core.layers.no_init import no_init
from tandem.core.models import get_model_class
from tandem.core.parallel.group import TensorParallel

LOGGER = logging.getLogger("tandem")
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def weight_files(path: str | os.PathLike[str]) -> list[Path]:
    """The checkpoint's safetensors files: the shards of the index, or the single file."""
    root = Path(path)
    index = root / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (ValueError, KeyError) as exc:
            raise ValueError(
                f"{index} is not a safetensors index (needs 'weight_map'): {exc}"
            ) from None
        files = [root / name for name in sorted(set(weight_map.values()))]
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise ValueError(f"missing shard(s) {', '.join(missing)} listed in {index}")
        return files
    single = root / SINGLE_FILE
    if single.is_file():
        return [single]
    raise ValueError(f"no weights in {root}: expected {SINGLE_FILE} or {INDEX_FILE}")


def iterate_weights(files: Sequence[str | os.PathLike[str]]) -> Iterator[tuple[str, Tensor]]:
    """Yield ``(name, tensor)`` from each file, one tensor in memory at a time."""
    for file in files:
        with safe_open(os.fspath(file), framework="pt", device="cpu") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open is not a mapping
                yield name, handle.get_tensor(name)


def load_model(
    model_config: Any,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    quantization: str | None = None,
    tp: TensorParallel | None = None,
    kernels: KernelChoice | None = None,
    free_float: bool = False,
) -> nn.Module:
    """Build and load the model for ``model_config`` (a ModelConfig or a checkpoint dir).

    A ModelConfig-like object needs ``hf_config`` and either ``weight_files`` or the
    checkpoint directory as ``model``/``path``; ``dtype`` defaults to its ``dtype``.
    ``quantization="int8"`` switches its linear layers to int8 once loaded;
    a ``.gguf`` checkpoint is read in place (:mod:`tandem.core.gguf`), and with
    ``quantization="gguf"`` its quantized tensors stay in their blocks.
    ``tp`` builds and loads this rank's shard only (of a GGUF file's blocks too: see
    :mod:`tandem.core.gguf.weights`). ``kernels`` (an engine's
    :class:`~tandem.core.layers.kernel_choice.KernelChoice`) is given to the model before its
    weights are packed; without it the model takes the defaults at its first step.
    ``free_float`` (an engine's load; needs ``kernels``) then frees each float weight its
    kernel's copy holds all of (:meth:`CausalLM.prepare`), so the weights are resident
    once: a panel-only weight no longer loads, moves or changes kernel.
    """
    if free_float and kernels is None:
        raise ValueError("free_float needs the engine's kernels (kernels=...), got None")
    hf_config, files, default_dtype = _resolve(model_config)
    dtype = dtype if dtype is not None else default_dtype
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    device = torch.device(device)
    cls = get_model_class(_architecture(model_config, hf_config))
    max_model_len = getattr(model_config, "max_model_len", None)  # picks longrope's factors
    with torch.device("meta"), no_init():  # every weight comes from the checkpoint
        model = cls(hf_config, dtype=dtype, max_model_len=max_model_len, tp=tp)
    gguf = _gguf_source(model_config, files)
    if quantization == "gguf" and gguf is None:
        raise ValueError(
            f"quantization='gguf' needs a model read from a .gguf file, got {files[0].parent}"
        )
    if gguf is not None:
        from tandem.core.gguf.checkpoint import open_checkpoint
        from tandem.core.gguf.weights import load_gguf
        from tandem.core.heap import release_free_heap

        with torch.no_grad():
            load_gguf(model, open_checkpoint(gguf), device, keep=quantization == "gguf")
        release_free_heap()  # the process ends near the file's size
    else:
        model = model.to_empty(device=device)
        with torch.no_grad():
            model.load_weights(iterate_weights(files))
    model.requires_grad_(False)
    if quantization not in (None, "gguf"):
        model.quantize(quantization)
    if kernels is not None:
        model.use_kernels(kernels)
    freed = model.prepare(free_float)
    if freed:
        LOGGER.info("weights: %.2f GB of float copies freed (the kernels' own kept)", freed / 1e9)
    return model.eval()


def load_engine_model(config: Any, tp: TensorParallel | None = None) -> nn.Module:
    """An engine's model: ``config``'s (an EngineConfig) checkpoint on its device, dtype,
    quantization and kernels, each float weight freed once its kernel's copy holds it."""
    return load_model(
        config.model, config.device, config.dtype, config.quantization, tp, config.kernels, True
    )


def _gguf_source(model_config: Any, files: list[Path]) -> Path | None:
    """The GGUF file the weights are read from, or None (safetensors)."""
    gguf = getattr(model_config, "gguf", None)
    if gguf is not None:
        return Path(gguf)
    return files[0] if len(files) == 1 and files[0].suffix == ".gguf" else None


def _architecture(model_config: Any, hf_config: Any) -> str:
    arch = getattr(model_config, "architecture", None)
    if isinstance(arch, str):
        return arch
    archs = getattr(hf_config, "architectures", None) or []
    if not archs:
        raise ValueError("config.json must list the model class in 'architectures', got none")
    return str(archs[0])


def _resolve(model_config: Any) -> tuple[Any, list[Path], torch.dtype]:
    if isinstance(model_config, (str, os.PathLike)) and Path(model_config).suffix == ".gguf":
        from tandem.core.config.model import load_model_config

        model_config = load_model_config(model_config)
    if isinstance(model_config, (str, os.PathLike)):
        root = Path(model_config)
        if not (root / "config.json").is_file():
            raise ValueError(f"model path {str(root)!r} has no config.json")
        from tandem.core.config.hf import DEFAULTS, load_hf_config

        hf_config, _ = load_hf_config(root, tuple(DEFAULTS))
        return hf_config, weight_files(root), torch.float32
    hf_config = getattr(model_config, "hf_config", None)
    if hf_config is None:
        raise TypeError(
            "model_config must be a checkpoint path or have an 'hf_config', "
            f"got {type(model_config).__name__}"
        )
    root = getattr(model_config, "model", None) or getattr(model_config, "path", None)
    if root is not None and Path(root).is_dir():
        files = weight_files(root)
    else:
        files = [Path(f) for f in getattr(model_config, "weight_files", None) or []]
        if not files:
            raise ValueError("model_config names no weight files and no checkpoint directory")
    dtype = getattr(model_config, "dtype", None)
    return hf_config, files, dtype if isinstance(dtype, torch.dtype) else torch.float32
