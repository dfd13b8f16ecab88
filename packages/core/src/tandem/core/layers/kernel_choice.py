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
    """``attention``: the backend every attention layer runs (None: the device's best);
    ``linear``: native (the C kernel on fp32 weights where the CPU has one, else
    oneDNN), onednn or torch (``F.linear``); ``decode_stack``: c (one C call a decode
    step, where the model allows) or modules (layer by layer)."""

    attention: str | None = None  # None: the best the device has
    linear: str = "native"
    decode_stack: str = "c"

    def __post_init__(self) -> None:
        for name, value, allowed in (
            ("attention", self.attention, (None, *ATTENTION_BACKENDS)),
            ("linear", self.linear, LINEAR_KERNELS),
            ("decode_stack", self.decode_stack, DECODE_STACKS),
        ):
            if value not in allowed:
                names = ", ".join(str(a) for a in allowed)
                raise ValueError(f"{name} must be one of {names}, got {value!r}")


def check_switch(field: str, value: object, allowed: tuple[str, ...]) -> None:
    """An ``EngineArgs`` switch: None (the environment's default) or one of ``allowed``."""
    if value is not None and value not in allowed:
        raise ValueError(f"{field} must be one of {', '.join(allowed)} or None, got {value!r}")


def resolve_kernels(
    attention: str | None = None,
    linear: str | None = None,
    decode_stack: str | None = None,
) -> KernelChoice:
    """The switches: each value given, else its environment variable's, else the
    default. The attention backend may stay None: the best one available, chosen by
    the process that loads the model (:func:`tandem.core.layers.attention_backend.for_device`)."""
    from tandem.core import envs

    return KernelChoice(
        attention if attention is not None else envs.TANDEM_ATTENTION_BACKEND,
        linear if linear is not None else envs.TANDEM_CPU_LINEAR,
        decode_stack if decode_stack is not None else envs.TANDEM_DECODE_STACK,
    )
