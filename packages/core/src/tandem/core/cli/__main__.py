"""``python -m tandem.core.cli``: the ``tandem`` program."""

from tandem.core.cli import run

run()
