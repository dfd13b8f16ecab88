"""What ``LLM`` and ``AsyncLLM`` share: an engine opened from a user's arguments, and the
input processor that checks every request before the engine sees it.

The engine is chosen here (``engine`` if given, else ``TANDEM_ENGINE``, else the
default) and found through the ``tandem.engines`` entry points, so nothing about the
choice is frozen at import time. The front door, not the engine, owns the
:class:`~tandem.core.inputs.processor.InputProcessor`: an engine takes only checked requests
(:class:`~tandem.core.inputs.engine_request.EngineRequest`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tandem.core.catalog.named_models import resolve_model, served_names
from tandem.core.engine.protocol import Engine, load_engine_class, resolve_engine_name
from tandem.core.inputs.processor import InputProcessor
from tandem.core.validate import RequestTypeError

if TYPE_CHECKING:
    from tandem.core.config.engine_args import EngineArgs


@dataclass(slots=True)
class OpenedEngine:
    """An engine and what its front door knows about it."""

    name: str  # "v0", "v1", ...
    engine_class: type[Engine]
    engine_args: EngineArgs
    model_names: tuple[str, ...]  # the ids a server of this model answers to, first announced
    engine: Engine
    inputs: InputProcessor  # checks and tokenizes this engine's requests


def open_engine(
    model: str | os.PathLike[str], engine: str | None = None, **engine_args: Any
) -> OpenedEngine:
    """Resolve ``model``, check the engine arguments (once) and build the engine.

    ``model`` is a Hugging Face directory, a ``.gguf`` file or a name that
    :mod:`tandem.core.catalog.named_models` resolves; anything else is an error naming it.
    """
    from tandem.core.config.engine_args import EngineArgs

    if not isinstance(model, (str, os.PathLike)):
        raise RequestTypeError(
            "model",
            f"model must be a directory path, a .gguf file or a model name (str), "
            f"got {type(model).__name__}",
        )
    name = resolve_engine_name(engine)
    engine_class = load_engine_class(name)
    path = resolve_model(model)
    names = served_names(model, path)
    args = EngineArgs.from_kwargs(path, **engine_args)
    built = engine_class.from_engine_args(args)
    try:
        # made after the engine: the context it settled on (a KV cache that holds less
        # than the model's own) is the one prompts are checked against
        inputs = InputProcessor.for_config(built.config, built.tokenizer)
    except BaseException:
        built.shutdown()
        raise
    return OpenedEngine(name, engine_class, args, names, built, inputs)
