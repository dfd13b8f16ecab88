"""Which engine a command runs, and why, for its "loading ..." line."""

from __future__ import annotations


def chosen_engine(flag: str | None) -> tuple[str, str]:
    """The engine ``--engine`` (``flag``), ``$TANDEM_ENGINE`` or the default picks, and
    the words that say which it is: ``("v1", "engine v1, the default")``."""
    from tandem.core import envs
    from tandem.core.engine.protocol import resolve_engine_name

    name = resolve_engine_name(flag)
    if flag is not None:
        why = "--engine"
    elif envs.TANDEM_ENGINE:
        why = "from $TANDEM_ENGINE"
    else:
        why = "the default"
    return name, f"engine {name}, {why}"
