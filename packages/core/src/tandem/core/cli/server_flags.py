"""The flags of ``tandem serve`` that guard the server: keys, limits, timeouts, manners."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from tandem.core.cli.flags import add_number


def name_list(flag: str) -> Callable[[str], tuple[str, ...]]:
    """An argparse ``type=`` for a list of names: a JSON list (vLLM's form,
    ``'["https://a.example"]'``) or comma-separated (``https://a.example,https://b.example``)."""

    def parse(raw: str) -> tuple[str, ...]:
        text = raw.strip()
        if text.startswith("["):
            try:
                values = json.loads(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{flag}: not a JSON list: {raw!r}") from None
            if not all(isinstance(v, str) for v in values):
                raise argparse.ArgumentTypeError(f"{flag}: a JSON list of strings, got {raw!r}")
        else:
            values = text.split(",")
        names = tuple(v.strip() for v in values)
        if not names or not all(names):
            raise argparse.ArgumentTypeError(f"{flag}: an empty name in {raw!r}")
        return names

    return parse


def add_server_flags(serve: argparse.ArgumentParser) -> None:
    """The flags of a server that guards itself: keys, limits, timeouts, manners."""
    from tandem.core.server.config import ServerConfig
    from tandem.core.server.tool_parsers import PARSERS

    d = ServerConfig(model_names=("-",))
    serve.add_argument(
        "--api-key",
        action="append",
        default=None,
        metavar="KEY",
        help="require 'Authorization: Bearer KEY' on /v1/*, /tokenize, /detokenize and "
        "/metrics (repeatable; default: $TANDEM_API_KEY, else no key)",
    )
    limits = [
        ("--max-body-bytes", d.max_body_bytes, "largest request body (a 413 past it)"),
        ("--max-prompts", d.max_prompts, "prompts in one request"),
        ("--max-sequences", d.max_sequences, "prompts x n in one request"),
        ("--max-waiting", d.max_waiting, "sequences waiting for the engine (a 429 past it)"),
    ]
    for flag, default, what in limits:
        add_number(serve, flag, int, f"{what} (default: {default})", default, "N", lo=1)
    add_number(
        serve,
        "--engine-window",
        int,
        "sequences inside the engine at once, let in round-robin between clients "
        "(default: 64, at most the engine's max_num_seqs; larger: more throughput for one "
        "client, a longer wait for the others)",
        metavar="N",
        lo=1,
    )
    add_number(
        serve,
        "--timeout-keep-alive",
        int,
        "close an idle connection after this long (default: 5)",
        default=5,
        metavar="SECONDS",
        lo=1,
    )
    add_number(
        serve,
        "--timeout-body",
        float,
        f"a 408 when a body stalls this long (default: {d.body_timeout:g})",
        default=d.body_timeout,
        metavar="SECONDS",
        lo=0.0,
        lo_open=True,
    )
    serve.add_argument(
        "--strict-fields",
        action="store_true",
        help="refuse a body with a field the server does not know (400) instead of ignoring it",
    )
    serve.add_argument(
        "--tool-call-parser",
        choices=sorted(PARSERS),
        default=d.tool_call_parser,
        help="how tool calls are read from the model's text under tool_choice auto "
        f"(default: {d.tool_call_parser}: <tool_call>{{...}}</tool_call>)",
    )
    serve.add_argument("--quiet", action="store_true", help="no access log line per request")
    add_cors_flags(serve, d)


def add_cors_flags(serve: argparse.ArgumentParser, d: Any) -> None:
    """vLLM's CORS flags; CORS stays off (browsers refuse cross-origin reads, and a
    preflight is a 405) unless ``--allowed-origins`` is given."""
    serve.add_argument(
        "--allowed-origins",
        type=name_list("--allowed-origins"),
        default=(),
        metavar="ORIGINS",
        help="web origins whose pages may call this server from a browser (CORS), as a JSON "
        "list or comma-separated, '*' for any (default: none, CORS off)",
    )
    for flag, what in (("--allowed-methods", "methods"), ("--allowed-headers", "request headers")):
        serve.add_argument(
            flag,
            type=name_list(flag),
            default=getattr(d, flag[2:].replace("-", "_")),
            metavar="NAMES",
            help=f"with --allowed-origins: the {what} a cross-origin request may use (default: *)",
        )
    serve.add_argument(
        "--allow-credentials",
        action="store_true",
        help="with --allowed-origins: let browsers send cookies and credentials cross-origin "
        "(not with '*')",
    )
