"""Op registration in the ``tandem`` torch.library namespace, and the eager call.

Every op of this package is defined through :func:`define`, which refuses a name that
is already taken (two backends must never share an op name) and records the name so
that :func:`registered_op_names` can list what this package put in the namespace.

The public wrappers call an op through :func:`call`: straight to its Python function
in eager mode, through ``torch.ops.tandem`` while torch.compile or export traces. A call
through the dispatcher costs 20-40 us more (a model step makes ~180 of them), and the
first one in a process imports ``torch._dynamo`` (~1 s of an engine's start-up, and it
sets ``TORCHINDUCTOR_CACHE_DIR`` in ``os.environ``), which an eager engine never needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from tandem.kernels import OP_NAMESPACE

_DEFINED: list[str] = []
_FUNCTIONS: dict[str, Callable[..., Any]] = {}


def qualified(name: str) -> str:
    return f"{OP_NAMESPACE}::{name}"


def is_defined(name: str) -> bool:
    """Whether ``tandem::<name>`` exists in torch's op registry (by anyone)."""
    return hasattr(getattr(torch.ops, OP_NAMESPACE), name)


def define(name: str, mutates_args: Iterable[str] = ()) -> Callable[[Callable[..., Any]], Any]:
    """Decorator: ``torch.library.custom_op`` under ``tandem::<name>``, refusing duplicates."""
    if is_defined(name):
        raise RuntimeError(
            f"custom op {qualified(name)} is already registered; every Tandem op needs a "
            "unique, backend-qualified name"
        )

    def wrap(fn: Callable[..., Any]) -> Any:
        op = torch.library.custom_op(qualified(name), mutates_args=tuple(mutates_args))(fn)
        _DEFINED.append(qualified(name))
        _FUNCTIONS[name] = fn
        return op

    return wrap


def call(name: str, *args: Any) -> Any:
    """Run ``tandem::<name>`` on ``args``: its function in eager mode, the registered op
    while torch.compile or export traces (which must see the op, not its body). Under
    the profiler the eager call is a range named as the op, so profiles show it."""
    if torch.compiler.is_compiling():
        return getattr(getattr(torch.ops, OP_NAMESPACE), name)(*args)
    if torch._C._autograd._profiler_enabled():
        with torch.profiler.record_function(qualified(name)):
            return _FUNCTIONS[name](*args)
    return _FUNCTIONS[name](*args)


def registered_op_names() -> list[str]:
    """Qualified names (``tandem::...``) of the ops this package has registered so far.

    The CPU (``torch_*``) ops are registered when :mod:`tandem.kernels.ops` is imported;
    a backend that registers its ops on first use (``flash_attn_*``) adds them then.
    """
    return sorted(_DEFINED)
