"""Model implementations, selected by the ``architectures`` entry of config.json.

Every architecture is the same :class:`~tandem.core.models.causal_lm.CausalLM` under the
architecture's own class name, which picks its spec and weight names.
"""

from __future__ import annotations

from tandem.core.models.architectures import ARCHITECTURES
from tandem.core.models.causal_lm import CausalLM

_CLASSES: dict[str, type[CausalLM]] = {
    name: type(name, (CausalLM,), {"__module__": __name__, "__doc__": f"{name} (a CausalLM)."})
    for name in ARCHITECTURES
}


def supported_architectures() -> list[str]:
    return sorted(_CLASSES)


def get_model_class(architecture: str) -> type[CausalLM]:
    """The class implementing ``architecture`` (a config.json ``architectures`` entry)."""
    cls = _CLASSES.get(architecture) if isinstance(architecture, str) else None
    if cls is None:
        raise ValueError(
            f"architecture must be one of {', '.join(supported_architectures())}, "
            f"got {architecture!r}"
        )
    return cls


__all__ = ["CausalLM", "get_model_class", "supported_architectures"]
