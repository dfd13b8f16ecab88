"""``tandem explain [MODEL]``: load the model as ``generate`` would and print its
execution plan (:mod:`tandem.core.models.plan`): the attention backend, the linear
kernel, whether decode steps run in one C call (or why not), each weight's form and
each layer's ops in order."""

from __future__ import annotations

import argparse

from tandem.core.cli.engine_kwargs import engine_args


def run_explain(args: argparse.Namespace) -> int:
    from tandem.core.catalog.named_models import resolve_model
    from tandem.core.entrypoints.llm import LLM
    from tandem.core.progress import say

    model = resolve_model(args.model)
    say(f"loading {model}")
    llm = LLM(model=model, engine=args.engine, **engine_args(args))
    try:
        print(llm.engine.plan)
    finally:
        llm.shutdown()
    return 0
