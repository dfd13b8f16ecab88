"""Deterministic checkpoints of every architecture, made with transformers' own classes.

``make_model()`` writes a real Hugging Face checkpoint (config.json, safetensors,
generation_config.json, tokenizer) and caches it under ``TANDEM_CACHE_DIR`` in a
directory named after a digest of every setting, so a changed setting can never reuse
a stale model. The directory appears atomically (built in a temp dir, then renamed), so
parallel test workers either see a complete model or none.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from tandem.core import envs
from tandem.core.testing.archs import TEST_CONFIGS, TWEAKS
from tandem.core.testing.tokenizer import make_tokenizer

FORMAT_VERSION = 2  # 2: the tokenizer has a chat template
STAMP = "tandem_model.json"

MODEL_SIZES: dict[str, dict[str, Any]] = {
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 512,
        "max_position_embeddings": 512,
        "initializer_range": 0.15,
    },
    "small": {
        "hidden_size": 512,
        "intermediate_size": 1536,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "vocab_size": 8192,
        "max_position_embeddings": 2048,
        "initializer_range": 0.05,
    },
}

# The checkpoint traps each architecture carries (sizes above may still override them).
ARCHS = TEST_CONFIGS


def settings(
    size: str = "tiny",
    arch: str = "llama",
    seed: int = 0,
    max_shard_size: str | int | None = None,
    train_steps: int = 0,
    **overrides: Any,
) -> dict[str, Any]:
    """Every setting that determines the checkpoint (validated), as a JSON-able dict.

    The dict is the caller's own, nested values included (a deep copy of the sizes, the
    architecture's settings and ``overrides``): a caller may hand its ``config`` to a
    transformers config class, which may change nested values in place (Phi3Config adds
    a field to ``rope_parameters``), without changing the settings, and so the digest,
    of any later call."""
    if size not in MODEL_SIZES:
        raise ValueError(f"size must be one of {', '.join(MODEL_SIZES)}, got {size!r}")
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {', '.join(ARCHS)}, got {arch!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if max_shard_size is not None and not isinstance(max_shard_size, (str, int)):
        raise TypeError(
            f"max_shard_size must be a size like '200KB' or bytes, got {max_shard_size!r}"
        )
    if isinstance(train_steps, bool) or not isinstance(train_steps, int) or train_steps < 0:
        raise ValueError(f"train_steps must be an int >= 0, got {train_steps!r}")
    config_cls = _config_class(arch)
    known = set(config_cls().to_dict())
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"unknown {config_cls.__name__} override(s) {', '.join(unknown)}; "
            "overrides must be config.json fields"
        )
    # the one copy (see above): nothing below shares a value with ARCHS, MODEL_SIZES or overrides
    config = copy.deepcopy({**MODEL_SIZES[size], **ARCHS[arch][1], **overrides})
    trained = {"train_steps": train_steps} if train_steps else {}  # untrained keys unchanged
    return {
        **trained,
        "format": FORMAT_VERSION,
        "size": size,
        "arch": arch,
        "seed": seed,
        "max_shard_size": max_shard_size,
        "config": config,
    }


def make_model(
    path: str | os.PathLike[str] | None = None,
    size: str = "tiny",
    arch: str = "llama",
    *,
    seed: int = 0,
    max_shard_size: str | int | None = None,
    train_steps: int = 0,
    **overrides: Any,
) -> Path:
    """Make (or reuse) the checkpoint; returns its directory.

    ``path=None`` caches under ``TANDEM_CACHE_DIR/models``; ``max_shard_size`` writes a
    sharded checkpoint with ``model.safetensors.index.json``; ``overrides`` are config
    fields (e.g. ``num_hidden_layers=1``); ``train_steps`` trains the model briefly on the
    tokenizer's built-in corpus so that it writes corpus-like text (the CLI's default model).
    """
    spec = settings(size, arch, seed, max_shard_size, train_steps, **overrides)
    blob = json.dumps(spec, sort_keys=True)
    if path is None:
        digest = hashlib.sha256(blob.encode()).hexdigest()[:16]
        target = Path(envs.TANDEM_CACHE_DIR) / "models" / f"{arch}-{size}-{digest}"
    elif isinstance(path, (str, os.PathLike)):
        target = Path(path)
    else:
        raise TypeError(f"path must be a str, os.PathLike or None, got {type(path).__name__}")
    if _matches(target, blob):
        return target
    if target.exists() and any(target.iterdir()):
        raise ValueError(
            f"path {str(target)!r} already holds something other than this "
            "model; pass an empty or new directory"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        _write(tmp, spec)
        (tmp / STAMP).write_text(blob)
        if target.exists():
            target.rmdir()  # an empty directory left for us
        os.rename(tmp, target)
    except OSError:
        if not _matches(target, blob):  # not a lost race: a real failure
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _matches(target: Path, blob: str) -> bool:
    stamp = target / STAMP
    return stamp.is_file() and stamp.read_text() == blob


def _config_class(arch: str) -> Any:
    import transformers

    return getattr(transformers, ARCHS[arch][0])


def _write(directory: Path, spec: dict[str, Any]) -> None:
    if _in_process_group():
        _write_in_child(directory, spec)
    else:
        _write_here(directory, spec)
    missing = [n for n in ("config.json", "generation_config.json") if not (directory / n).exists()]
    if missing:
        raise RuntimeError(f"the checkpoint in {directory} was written without {missing}")


def _in_process_group() -> bool:
    """Whether this process belongs to a torch.distributed group (a tensor-parallel rank)."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _write_in_child(directory: Path, spec: dict[str, Any]) -> None:
    """The checkpoint written by a fresh interpreter: in a process of a distributed group,
    transformers' ``save_pretrained`` writes nothing unless the process is the group's rank
    0 (it leaves the files to that rank), so a rank that made a model itself would put a
    checkpoint without its config and weights in the cache, for every later reader."""
    cmd = [sys.executable, "-m", "tandem.core.testing.models", str(directory)]
    done = subprocess.run(cmd, input=json.dumps(spec), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"writing the checkpoint in {directory} failed:\n{done.stderr[-4000:]}")


def _write_here(directory: Path, spec: dict[str, Any]) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.utils import logging as hf_logging

    make_tokenizer(directory, vocab_size=spec["config"]["vocab_size"])
    tok = AutoTokenizer.from_pretrained(directory)
    ids = {
        "bos_token_id": tok.bos_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
    }
    # spec is this call's own (settings' copy, or read from JSON): transformers may change
    # its nested values in place once the digest is taken
    config = _config_class(spec["arch"])(**spec["config"], **ids)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec["seed"])
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        _perturb(model)
        if spec["arch"] in TWEAKS:
            TWEAKS[spec["arch"]](model)
        if spec.get("train_steps"):
            from tandem.core.testing.train import train

            train(model, tok, spec["train_steps"], spec["seed"])
    kwargs = {} if spec["max_shard_size"] is None else {"max_shard_size": spec["max_shard_size"]}
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(directory, **kwargs)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    GenerationConfig(**ids).save_pretrained(directory)


def _perturb(model: torch.nn.Module) -> None:
    """Give biases and norm weights non-trivial values (transformers inits them to 0 and 1).

    Without this a checkpoint could not tell a model that drops the q/k/v bias or the
    norm weight from one that applies them. Draws from the caller's seeded generator.
    """
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, 0.2)
            elif name.endswith("norm.weight"):
                param.normal_(1.0, 0.2)


if __name__ == "__main__":  # DIR, the spec as JSON on stdin: see _write_in_child
    _write_here(Path(sys.argv[1]), json.loads(sys.stdin.read()))
