"""Model implementations, selected by the ``architectures`` entry of config.json.

Every architecture is the same :class:`~tandem.core.models.causal_lm.CausalLM` under the
architecture's own class name, which picks its spec and weight names.

The model classes (torch, the layers and the kernels) are imported on first use: a
process that only reads a config's spec (the engine's front process reads the layers'
windows for its KV manager) imports none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tandem.core.models.architectures import ARCHITECTURES

if TYPE_CHECKING:
    from tandem.core.models.causal_lm import CausalLM

_CLASSES: dict[str, type[CausalLM]] = {}


def supported_architectures() -> list[str]:
    return sorted(ARCHITECTURES)


def get_model_class(architecture: str) -> type[CausalLM]:
    """The class implementing ``architecture`` (a config.json ``architectures`` entry)."""
    if not isinstance(architecture, str) or architecture not in ARCHITECTURES:
        raise ValueError(
            f"architecture must be one of {', '.join(supported_architectures())}, "
            f"got {architecture!r}"
        )
    cls = _CLASSES.get(architecture)
    if cls is None:
        from tandem.core.models.causal_lm import CausalLM

        doc = f"{architecture} (a CausalLM)."
        cls = type(architecture, (CausalLM,), {"__module__": __name__, "__doc__": doc})
        _CLASSES[architecture] = cls
    return cls


def __getattr__(name: str) -> Any:
    if name == "CausalLM":
        from tandem.core.models.causal_lm import CausalLM

        return CausalLM
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CausalLM", "get_model_class", "supported_architectures"]
