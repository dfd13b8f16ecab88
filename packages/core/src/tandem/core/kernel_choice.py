"""The kernel switches of one engine, resolved once when its config is made.

Three choices decide what runs a model's ops: the attention backend, the matmul kernel
of the CPU linear layers and whether decode steps run the whole layer stack in one C
call. Each is an ``EngineArgs`` field; one left unset takes its environment variable's
value (``TANDEM_ATTENTION_BACKEND``, ``TANDEM_CPU_LINEAR``, ``TANDEM_DECODE_STACK``),
read here, once. The model then keeps what it was given: nothing is re-read while it
runs, so a variable changed later (another engine, another test) cannot reach it.
"""

from __future__ import annotations

from dataclasses import dataclass

LINEAR_KERNELS = ("native", "onednn", "torch")
DECODE_STACKS = ("c", "modules")
ATTENTION_BACKENDS = ("torch", "cpu", "flash_attn")


@dataclass(frozen=True, slots=True)
class KernelChoice:
    """``attention``: the backend every attention layer runs; ``linear``: native (the C
    kernel on fp32 weights where the CPU has one, else oneDNN), onednn or torch
    (``F.linear``); ``decode_stack``: c (one C call a decode step, where the model
    allows) or modules (layer by layer)."""

    attention: str = "torch"
    linear: str = "native"
    decode_stack: str = "c"

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("attention", self.attention, ATTENTION_BACKENDS),
            ("linear", self.linear, LINEAR_KERNELS),
            ("decode_stack", self.decode_stack, DECODE_STACKS),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


def check_switch(field: str, value: object, allowed: tuple[str, ...]) -> None:
    """An ``EngineArgs`` switch: None (the environment's default) or one of ``allowed``."""
    if value is not None and value not in allowed:
        raise ValueError(f"{field} must be one of {', '.join(allowed)} or None, got {value!r}")


def resolve_kernels(
    device_type: str,
    attention: str | None = None,
    linear: str | None = None,
    decode_stack: str | None = None,
) -> KernelChoice:
    """The switches for a model on ``device_type``: each given value, else its
    environment variable's, else the default (the best attention backend available)."""
    from tandem.core import envs
    from tandem.core.attention_backend import (
        available_attention_backends,
        select_attention_backend,
    )

    if attention is None:
        attention = select_attention_backend(device_type)
    elif attention not in (available := available_attention_backends(device_type)):
        raise ValueError(
            f"attention_backend={attention!r} is not available on device type "
            f"{device_type!r}; available: {', '.join(available) or 'none'}"
        )
    return KernelChoice(
        attention,
        linear if linear is not None else envs.TANDEM_CPU_LINEAR,
        decode_stack if decode_stack is not None else envs.TANDEM_DECODE_STACK,
    )
