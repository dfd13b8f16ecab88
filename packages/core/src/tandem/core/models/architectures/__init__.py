"""Every supported architecture: how its config becomes a spec, its weight names, its
config defaults and test configs, and how a GGUF file of it is read: one ``Architecture``
entry in its family's module (adding one is an entry there, or a module in ``FAMILIES``)."""

from __future__ import annotations

from typing import Any

from tandem.core.models.architectures import deepseek, gemma, llama, moe, phi3
from tandem.core.models.architectures.entry import Architecture
from tandem.core.models.architectures.gguf_names import GGUFNames
from tandem.core.spec.fields import first_architecture
from tandem.core.spec.model import ModelSpec

# the family modules: each declares its ARCHITECTURES (everything about one, together)
# and the GGUF readings under llama.cpp's names
FAMILIES = (llama, phi3, gemma, moe, deepseek)

ARCHITECTURES: dict[str, Architecture] = {
    arch.name: arch for family in FAMILIES for arch in family.ARCHITECTURES
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
    names.name: names for family in FAMILIES for names in family.GGUF
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
