"""Every supported architecture: how its config becomes a spec, and its weight names."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tandem.core.models.architectures import deepseek, gemma, llama, moe, phi3
from tandem.core.models.architectures.common import split_qkv_gate_up
from tandem.core.models.architectures.gguf_names import GGUFNames
from tandem.core.models.fields import first_architecture
from tandem.core.models.spec import ModelSpec
from tandem.core.models.weights import NameMap

SpecBuilder = Callable[[Any, str, "int | None"], ModelSpec]


@dataclass(frozen=True, slots=True)
class Architecture:
    spec: SpecBuilder
    names: Callable[[ModelSpec], NameMap] = split_qkv_gate_up
    extra_layers: bool = False  # checkpoints carry layers past num_hidden_layers (unused)


ARCHITECTURES: dict[str, Architecture] = {
    "LlamaForCausalLM": Architecture(llama.llama),
    "MistralForCausalLM": Architecture(llama.mistral),
    "Qwen2ForCausalLM": Architecture(llama.qwen2),
    "Qwen3ForCausalLM": Architecture(llama.qwen3),
    "GraniteForCausalLM": Architecture(llama.granite),
    "Olmo2ForCausalLM": Architecture(llama.olmo2),
    "Phi3ForCausalLM": Architecture(phi3.phi3, phi3.phi3_names),
    "Gemma2ForCausalLM": Architecture(gemma.gemma2),
    "Gemma3ForCausalLM": Architecture(gemma.gemma3),
    "MixtralForCausalLM": Architecture(moe.mixtral, moe.mixtral_names),
    "Qwen2MoeForCausalLM": Architecture(moe.qwen2_moe, moe.qwen_moe_names),
    "Qwen3MoeForCausalLM": Architecture(moe.qwen3_moe, moe.qwen_moe_names),
    "DeepseekV3ForCausalLM": Architecture(deepseek.deepseek_v3, deepseek.names, True),
}


def architecture(name: str) -> Architecture:
    entry = ARCHITECTURES.get(name) if isinstance(name, str) else None
    if entry is None:
        raise ValueError(
            f"architecture must be one of {', '.join(sorted(ARCHITECTURES))}, got {name!r}"
        )
    return entry


# llama.cpp's architecture names (``general.architecture``) -> how to read such a file
GGUF_ARCHITECTURES: dict[str, GGUFNames] = {
    names.name: names for family in (llama, gemma, phi3, moe, deepseek) for names in family.GGUF
}


def gguf_names(name: str) -> GGUFNames:
    """The reading of GGUF architecture ``name``; ValueError naming the ones read."""
    entry = GGUF_ARCHITECTURES.get(name) if isinstance(name, str) else None
    if entry is None:
        raise ValueError(
            f"GGUF architecture {name!r} is not supported; supported: "
            f"{', '.join(sorted(GGUF_ARCHITECTURES))}"
        )
    return entry


def build_spec(
    hf_config: Any, arch: str | None = None, max_model_len: int | None = None
) -> ModelSpec:
    """The spec of ``hf_config`` as architecture ``arch`` (default: its first listed)."""
    name = arch or first_architecture(hf_config, ARCHITECTURES)
    return architecture(name).spec(hf_config, name, max_model_len)


__all__ = [
    "ARCHITECTURES",
    "GGUF_ARCHITECTURES",
    "Architecture",
    "GGUFNames",
    "architecture",
    "build_spec",
    "gguf_names",
]
