"""Every environment variable Tandem reads, declared in one table and read lazily.

``from tandem.core import envs; envs.TANDEM_ENGINE`` reads ``os.environ`` at that
moment, so a value set after import (by a test, or by the harness when it switches
engines) is always seen. Nothing is frozen at import time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class EnvVar:
    name: str
    parse: Callable[[str], Any]
    default: Any
    help: str
    choices: tuple[str, ...] | None = None

    def read(self) -> Any:
        raw = os.environ.get(self.name)
        if raw is None or raw == "":
            return self.default
        if self.choices is not None and raw not in self.choices:
            raise ValueError(
                f"environment variable {self.name}={raw!r} is not allowed; "
                f"choose one of {', '.join(self.choices)}"
            )
        try:
            return self.parse(raw)
        except ValueError as exc:
            raise ValueError(f"environment variable {self.name}={raw!r}: {exc}") from None


def _bool(raw: str) -> bool:
    low = raw.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected one of 1/0, true/false, yes/no, on/off")


def _optional_int(raw: str) -> int | None:
    return int(raw)


_DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "tandem")

REGISTRY: dict[str, EnvVar] = {
    v.name: v
    for v in (
        EnvVar(
            "TANDEM_ENGINE",
            str,
            None,
            "engine used by LLM(engine=None): v0 or v1",
            choices=("v0", "v1"),
        ),
        EnvVar(
            "TANDEM_ATTENTION_BACKEND",
            str,
            None,
            "the default of EngineArgs.attention_backend (torch, cpu, flash_attn), read once "
            "when an engine's config is made; unset: the best the device has",
            choices=("torch", "cpu", "flash_attn"),
        ),
        EnvVar(
            "TANDEM_CACHE_DIR",
            str,
            _DEFAULT_CACHE,
            "where built-in test models and the compiled CPU kernels are cached",
        ),
        EnvVar(
            "TANDEM_NUM_THREADS",
            _optional_int,
            None,
            "torch CPU threads used by an engine (default: the cores the process may run on)",
        ),
        EnvVar(
            "TANDEM_CPU_LINEAR",
            str,
            "native",
            "the default of EngineArgs.cpu_linear, the CPU matmul of the linear layers: native "
            "(the C kernel on fp32 weights where the CPU has AVX-512 or AVX2 with FMA, else "
            "oneDNN), onednn (packed weights) or torch (F.linear); read once per engine",
            choices=("native", "onednn", "torch"),
        ),
        EnvVar(
            "TANDEM_DECODE_STACK",
            str,
            "c",
            "the default of EngineArgs.decode_stack, decode steps on the CPU: c (the whole "
            "layer stack in one C call, where the model allows: tandem explain says) or "
            "modules (layer by layer); read once per engine",
            choices=("c", "modules"),
        ),
        EnvVar(
            "TANDEM_CPU_MALLOC",
            str,
            "tuned",
            "glibc malloc in the process running the model: tuned (activations stay in the "
            "heap) or system (glibc's adaptive defaults)",
            choices=("tuned", "system"),
        ),
        EnvVar("TANDEM_LOG_LEVEL", str, "WARNING", "log level of the tandem loggers"),
        EnvVar(
            "TANDEM_ENGINE_READY_TIMEOUT",
            float,
            120.0,
            "seconds v1 waits for its child processes to become ready",
        ),
        EnvVar(
            "TANDEM_DIST_TIMEOUT",
            float,
            120.0,
            "seconds a tensor-parallel rank waits in the rendezvous or in one collective",
        ),
        EnvVar("TANDEM_DEBUG_CHECKS", _bool, False, "extra internal consistency checks (slow)"),
        EnvVar(
            "TANDEM_API_KEY",
            str,
            None,
            "the API key tandem serve asks of clients when no --api-key is given",
        ),
    )
}

__all__ = ["REGISTRY", "EnvVar", *REGISTRY]


def __getattr__(name: str) -> Any:
    var = REGISTRY.get(name)
    if var is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return var.read()


def __dir__() -> list[str]:
    return sorted([*globals(), *REGISTRY])
