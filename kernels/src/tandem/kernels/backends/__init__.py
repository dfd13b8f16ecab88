"""Attention backends by name; a backend's module is imported only when it is asked for.

There is no environment lookup and no caching here: choosing a backend from settings
is the job of the selector in tandem-core.
"""

from __future__ import annotations

import importlib

from tandem.kernels.backends.base import AttentionBackend

# name -> "module:class", imported on demand
REGISTRY: dict[str, str] = {
    "torch": "tandem.kernels.backends.torch_backend:TorchBackend",
    "cpu": "tandem.kernels.backends.cpu_backend:CpuBackend",
    "flash_attn": "tandem.kernels.backends.flash_attn_backend:FlashAttnBackend",
}


def _load(name: str) -> type[AttentionBackend]:
    module, _, cls = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def known_backends() -> list[str]:
    """Every registered backend name, available here or not."""
    return list(REGISTRY)


def available_backends() -> list[str]:
    """Names of the backends that can run in this process, in registry order."""
    return [name for name in REGISTRY if _load(name).is_available()]


def get_backend(name: str) -> AttentionBackend:
    """A new instance of backend ``name``; ValueError for an unknown or unavailable one."""
    if not isinstance(name, str):
        raise TypeError(f"backend name must be a str, got {type(name).__name__}")
    if name not in REGISTRY:
        raise ValueError(f"unknown attention backend {name!r}; known backends: {known_backends()}")
    cls = _load(name)
    if not cls.is_available():
        raise ValueError(
            f"attention backend {name!r} is not available here; available backends: "
            f"{available_backends()}"
        )
    return cls()


__all__ = [
    "REGISTRY",
    "AttentionBackend",
    "available_backends",
    "get_backend",
    "known_backends",
]
