"""The ``tandem`` command line: ``tandem generate [options] PROMPT...``.

Without ``--model`` it runs on the built-in tiny model (made locally and cached on
first use), so a fresh install can generate text with no download.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

# the built-in model is trained this long on its corpus on first use (seconds on a CPU)
DEMO_TRAIN_STEPS = 600


def _number(
    kind: type, name: str, lo: float | None = None, hi: float | None = None, lo_open: bool = False
) -> Callable[[str], Any]:
    """An argparse ``type=`` that parses ``kind`` and checks its range, naming the flag."""

    def parse(raw: str) -> Any:
        try:
            value = kind(raw)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name} must be {'an integer' if kind is int else 'a number'}, got {raw!r}"
            ) from None
        too_low = lo is not None and (value <= lo if lo_open else value < lo)
        too_high = hi is not None and value > hi
        if too_low or too_high:
            left = "(" if lo_open else "["
            bounds = f"{left}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"
            raise argparse.ArgumentTypeError(f"{name} must be in {bounds}, got {raw}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tandem", description="Tandem LLM inference.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    gen = sub.add_parser(
        "generate",
        help="generate completions for prompts",
        description="Generate completions and print them.",
    )
    gen.add_argument("prompts", nargs="+", metavar="PROMPT", help="prompt text(s)")
    gen.add_argument(
        "--model",
        default=None,
        help="Hugging Face model directory (default: the built-in tiny model)",
    )
    gen.add_argument(
        "--engine",
        choices=("v0", "v1"),
        default=None,
        help="engine to use (default: $TANDEM_ENGINE, else v1 when installed)",
    )
    gen.add_argument("--max-tokens", type=_number(int, "--max-tokens", lo=1), default=32)
    gen.add_argument(
        "--temperature",
        type=_number(float, "--temperature", lo=0.0),
        default=0.0,
        help="0 means greedy (the default)",
    )
    gen.add_argument(
        "--top-p", type=_number(float, "--top-p", lo=0.0, hi=1.0, lo_open=True), default=1.0
    )
    gen.add_argument(
        "--top-k", type=_number(int, "--top-k", lo=0), default=0, help="0 turns top-k off"
    )
    gen.add_argument("--seed", type=_number(int, "--seed"), default=None)
    gen.add_argument(
        "--n", type=_number(int, "--n", lo=1), default=1, help="completions per prompt"
    )
    return parser


def _default_model() -> str:
    from tandem.core.testing import make_model

    return str(make_model(size="tiny", train_steps=DEMO_TRAIN_STEPS))


def _generate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tandem.core.llm import LLM
    from tandem.core.sampling_params import SamplingParams

    try:
        params = SamplingParams(
            n=args.n,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            seed=args.seed,
            max_tokens=args.max_tokens,
        )
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    model = args.model if args.model is not None else _default_model()
    try:
        llm = LLM(model=model, engine=args.engine)
    except (TypeError, ValueError) as exc:
        print(f"tandem generate: error: {exc}", file=sys.stderr)
        return 2
    with llm:
        try:
            outputs = llm.generate(list(args.prompts), params, use_tqdm=False)
        except (TypeError, ValueError) as exc:
            print(f"tandem generate: error: {exc}", file=sys.stderr)
            return 2
    for out in outputs:
        print(f"prompt: {out.prompt!r}")
        for comp in out.outputs:
            label = f"[{comp.index}] " if len(out.outputs) > 1 else ""
            print(f"  {label}{comp.text!r} (finish_reason={comp.finish_reason})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "generate":
        return _generate(args, parser)
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
