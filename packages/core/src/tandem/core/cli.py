"""The ``tandem`` command line: ``tandem generate [options] PROMPT...`` and ``tandem serve``.

Without ``--model`` both run SmolLM2-135M-Instruct, a real trained model
(:mod:`tandem.core.default_model`: fetched and converted once, with progress shown);
``--model tiny`` runs the built-in tiny test model instead. Ctrl-C ends either with one
line and exit code 130, its engine shut down.
"""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

INTERRUPTED = 130  # the exit code after Ctrl-C, as a shell reports SIGINT

# the built-in model is trained this long on its corpus on first use (seconds on a CPU)
DEMO_TRAIN_STEPS = 600
TINY = "tiny"


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


def _engine_options(cmd: argparse.ArgumentParser, model_positional: bool = False) -> None:
    help_text = (
        "Hugging Face model directory or .gguf file; 'tiny' for the built-in test model "
        "(default: SmolLM2-135M-Instruct)"
    )
    if model_positional:
        cmd.add_argument("model", nargs="?", default=None, metavar="MODEL", help=help_text)
    else:
        cmd.add_argument("--model", default=None, help=help_text)
    cmd.add_argument(
        "--engine",
        choices=("v0", "v1"),
        default=None,
        help="engine to use (default: $TANDEM_ENGINE, else v1)",
    )
    cmd.add_argument(
        "--max-model-len",
        type=_number(int, "--max-model-len", lo=2),
        default=None,
        help="longest prompt + completion (default: the model's, at most 4096)",
    )
    cmd.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto")
    cmd.add_argument(
        "--quantization",
        choices=("int8",),
        default=None,
        help="int8: the MLP layers as int8 x int8 on the CPU (float32 models; default: none)",
    )


def _sampling_options(gen: argparse.ArgumentParser) -> None:
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
    gen.add_argument("--min-p", type=_number(float, "--min-p", lo=0.0, hi=1.0), default=0.0)
    gen.add_argument("--seed", type=_number(int, "--seed"), default=None)
    gen.add_argument(
        "--n", type=_number(int, "--n", lo=1), default=1, help="completions per prompt"
    )
    gen.add_argument(
        "--stop", action="append", default=None, metavar="TEXT", help="stop string (repeatable)"
    )
    gen.add_argument(
        "--logprobs",
        type=_number(int, "--logprobs", lo=0),
        default=None,
        metavar="K",
        help="print each token's logprob and the top K alternatives",
    )
    gen.add_argument("--ignore-eos", action="store_true", help="keep going past EOS")


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
    _engine_options(gen)
    _sampling_options(gen)
    gen.add_argument(
        "--chat",
        action="store_true",
        help="send each prompt as a user message through the model's chat template",
    )
    serve = sub.add_parser(
        "serve",
        help="serve an OpenAI-compatible HTTP API",
        description="Serve /v1/completions, /v1/chat/completions, /v1/models, /health and "
        "/metrics over HTTP.",
    )
    _engine_options(serve, model_positional=True)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_number(int, "--port", lo=0, hi=65535), default=8000)
    serve.add_argument(
        "--served-model-name", default=None, help="the model id clients use (default: its name)"
    )
    return parser


def resolve_model(name: str | None) -> str:
    """The model directory (or file) a ``--model`` value names."""
    if name == TINY:
        from tandem.core.progress import say
        from tandem.core.testing import make_model

        say("preparing the built-in tiny model (trained once, about 20 s, then cached)")
        return str(make_model(size="tiny", train_steps=DEMO_TRAIN_STEPS))
    if name is not None:
        return name
    from tandem.core.default_model import default_model
    from tandem.core.progress import say

    return str(default_model(say))


def engine_args(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"dtype": args.dtype}
    if args.quantization is not None:
        out["quantization"] = args.quantization
    if args.max_model_len is not None:
        out["max_model_len"] = args.max_model_len
    return out


def open_llm(args: argparse.Namespace) -> Any:
    """The LLM the options ask for; its construction reports its progress."""
    from tandem.core.llm import LLM
    from tandem.core.progress import say

    model = resolve_model(args.model)
    kwargs = engine_args(args)
    if args.max_model_len is None:
        kwargs["max_model_len"] = _default_len(model)
    say(f"loading {model} ({args.engine or 'default'} engine)")
    return LLM(model=model, engine=args.engine, **kwargs)


def _default_len(model: str) -> int | None:
    """Cap the model's length at 4096 so its KV cache stays small on a laptop."""
    from tandem.core.config import load_model_config

    try:
        limit = load_model_config(model).max_model_len
    except (OSError, ValueError):
        return None  # LLM() will say what is wrong
    return min(limit, 4096)


def _params(args: argparse.Namespace) -> Any:
    from tandem.core.sampling_params import SamplingParams

    return SamplingParams(
        n=args.n,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        min_p=args.min_p,
        seed=args.seed,
        max_tokens=args.max_tokens,
        stop=args.stop,
        logprobs=args.logprobs,
        ignore_eos=args.ignore_eos,
    )


def _print(out: Any, logprobs: bool) -> None:
    print(f"prompt: {out.prompt!r}" if out.prompt is not None else "prompt: (chat)")
    for comp in out.outputs:
        label = f"[{comp.index}] " if len(out.outputs) > 1 else ""
        print(f"  {label}{comp.text!r} (finish_reason={comp.finish_reason})")
        if logprobs and comp.logprobs:
            for tok, entry in zip(comp.token_ids, comp.logprobs):
                chosen = entry[tok]
                alts = ", ".join(
                    f"{lp.decoded_token!r} {lp.logprob:.3f}" for t, lp in entry.items() if t != tok
                )
                print(f"    {chosen.decoded_token!r} {chosen.logprob:.3f}  [{alts}]")


def _generate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        params = _params(args)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    try:
        llm = open_llm(args)
    except (TypeError, ValueError, RuntimeError) as exc:
        print(f"tandem generate: error: {exc}", file=sys.stderr)
        return 2
    with llm:
        try:
            if args.chat:
                convs = [[{"role": "user", "content": p}] for p in args.prompts]
                outputs = llm.chat(convs, params, use_tqdm=False)
            else:
                outputs = llm.generate(list(args.prompts), params, use_tqdm=False)
        except (TypeError, ValueError) as exc:
            print(f"tandem generate: error: {exc}", file=sys.stderr)
            return 2
    for out in outputs:
        _print(out, args.logprobs is not None)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from tandem.core.progress import to_stderr

    try:
        with to_stderr():
            if args.command == "generate":
                return _generate(args, parser)
            if args.command == "serve":
                from tandem.core.server import serve_from_cli

                return serve_from_cli(args)
    except KeyboardInterrupt:
        # decided: exit 130. A later Ctrl-C (or one still in flight to this process) must
        # not cut the engine's cleanup at exit short or turn the exit into a signal death.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print("tandem: interrupted", file=sys.stderr)
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
