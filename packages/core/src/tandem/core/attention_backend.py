"""Which attention kernels a model runs, chosen per device type and env setting.

The choice is an ``env_cache`` keyed on ``TANDEM_ATTENTION_BACKEND``: flipping the
variable (another engine, another test) can never return a stale backend.
"""

from __future__ import annotations

from tandem.core import envs
from tandem.core.env_cache import env_cache
from tandem.kernels.backends import AttentionBackend, available_backends, get_backend

BACKENDS = ("torch", "cpu", "flash_attn")


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
    """``TANDEM_ATTENTION_BACKEND`` when set, else flash_attn on CUDA if present, the C
    kernels (``cpu``) on a CPU where they build, else torch."""
    available = available_attention_backends(device_type)
    forced = envs.TANDEM_ATTENTION_BACKEND
    if forced is not None:
        if forced not in available:
            raise ValueError(
                f"TANDEM_ATTENTION_BACKEND={forced!r} is not available on device type "
                f"{device_type!r}; available: {', '.join(available) or 'none'}"
            )
        return forced
    if device_type == "cuda" and "flash_attn" in available:
        return "flash_attn"
    if device_type == "cpu" and "cpu" in available:
        return "cpu"
    return "torch"


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
