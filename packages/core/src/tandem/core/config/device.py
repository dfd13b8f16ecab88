"""Where and in what dtype a model runs: the allowed names and how ``auto`` resolves.

Both ``EngineArgs`` (which checks the names) and the model directory reader (which
resolves ``auto`` against the checkpoint) use these; neither imports the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

DTYPE_NAMES = ("auto", "float32", "float16", "bfloat16")
DEVICES = ("auto", "cpu", "cuda")


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


def resolve_device(device: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; ``cuda`` without CUDA is an error."""
    import torch

    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    has_cuda = torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        raise ValueError("device='cuda' was requested but CUDA is not available; use 'cpu'")
    if device == "auto":
        device = "cuda" if has_cuda else "cpu"
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype, device: torch.device, hf_config: Any) -> torch.dtype:
    """``auto`` -> float32 on CPU, the checkpoint's dtype on CUDA (float16 if unset)."""
    import torch

    table = dtypes()
    if isinstance(dtype, torch.dtype):
        return dtype
    chosen = table.get(dtype)
    if chosen is not None:
        return chosen
    if device.type == "cpu":
        return torch.float32
    raw = getattr(hf_config, "dtype", None) or vars(hf_config).get("torch_dtype")
    if isinstance(raw, str):
        raw = table.get(raw.removeprefix("torch."))
    if isinstance(raw, torch.dtype) and raw in table.values() and raw != torch.float32:
        return raw
    return torch.float16
