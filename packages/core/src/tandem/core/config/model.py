"""``ModelConfig``: a local Hugging Face model directory, read and checked.

Every problem with the directory (missing, no ``config.json``, unsupported architecture,
no weights, a shard named by the index but absent) is a ``ValueError`` that says what
was expected, raised before any weight is read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tandem.core.config.device import device_name, dtype_name, torch_dtype
from tandem.core.config.hf import DEFAULTS, load_hf_config, read_hf_config
from tandem.core.gguf.checkpoint import is_gguf
from tandem.core.spec.model import ModelSpec

if TYPE_CHECKING:
    import torch

# every architecture tandem.core.models implements (tests/models holds the two lists equal)
SUPPORTED_ARCHITECTURES = tuple(DEFAULTS)
WEIGHTS_INDEX = "model.safetensors.index.json"


@dataclass(slots=True)
class ModelConfig:
    path: Path
    hf_config: Any  # config.json as a namespace (tandem.core.config.hf)
    architecture: str
    dtype: torch.dtype  # or its name, in a config made with names (load_model_config)
    max_model_len: int
    weight_files: list[Path]
    tokenizer: Path
    generation_config: dict[str, Any] = field(default_factory=dict)

    @property
    def gguf(self) -> Path | None:
        """The GGUF file the model is read from (in place), or None for safetensors."""
        return self.path if is_gguf(self.path) else None

    @property
    def num_layers(self) -> int:
        return int(self.hf_config.num_hidden_layers)

    @property
    def num_heads(self) -> int:
        return int(self.hf_config.num_attention_heads)

    @property
    def latent_row(self) -> int | None:
        """Latent attention (DeepSeek): the values a token's cache row holds, else None."""
        rank = getattr(self.hf_config, "kv_lora_rank", None)
        return None if rank is None else int(rank) + int(self.hf_config.qk_rope_head_dim)

    @property
    def num_kv_heads(self) -> int:
        """KV heads of the cache (latent attention: one)."""
        if self.latent_row is not None:
            return 1
        kv = getattr(self.hf_config, "num_key_value_heads", None)
        return int(kv) if kv is not None else self.num_heads

    @property
    def hidden_size(self) -> int:
        return int(self.hf_config.hidden_size)

    @property
    def head_dim(self) -> int:
        """Head size of the cache (latent attention: half a latent row in K, half in V)."""
        if self.latent_row is not None:
            return self.latent_row // 2
        dim = getattr(self.hf_config, "head_dim", None)
        return int(dim) if dim is not None else self.hidden_size // self.num_heads

    @property
    def spec(self) -> ModelSpec:
        """The architecture's spec of this config, for its ``max_model_len``
        (:mod:`tandem.core.models.architectures`; no model class is imported)."""
        from tandem.core.models.architectures import build_spec

        return build_spec(self.hf_config, self.architecture, self.max_model_len)

    @property
    def windows(self) -> tuple[int | None, ...]:
        """Each layer's sliding window (None: the layer sees its whole sequence)."""
        return self.spec.windows

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
    device: torch.device | str | None = None,
    max_model_len: int | None = None,
    supported: tuple[str, ...] = SUPPORTED_ARCHITECTURES,
    names: bool = False,
) -> ModelConfig:
    """Read and check a local Hugging Face model directory, or a ``.gguf`` file (its
    metadata as the config, its tokenizer, its tensors read in place at load:
    :mod:`tandem.core.gguf`). With ``names`` its dtype stays a name (``float32``) and
    torch is not imported."""
    root = Path(model).expanduser()
    if is_gguf(root):
        root = root.resolve()  # a child process must find it from any directory
        hf_config, arch, gen = _gguf_config(root, supported)
        weights, default_tok = [root], None
    else:
        hf_config, arch = load_hf_config(root, supported)
        weights, default_tok, gen = find_weight_files(root), root, _read_generation_config(root)
    limit = getattr(hf_config, "max_position_embeddings", None)
    if max_model_len is None:
        if limit is None:
            raise ValueError(
                f"the config of {root} has no max_position_embeddings; set max_model_len"
            )
        max_model_len = int(limit)
    elif limit is not None and max_model_len > limit:
        raise ValueError(
            f"max_model_len must be <= {limit} (the model's max_position_embeddings), "
            f"got {max_model_len}"
        )
    if tokenizer is not None:
        tok = Path(tokenizer).expanduser()
    elif default_tok is not None:
        tok = default_tok
    else:
        from tandem.core.gguf.tokenizer import tokenizer_dir

        tok = tokenizer_dir(root)
    if not tok.is_dir():
        raise ValueError(f"tokenizer must be an existing directory, got {tok}")
    device = device if device is not None else device_name("auto")
    chosen = dtype_name(dtype, device, hf_config)
    return ModelConfig(
        path=root,
        hf_config=hf_config,
        architecture=arch,
        dtype=chosen if names else torch_dtype(chosen),
        max_model_len=max_model_len,
        weight_files=weights,
        tokenizer=tok,
        generation_config=gen,
    )


def _gguf_config(path: Path, supported: tuple[str, ...]) -> tuple[Any, str, dict[str, Any]]:
    """A GGUF file's (config namespace, architecture, generation config), checked."""
    from tandem.core.gguf.checkpoint import open_checkpoint

    checkpoint = open_checkpoint(path)
    arch = checkpoint.hf_architecture
    if arch not in supported:
        raise ValueError(f"{path.name} holds a {arch}, which is not among {', '.join(supported)}")
    from tandem.core.gguf.sampling import generation_config

    raw = checkpoint.config
    return read_hf_config(raw, arch), arch, generation_config(checkpoint, raw)
