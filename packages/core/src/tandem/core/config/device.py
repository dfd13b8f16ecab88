"""Where and in what dtype a model runs: the allowed names and how ``auto`` resolves.

Both ``EngineArgs`` (which checks the names) and the model directory reader (which
resolves ``auto`` against the checkpoint) use these; neither imports the other. Both
resolve to names (``cpu``, ``float32``) first, without torch where no GPU can be there:
the v1 engine's front process makes its config so, and its core process turns the names
into torch's objects (``EngineConfig.with_torch``).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

DTYPE_NAMES = ("auto", "float32", "float16", "bfloat16")
DEVICES = ("auto", "cpu", "cuda")
# Where any of these exists a GPU runtime may be there (NVIDIA, ROCm, WSL2's): only
# torch can say whether it works. Where none exists, no CUDA device is reachable.
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")
ITEMSIZES = {"float32": 4, "float16": 2, "bfloat16": 2}


def dtypes() -> dict[str, torch.dtype | None]:
    """The dtype names and their torch dtypes (``auto``: None). A function, not a module
    constant, so that checking a name (``EngineArgs``) does not import torch: the parent
    process of the v1 engine starts its children first and imports torch beside them."""
    import torch

    known = (torch.float32, torch.float16, torch.bfloat16)
    return {"auto": None, **dict(zip(DTYPE_NAMES[1:], known))}


def __getattr__(name: str) -> Any:
    if name == "DTYPES":  # the mapping as a module attribute, built on first use
        return dtypes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def cuda_available() -> bool:
    """Whether torch finds a CUDA device. Without torch imported and without any GPU
    device file it is False without asking torch: the v1 front then decides its
    device without importing torch (200+ MiB) beside the core that runs the model."""
    if sys.modules.get("torch") is None and not any(map(os.path.exists, GPU_DEVICE_FILES)):
        return False
    import torch

    return torch.cuda.is_available()


def device_name(device: str) -> str:
    """``auto`` -> ``cuda`` when available, else ``cpu``; ``cuda`` without CUDA is an
    error. Torch is imported only where a GPU may be there (:func:`cuda_available`)."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "cpu":
        return device
    has_cuda = cuda_available()
    if device == "cuda" and not has_cuda:
        raise ValueError("device='cuda' was requested but CUDA is not available; use 'cpu'")
    return "cuda" if has_cuda else "cpu"


def resolve_device(device: str) -> torch.device:
    """:func:`device_name` as a ``torch.device``."""
    import torch

    return torch.device(device_name(device))


def device_type(device: torch.device | str) -> str:
    """``cpu`` or ``cuda``, of a ``torch.device`` or a device's name."""
    return device if isinstance(device, str) else device.type


def dtype_of(dtype: torch.dtype | str) -> str:
    """The name (``float32``...) of a torch dtype, or a name already."""
    return dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")


def itemsize(dtype: torch.dtype | str) -> int:
    """Bytes of one element of a model dtype (a torch dtype or its name)."""
    name = dtype_of(dtype)
    if name not in ITEMSIZES:
        raise ValueError(f"dtype must be one of {', '.join(ITEMSIZES)}, got {dtype}")
    return ITEMSIZES[name]


def dtype_name(dtype: str | torch.dtype, device: torch.device | str, hf_config: Any) -> str:
    """``auto`` -> float32 on CPU, the checkpoint's dtype on CUDA (float16 if unset);
    a name, or a torch dtype given, as its name."""
    chosen = dtype_of(dtype)
    if chosen not in DTYPE_NAMES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPE_NAMES)}, got {dtype!r}")
    if chosen != "auto":
        return chosen
    if device_type(device) == "cpu":
        return "float32"
    raw = getattr(hf_config, "dtype", None) or vars(hf_config).get("torch_dtype")
    stored = "" if raw is None else dtype_of(raw).removeprefix("torch.")
    return stored if stored in ("float16", "bfloat16") else "float16"


def resolve_dtype(
    dtype: str | torch.dtype, device: torch.device | str, hf_config: Any
) -> torch.dtype:
    """:func:`dtype_name` as a torch dtype."""
    return torch_dtype(dtype_name(dtype, device, hf_config))


def torch_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """The torch dtype of a name (a torch dtype is kept)."""
    import torch

    return dtype if isinstance(dtype, torch.dtype) else getattr(torch, dtype)
