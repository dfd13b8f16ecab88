"""Driving an engine directly, as the front door does: check, then ``engine.add``.

Engines take only checked requests (:class:`~tandem.core.inputs.engine_request.EngineRequest`).
Tests and benchmarks that step an engine themselves get the engine's input processor
here: one per engine, so unseeded requests draw the same seeds, in arrival order, as
they would through ``LLM``.
"""

from __future__ import annotations

import weakref
from typing import Any

from tandem.core.inputs.processor import InputProcessor

_PROCESSORS: weakref.WeakKeyDictionary[Any, InputProcessor] = weakref.WeakKeyDictionary()


def inputs_of(engine: Any) -> InputProcessor:
    """The input processor of ``engine`` (made on first use, from its config)."""
    inputs = _PROCESSORS.get(engine)
    if inputs is None:
        inputs = _PROCESSORS[engine] = InputProcessor.for_config(engine.config, engine.tokenizer)
    return inputs


def add_request(engine: Any, request_id: Any, prompt: Any, params: Any = None) -> None:
    """Check ``prompt`` and ``params`` (the model's defaults when None) and queue them on
    ``engine``; bad input raises the front door's error and queues nothing."""
    engine.add(inputs_of(engine).process(request_id, prompt, params))
