"""Fixtures for the tandem-core unit tests: a tokenizer, config-only model dirs, and a
fresh interpreter for what a module's imports leave behind."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file

from tandem.core.testing.tokenizer import make_tokenizer
from tandem.core.text.tokenizer import Tokenizer, load_tokenizer

ModelDirFactory = Callable[..., Path]


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir: Path) -> Tokenizer:
    return load_tokenizer(tokenizer_dir)


def _llama_config(**overrides: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "vocab_size": 512,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-6,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    cfg.update(overrides)
    return {k: v for k, v in cfg.items() if v is not None}


@pytest.fixture
def model_dir(tmp_path: Path) -> ModelDirFactory:
    """Make a model directory with a config, a (dummy) weights file and no tokenizer.

    ``weights``: "single" (model.safetensors), "sharded" (index + 2 shards) or "none".
    """

    def make(weights: str = "single", name: str = "model", **overrides: Any) -> Path:
        root = tmp_path / name
        root.mkdir()
        (root / "config.json").write_text(json.dumps(_llama_config(**overrides)))
        tensor = {"w": torch.zeros(2)}
        if weights == "single":
            save_file(tensor, str(root / "model.safetensors"))
        elif weights == "sharded":
            for shard in ("a-00001.safetensors", "a-00002.safetensors"):
                save_file(tensor, str(root / shard))
            index = {"weight_map": {"x": "a-00001.safetensors", "y": "a-00002.safetensors"}}
            (root / "model.safetensors.index.json").write_text(json.dumps(index))
        return root

    return make
