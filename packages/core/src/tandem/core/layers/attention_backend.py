"""Which attention kernels a model runs, chosen per device type and env setting.

An engine takes its backend once, from its config (``EngineArgs.attention_backend``, or
``TANDEM_ATTENTION_BACKEND`` read by :func:`select_attention_backend`, an ``env_cache``
keyed on it: flipping the variable can never return a stale answer).
"""

from __future__ import annotations

from dataclasses import replace

from tandem.core import envs
from tandem.core.env_cache import env_cache
from tandem.core.layers.kernel_choice import ATTENTION_BACKENDS, KernelChoice
from tandem.kernels.backends import AttentionBackend, available_backends, get_backend

BACKENDS = ATTENTION_BACKENDS


def available_attention_backends(device_type: str) -> list[str]:
    """Backends usable on ``device_type``; flash_attn needs CUDA."""
    _check_device_type(device_type)
    names = [n for n in available_backends() if n in BACKENDS]
    if device_type != "cuda":
        names = [n for n in names if n != "flash_attn"]
    if device_type != "cpu":
        names = [n for n in names if n != "cpu"]
    return names


@env_cache("TANDEM_ATTENTION_BACKEND")
def select_attention_backend(device_type: str) -> str:
    """``TANDEM_ATTENTION_BACKEND`` when set, else the best available on ``device_type``
    (:func:`best_backend`). An engine reads it once, into its config's kernel choice
    (:mod:`tandem.core.layers.kernel_choice`); its model never asks again."""
    available = available_attention_backends(device_type)
    forced = envs.TANDEM_ATTENTION_BACKEND
    if forced is not None:
        if forced not in available:
            raise ValueError(
                f"TANDEM_ATTENTION_BACKEND={forced!r} is not available on device type "
                f"{device_type!r}; available: {', '.join(available) or 'none'}"
            )
        return forced
    return best_backend(device_type, available)


def best_backend(device_type: str, available: list[str]) -> str:
    """flash_attn on CUDA if present, the C kernels (``cpu``) on a CPU where they
    build, else torch."""
    if device_type == "cuda" and "flash_attn" in available:
        return "flash_attn"
    if device_type == "cpu" and "cpu" in available:
        return "cpu"
    return "torch"


def for_device(kernels: KernelChoice, device_type: str) -> KernelChoice:
    """``kernels`` with the attention backend named: the one asked for, if the device
    has it, else the best it has (:func:`best_backend`)."""
    available = available_attention_backends(device_type)
    if kernels.attention is None:
        return replace(kernels, attention=best_backend(device_type, available))
    if kernels.attention not in available:
        raise ValueError(
            f"attention backend {kernels.attention!r} is not available on device type "
            f"{device_type!r}; available: {', '.join(available) or 'none'}"
        )
    return kernels


def get_attention_backend(name: str) -> AttentionBackend:
    """A fresh instance of backend ``name`` (write_kv_cache, prefill, decode)."""
    if name not in BACKENDS:
        raise ValueError(f"attention backend must be one of {', '.join(BACKENDS)}, got {name!r}")
    return get_backend(name)


def _check_device_type(device_type: str) -> None:
    if not isinstance(device_type, str) or not device_type:
        raise TypeError(
            f"device_type must be a device type string such as 'cpu' or 'cuda', got {device_type!r}"
        )
