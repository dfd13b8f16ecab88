"""Op registration in the ``tandem`` torch.library namespace.

Every op of this package is defined through :func:`define`, which refuses a name that
is already taken (two backends must never share an op name) and records the name so
that :func:`registered_op_names` can list what this package put in the namespace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

# The first call of any custom op imports torch._dynamo, which sets
# TORCHINDUCTOR_CACHE_DIR in os.environ as a side effect. Importing it with the ops
# moves that one-time cost and side effect to import time, out of the first call.
import torch._dynamo

from tandem.kernels import OP_NAMESPACE

_DEFINED: list[str] = []


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
        return op

    return wrap


def registered_op_names() -> list[str]:
    """Qualified names (``tandem::...``) of the ops this package has registered so far.

    The CPU (``torch_*``) ops are registered when :mod:`tandem.kernels.ops` is imported;
    a backend that registers its ops on first use (``flash_attn_*``) adds them then.
    """
    return sorted(_DEFINED)
