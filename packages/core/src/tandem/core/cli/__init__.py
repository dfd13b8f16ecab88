"""The ``tandem`` command line: ``tandem generate [MODEL] PROMPT...`` and ``tandem serve
[MODEL]`` (the model given either way or with ``--model``: :mod:`tandem.core.cli.model_arg`),
``tandem chat [MODEL]`` (:mod:`tandem.core.cli.chat`) and ``tandem cache list|size|clear``
(:mod:`tandem.core.cli.cache_command`).

Without a model both run SmolLM2-135M-Instruct, a real trained model (fetched once, with
progress shown); ``tiny`` runs the built-in tiny test model instead (the names of
:mod:`tandem.core.catalog.named_models`, the same as ``LLM("tiny")``). Flags are whole names, a
wrong one answered with the nearest (:mod:`tandem.core.cli.parser`). Ctrl-C ends
``generate`` with one line and exit code 130, its engine shut down; ``serve`` stops as on
SIGTERM (:mod:`tandem.core.cli.serve`).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
from collections.abc import Sequence

from tandem.core.cli.options import build_parser

INTERRUPTED = 130  # the exit code after Ctrl-C, as a shell reports SIGINT

__all__ = ["INTERRUPTED", "build_parser", "main", "run"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from tandem.core.progress import to_stderr

    try:
        with to_stderr():
            if args.command == "generate":
                from tandem.core.cli.generate import run_generate

                return run_generate(args, parser.commands["generate"])
            if args.command == "serve":
                from tandem.core.cli.serve import run_serve

                return run_serve(args)
            if args.command == "explain":
                from tandem.core.cli.explain import run_explain

                return run_explain(args)
            if args.command == "chat":
                from tandem.core.cli.chat import run_chat

                return run_chat(args, parser.commands["chat"])
            if args.command == "cache":
                from tandem.core.cli.cache_command import run_cache

                return run_cache(args)
    except KeyboardInterrupt:
        # decided: exit 130. A later Ctrl-C (or one still in flight to this process) must
        # not cut the engine's cleanup at exit short or turn the exit into a signal death.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(f"tandem {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    parser.error(f"unknown command {args.command!r}")
    return 2


def run() -> None:
    """The ``tandem`` program: :func:`main`, then its exit code.

    An interrupt that passed through code run by a C extension leaves CPython marked as
    "ended by an unhandled KeyboardInterrupt" even though :func:`main` handled it, and
    the interpreter would then end the process by SIGINT (-2) instead of 130. So after
    an interrupt the exit handlers run here and the process ends with 130 itself. After
    a run that finished, Ctrl-C is ignored for the last moments of the interpreter.
    """
    code = main()
    if code == INTERRUPTED:
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()
        os._exit(INTERRUPTED)
    # the work is done and its engine shut down: a Ctrl-C during the interpreter's own
    # teardown would only print a traceback from a finalizer and end with 0 anyway
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(code)


if __name__ == "__main__":
    run()
