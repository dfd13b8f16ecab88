"""``tandem chat [MODEL]``: a conversation with the model, one line of input per message.

Each line read from stdin is a user message; the answer is printed as it is made, and the
conversation so far goes back to the model with the next message (through its chat
template). End of input (Ctrl-D) ends the chat; Ctrl-C ends it too, as ``tandem generate``
does (exit code 130, the engine shut down). A message that makes the conversation too long
for the context is refused with the reason, and the chat goes on without it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from tandem.core.cli.model_arg import add_model_positional, finish_serve
from tandem.core.cli.sampling_flags import add_sampling_flags

ERROR = "tandem chat: error:"
MAX_TOKENS = 256  # an answer's default length: a chat answers in sentences, not words


def add_chat_command(
    sub: argparse._SubParsersAction, engine_options: Callable[[argparse.ArgumentParser], None]
) -> argparse.ArgumentParser:
    """The ``chat`` subcommand's parser (``engine_options`` adds the engine flags)."""
    cmd = sub.add_parser(
        "chat",
        help="talk with the model, one line per message",
        description="Talk with the model through its chat template: each line typed is a "
        "message, the answer is printed as it is made, and the model sees the whole "
        "conversation. Ctrl-D (end of input) or Ctrl-C ends it.",
        usage="%(prog)s [options] [MODEL]",
    )
    add_model_positional(cmd)
    cmd.finish = finish_serve
    engine_options(cmd)
    add_sampling_flags(cmd, max_tokens=MAX_TOKENS, several=False)
    cmd.add_argument(
        "--system",
        default=None,
        metavar="TEXT",
        help="a system message that opens the conversation (default: none; the model's "
        "template may add its own)",
    )
    return cmd


def params_of(args: argparse.Namespace, defaults: Any) -> Any:
    """The sampling flags over the model's defaults (a flag left out keeps its value)."""
    given = {k: getattr(args, k) for k in ("temperature", "top_p", "top_k", "min_p", "seed")}
    return defaults.replace(
        **{k: v for k, v in given.items() if v is not None},
        max_tokens=args.max_tokens,
        stop=args.stop,
        ignore_eos=args.ignore_eos,
    )


def _answer(llm: Any, prompt: Any, params: Any) -> str:
    """Stream one answer to stdout; its whole text."""
    parts: list[str] = []
    for out in llm.stream(prompt, params):
        text = out.outputs[0].text
        parts.append(text)
        sys.stdout.write(text)
        sys.stdout.flush()
    sys.stdout.write("\n")
    sys.stdout.flush()
    return "".join(parts)


def run_chat(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from tandem.core.catalog.named_models import resolve_model
    from tandem.core.cli.engine_kwargs import engine_args
    from tandem.core.cli.engine_label import chosen_engine
    from tandem.core.entrypoints.llm import LLM
    from tandem.core.progress import say

    try:
        model = resolve_model(args.model)
        engine, label = chosen_engine(args.engine)
        say(f"loading {model} ({label})")
        llm = LLM(model=model, engine=engine, **engine_args(args))
    except (TypeError, ValueError, RuntimeError) as exc:
        print(f"{ERROR} {exc}", file=sys.stderr)
        return 2
    with llm:
        if not llm.get_tokenizer().has_chat_template:
            print(
                f"{ERROR} {model} has no chat template; send it plain prompts with "
                "tandem generate --no-chat",
                file=sys.stderr,
            )
            return 2
        try:
            params = params_of(args, llm.default_sampling_params())
        except (TypeError, ValueError) as exc:
            parser.error(str(exc))
        messages: list[dict[str, str]] = []
        if args.system is not None:
            messages.append({"role": "system", "content": args.system})
        say("type a message and Enter; Ctrl-D or Ctrl-C ends the chat")
        ask = "> " if sys.stdin.isatty() else ""
        while True:
            try:
                line = input(ask)
            except EOFError:
                return 0
            if not line.strip():
                continue
            turn = [*messages, {"role": "user", "content": line}]
            try:
                text = _answer(llm, llm.chat_prompts(turn)[0], params)
            except (TypeError, ValueError) as exc:
                print(f"{ERROR} {exc}", file=sys.stderr)
                continue
            messages = [*turn, {"role": "assistant", "content": text}]
