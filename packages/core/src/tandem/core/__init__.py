"""Tandem core: config, env vars, sampling params, outputs, tokenizer, models, front door.

The public names below are imported on first use, so ``import tandem.core`` stays cheap
and never decides anything (such as the engine) at import time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "LLM": "tandem.core.entrypoints.llm",
    "AsyncLLM": "tandem.core.entrypoints.async_llm",
    "SamplingParams": "tandem.core.inputs.sampling_params",
    "StructuredOutputsParams": "tandem.core.structured",
    "RequestOutput": "tandem.core.outputs.request_output",
    "CompletionOutput": "tandem.core.outputs.request_output",
    "Logprob": "tandem.core.outputs.request_output",
    "EngineArgs": "tandem.core.config.engine_args",
    "EngineConfig": "tandem.core.config.engine",
    "ModelConfig": "tandem.core.config.model",
    "env_cache": "tandem.core.env_cache",
    "installed_engines": "tandem.core.engine.protocol",
}

__all__ = [
    "LLM",
    "AsyncLLM",
    "CompletionOutput",
    "EngineArgs",
    "EngineConfig",
    "Logprob",
    "ModelConfig",
    "RequestOutput",
    "SamplingParams",
    "StructuredOutputsParams",
    "env_cache",
    "installed_engines",
]

if TYPE_CHECKING:
    from tandem.core.config.engine import EngineConfig
    from tandem.core.config.engine_args import EngineArgs
    from tandem.core.config.model import ModelConfig
    from tandem.core.engine.protocol import installed_engines
    from tandem.core.entrypoints.async_llm import AsyncLLM
    from tandem.core.entrypoints.llm import LLM
    from tandem.core.env_cache import env_cache
    from tandem.core.inputs.sampling_params import SamplingParams
    from tandem.core.outputs.request_output import CompletionOutput, Logprob, RequestOutput
    from tandem.core.structured import StructuredOutputsParams


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tandem.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
