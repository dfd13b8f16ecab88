"""The ``tandem`` command line's parser: its commands, flags and their checks."""

from __future__ import annotations

import argparse

from tandem.core.cli.cache_command import add_cache_command
from tandem.core.cli.cache_flags import add_cache_flags
from tandem.core.cli.chat import add_chat_command
from tandem.core.cli.flags import add_number
from tandem.core.cli.kernel_flags import add_kernel_flags
from tandem.core.cli.model_arg import (
    add_model_flag,
    add_model_positional,
    finish_generate,
    finish_serve,
)
from tandem.core.cli.parser import CommandParser, GuidingParser
from tandem.core.cli.sampling_flags import add_sampling_flags
from tandem.core.cli.server_flags import add_server_flags
from tandem.core.cli.spec_flags import add_spec_flags


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("tandem-core")
    except metadata.PackageNotFoundError:
        return "unknown"


def _engine_options(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--engine",
        choices=("v0", "v1"),
        default=None,
        help="engine to use (default: $TANDEM_ENGINE, else v1)",
    )
    cmd.add_argument(
        "--dtype",
        choices=("auto", "float32", "bfloat16", "float16"),
        default="auto",
        help="the weights' and activations' type (default: auto, the model's own on a GPU, "
        "float32 on the CPU)",
    )
    cmd.add_argument(
        "--quantization",
        choices=("int8", "gguf"),
        default=None,
        help="int8: the MLP layers, the attention output projection and the LM head in int8 "
        "(CPU, float32 models); gguf: a GGUF file's tensors kept as stored (F16, BF16, Q8_0, "
        "Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K; default: gguf for a .gguf file, else none)",
    )
    add_cache_flags(cmd)
    add_kernel_flags(cmd)
    _parallel_options(cmd)
    add_spec_flags(cmd)


def _parallel_options(cmd: argparse.ArgumentParser) -> None:
    add_number(
        cmd,
        "--tensor-parallel-size",
        int,
        "split each layer over N rank processes in one torch.distributed group "
        "(gloo on the CPU, nccl on CUDA; engine v1; default: 1)",
        default=1,
        metavar="N",
        lo=1,
    )
    add_number(
        cmd,
        "--data-parallel-size",
        int,
        "run N engine cores, each with the whole model and its own KV cache, behind "
        "one front door that sends each request to the one holding the fewest; a core "
        "that dies fails only its own requests (engine v1; default: 1)",
        default=1,
        metavar="N",
        lo=1,
    )
    cmd.add_argument(
        "--distributed-executor-backend",
        choices=("mp", "ray"),
        default="mp",
        help="how the tensor-parallel ranks run: mp (local processes, the default) or ray "
        "(Ray actors in a placement group, on the cluster ray.init finds, else a local "
        "one; pip install 'tandem-engine-v1[ray]')",
    )


def architectures_epilog() -> str:
    """What a model may be, listed from the registry of architectures (torch-free)."""
    from tandem.core.models import supported_architectures
    from tandem.core.models.architectures import GGUF_ARCHITECTURES

    gguf = ", ".join(sorted(GGUF_ARCHITECTURES))
    return (
        "A model directory may hold a checkpoint of any of these architectures (the "
        f"'architectures' entry of its config.json): {', '.join(supported_architectures())}. "
        f"A .gguf file may hold one of llama.cpp's architectures {gguf}. The README's "
        "Models section says what each one runs."
    )


def build_parser() -> GuidingParser:
    """The ``tandem`` parser; ``parser.commands`` maps each command to its own parser."""
    epilog = architectures_epilog()
    parser = GuidingParser(prog="tandem", description="Tandem LLM inference.", epilog=epilog)
    parser.add_argument("--version", action="version", version=f"tandem {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    sub.required = True
    gen = sub.add_parser(
        "generate",
        help="generate completions for prompts",
        description="Generate completions and print them (one prompt: as they are made). "
        "The model comes first or with --model: tandem generate tiny 'Hello' is tandem "
        "generate --model tiny 'Hello'.",
        epilog=epilog,
        usage="%(prog)s [options] [MODEL] PROMPT [PROMPT ...]",
    )
    gen.add_argument(
        "prompts",
        nargs="+",
        metavar="PROMPT",
        help="prompt text(s); a first one that names a model (a name, a directory with "
        "config.json, a .gguf file) and is followed by a prompt is the MODEL",
    )
    add_model_flag(gen)
    gen.finish = finish_generate
    _engine_options(gen)
    add_sampling_flags(gen)
    gen.add_argument(
        "--chat",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="--chat sends each prompt as a user message through the model's chat template, "
        "--no-chat as a plain completion (default: the chat template when the model has one)",
    )
    serve = sub.add_parser(
        "serve",
        help="serve an OpenAI-compatible HTTP API",
        description="Serve /v1/completions, /v1/chat/completions, /v1/models, /tokenize, "
        "/detokenize, /health and /metrics over HTTP. Requests enter the engine round-robin "
        "between clients (an API key, else an address), within the limits below. SIGTERM or "
        "Ctrl-C stops it: no new requests are taken, those in flight get --shutdown-timeout "
        "seconds to finish, then are aborted.",
        epilog=epilog,
        usage="%(prog)s [options] [MODEL]",
    )
    add_model_positional(serve)
    serve.finish = finish_serve
    _engine_options(serve)
    serve.add_argument(
        "--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1)"
    )
    add_number(
        serve,
        "--port",
        int,
        "the port to listen on; 0 takes a free one (default: 8000)",
        default=8000,
        lo=0,
        hi=65535,
    )
    serve.add_argument(
        "--served-model-name",
        nargs="+",
        default=None,
        metavar="NAME",
        help="the model ids clients may use; the first is announced in /v1/models (default: "
        "the name typed, then its aliases: 'smollm2' also answers to "
        "'SmolLM2-135M-Instruct'; a path: its directory or file name)",
    )
    add_number(
        serve,
        "--shutdown-timeout",
        float,
        "how long requests in flight may run on after SIGTERM or Ctrl-C (default: 10)",
        default=10.0,
        metavar="SECONDS",
        lo=0.0,
    )
    add_server_flags(serve)
    explain = sub.add_parser(
        "explain",
        help="print the execution plan a model runs with",
        description="Load the model as generate and serve would, with the same flags, and "
        "print its execution plan: the attention backend, the linear layers' kernel, whether "
        "decode steps run the layer stack in one C call (or why not), the form each weight "
        "is kept in and each layer's ops in order.",
        epilog=epilog,
        usage="%(prog)s [options] [MODEL]",
    )
    add_model_positional(explain)
    explain.finish = finish_serve
    _engine_options(explain)
    chat = add_chat_command(sub, _engine_options)
    cache = add_cache_command(sub)
    parser.commands = {
        "generate": gen,
        "serve": serve,
        "chat": chat,
        "cache": cache,
        "explain": explain,
    }
    return parser
