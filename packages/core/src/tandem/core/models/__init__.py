"""Model implementations, selected by the ``architectures`` entry of config.json."""

from __future__ import annotations

from torch import nn

from tandem.core.models.llama import LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM

_REGISTRY: dict[str, type[nn.Module]] = {
    "LlamaForCausalLM": LlamaForCausalLM,
    "MistralForCausalLM": MistralForCausalLM,
    "Qwen2ForCausalLM": Qwen2ForCausalLM,
}


def supported_architectures() -> list[str]:
    return sorted(_REGISTRY)


def get_model_class(architecture: str) -> type[nn.Module]:
    """The class implementing ``architecture`` (a config.json ``architectures`` entry)."""
    cls = _REGISTRY.get(architecture) if isinstance(architecture, str) else None
    if cls is None:
        raise ValueError(
            f"architecture must be one of {', '.join(supported_architectures())}, "
            f"got {architecture!r}"
        )
    return cls


__all__ = ["get_model_class", "supported_architectures"]
