"""``tandem generate``: completions printed; one prompt's text as it is made.

Each prompt goes to the model as a user message through its chat template when it has
one (an instruct model answers its prompt, as ``vllm chat`` and ``llama-cli`` do), as a
plain completion otherwise or under ``--no-chat``.
With one prompt and one completion (``--n 1``, no ``--logprobs``) the text is printed as
each step makes it, so Ctrl-C keeps what was already generated on the screen. Otherwise
every completion is printed when all are done. A prompt that cannot fit the context is
refused before the engine loads (:mod:`tandem.core.cli.prompt_fit`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tandem.core.cli.engine_kwargs import engine_args
from tandem.core.cli.prompt_fit import check_prompts_fit, shown

ERROR = "tandem generate: error:"


def open_llm(args: argparse.Namespace) -> tuple[Any, bool]:
    """The LLM the options ask for, once its prompts are known to fit, and whether the
    prompts go through the chat template; its construction reports its progress."""
    from tandem.core.catalog.named_models import resolve_model
    from tandem.core.cli.engine_label import chosen_engine
    from tandem.core.entrypoints.llm import LLM
    from tandem.core.progress import say

    model = resolve_model(args.model)
    chat = check_prompts_fit(model, args.prompts, args.max_model_len, args.chat)
    engine, label = chosen_engine(args.engine)
    say(f"loading {model} ({label})")
    return LLM(model=model, engine=engine, **engine_args(args)), chat


def sampling_params(args: argparse.Namespace, defaults: Any) -> Any:
    """The flags over the model's defaults (a flag left out keeps the model's value)."""
    given = {
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "min_p": args.min_p,
    }
    return defaults.replace(
        **{k: v for k, v in given.items() if v is not None},
        n=args.n,
        seed=args.seed,
        max_tokens=args.max_tokens,
        stop=args.stop,
        logprobs=args.logprobs,
        ignore_eos=args.ignore_eos,
    )


def heading(prompt: str, chat: bool) -> str:
    """The line printed above a prompt's completions."""
    return f"prompt: {shown(prompt)}" + (" (chat)" if chat else "")


def print_output(out: Any, label: str, logprobs: bool) -> None:
    print(label)
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


def _stream(llm: Any, prompt: Any, params: Any, label: str) -> None:
    """Print one completion as it is made: the prompt line, the text, its finish reason."""
    print(label, flush=True)
    reason = None
    try:
        for out in llm.stream(prompt, params):
            comp = out.outputs[0]
            sys.stdout.write(comp.text)
            sys.stdout.flush()
            reason = comp.finish_reason
    finally:
        sys.stdout.write("\n" if reason is None else f"\n(finish_reason={reason})\n")
        sys.stdout.flush()


def run_generate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        llm, chat = open_llm(args)
    except (TypeError, ValueError, RuntimeError) as exc:
        print(f"{ERROR} {exc}", file=sys.stderr)
        return 2
    with llm:
        try:
            params = sampling_params(args, llm.default_sampling_params())
        except (TypeError, ValueError) as exc:
            parser.error(str(exc))
        prompts: list[Any] = (
            llm.chat_prompts([[{"role": "user", "content": p}] for p in args.prompts])
            if chat
            else list(args.prompts)
        )
        labels = [heading(p, chat) for p in args.prompts]
        try:
            if len(prompts) == 1 and params.n == 1 and args.logprobs is None:
                _stream(llm, prompts[0], params, labels[0])
                return 0
            outputs = llm.generate(prompts, params, use_tqdm=False)
        except (TypeError, ValueError) as exc:
            print(f"{ERROR} {exc}", file=sys.stderr)
            return 2
    for out, label in zip(outputs, labels):
        print_output(out, label, args.logprobs is not None)
    return 0
