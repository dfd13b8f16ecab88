"""config.json read without transformers gives what transformers' AutoConfig gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tandem.core.config.device import resolve_dtype
from tandem.core.config.hf import DEFAULTS, load_hf_config, read_hf_config
from tandem.core.models.architectures import build_spec

MODEL_TYPES = {arch: values["model_type"] for arch, values in DEFAULTS.items()}
# transformers' config class of each architecture, where its name is not the obvious one
CONFIG_CLASSES = {"Gemma3ForCausalLM": "Gemma3TextConfig"}
SMALL = {
    "vocab_size": 100,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
}
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "small": {**SMALL, "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "eos_token_id": [5, 6]},
    "nulls": {**SMALL, "num_key_value_heads": None, "head_dim": None},
    "head_dim": {**SMALL, "head_dim": 32, "attention_bias": True, "bos_token_id": 3},
    "llama3_rope": {
        **SMALL,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    },
    "linear_rope": {**SMALL, "rope_theta": 1e6, "rope_scaling": {"type": "linear", "factor": 2}},
    "torch_dtype": {**SMALL, "torch_dtype": "bfloat16"},
    "dtype": {**SMALL, "dtype": "float16", "torch_dtype": "bfloat16"},
    "window": {**SMALL, "use_sliding_window": True, "sliding_window": 128},
    "no_window": {**SMALL, "sliding_window": None},
}
# fields the engine reads besides ModelSpec's (which compares as a whole)
READ = ("eos_token_id", "max_position_embeddings", "num_key_value_heads", "model_type")


def _write(root: Path, arch: str, extra: dict[str, Any]) -> Path:
    root.mkdir(parents=True)
    raw = {"architectures": [arch], "model_type": MODEL_TYPES[arch], **extra}
    (root / "config.json").write_text(json.dumps(raw))
    return root


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("arch", sorted(DEFAULTS))
def test_reads_what_transformers_reads(tmp_path: Path, arch: str, variant: str) -> None:
    from transformers import AutoConfig

    root = _write(tmp_path / "m", arch, VARIANTS[variant])
    ours, got_arch = load_hf_config(root, tuple(DEFAULTS))
    assert got_arch == arch
    try:
        theirs = AutoConfig.from_pretrained(str(root), local_files_only=True)
    except Exception:  # transformers validates: Mistral, Gemma refuse a null num_key_value_heads
        if variant != "nulls":  # Phi-3 refuses the llama3 and linear ropes: so do we
            with pytest.raises(ValueError, match="rope_type must be one of"):
                build_spec(ours, arch)
            return
        assert ours.num_key_value_heads == ours.num_attention_heads  # as the others derive
        return
    assert build_spec(ours, arch) == build_spec(theirs, arch)
    for name in READ:
        if name == "num_key_value_heads" and theirs.num_key_value_heads is None:
            assert ours.num_key_value_heads == ours.num_attention_heads  # Qwen2-MoE keeps null
            continue
        assert getattr(ours, name) == getattr(theirs, name), name
    if hasattr(theirs, "sliding_window"):
        assert ours.sliding_window == theirs.sliding_window
    cuda = torch.device("cuda")  # the dtype "auto" takes off the CPU
    assert resolve_dtype("auto", cuda, ours) == resolve_dtype("auto", cuda, theirs)


@pytest.mark.parametrize("arch", sorted(DEFAULTS))
def test_defaults_are_transformers_class_defaults(arch: str) -> None:
    import transformers

    cls = getattr(transformers, CONFIG_CLASSES.get(arch, arch.replace("ForCausalLM", "Config")))
    theirs = cls()
    ours = read_hf_config({}, arch)
    for name, value in vars(ours).items():
        if name in ("rope_scaling", "head_dim") or not hasattr(theirs, name):
            continue  # rope: compared through ModelSpec; head_dim: derived alike
        assert getattr(theirs, name) == value, name


def test_bad_calls_say_what_is_allowed() -> None:
    with pytest.raises(ValueError, match=r"architecture must be one of .*LlamaForCausalLM"):
        read_hf_config({}, "GPT2LMHeadModel")
    with pytest.raises(TypeError, match=r"raw must be config.json's object \(a dict\), got list"):
        read_hf_config([], "LlamaForCausalLM")  # type: ignore[arg-type]


def test_reading_a_model_config_does_not_import_transformers(tmp_path: Path, fresh_python) -> None:
    root = _write(tmp_path / "m", "LlamaForCausalLM", SMALL)
    (root / "model.safetensors").write_bytes(b"")
    code = (
        "import sys\n"
        "from tandem.core.config.model import load_model_config\n"
        f"cfg = load_model_config({str(root)!r})\n"
        "assert cfg.num_kv_heads == 2 and cfg.max_model_len == 256\n"
        "assert 'transformers' not in sys.modules, 'transformers was imported'\n"
    )
    fresh_python(code)
