"""The kernel switches of ``tandem generate``, ``serve`` and ``explain``: what runs the
ops (:mod:`tandem.core.layers.kernel_choice`); each left out takes its environment variable."""

from __future__ import annotations

import argparse
from typing import Any

from tandem.core.layers.kernel_choice import ATTENTION_BACKENDS, DECODE_STACKS, LINEAR_KERNELS

NAMES = ("attention_backend", "cpu_linear", "decode_stack")


def add_kernel_flags(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--attention-backend",
        choices=ATTENTION_BACKENDS,
        default=None,
        help="the attention kernels: cpu (C, the CPU default), torch, flash_attn (CUDA) "
        "(default: $TANDEM_ATTENTION_BACKEND, else the best the device has)",
    )
    cmd.add_argument(
        "--cpu-linear",
        choices=LINEAR_KERNELS,
        default=None,
        help="the CPU matmul of float linear layers: native (C where the CPU has AVX-512 or "
        "AVX2 with FMA, else oneDNN), onednn, torch (default: $TANDEM_CPU_LINEAR, else native)",
    )
    cmd.add_argument(
        "--decode-stack",
        choices=DECODE_STACKS,
        default=None,
        help="decode steps on the CPU: c (the whole layer stack in one C call, where the model "
        "allows) or modules (layer by layer) (default: $TANDEM_DECODE_STACK, else c)",
    )


def kernel_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``LLM`` keyword arguments the kernel flags ask for (none when unset)."""
    return {n: getattr(args, n) for n in NAMES if getattr(args, n, None) is not None}
