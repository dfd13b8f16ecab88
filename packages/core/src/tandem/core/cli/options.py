"""The ``tandem`` command line's parser: its commands, flags and their checks."""

from __future__ import annotations

import argparse
from typing import Any

from tandem.core.cli.cache_flags import add_cache_flags, cache_args
from tandem.core.cli.flags import number
from tandem.core.cli.server_flags import add_server_flags
from tandem.core.cli.spec_flags import add_spec_flags, spec_args
from tandem.core.named_models import DEFAULT, TINY

PARALLEL_DEFAULTS = {
    "tensor_parallel_size": 1,
    "data_parallel_size": 1,
    "distributed_executor_backend": "mp",
}


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("tandem-core")
    except metadata.PackageNotFoundError:
        return "unknown"


def _engine_options(cmd: argparse.ArgumentParser, model_positional: bool = False) -> None:
    help_text = (
        f"Hugging Face model directory, .gguf file, or a name: {DEFAULT!r} "
        f"(SmolLM2-135M-Instruct, the default) or {TINY!r} (the built-in tiny test model)"
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
    cmd.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto")
    cmd.add_argument(
        "--quantization",
        choices=("int8", "gguf"),
        default=None,
        help="int8: the MLP layers as int8 x int8 on the CPU (float32 models); gguf: a GGUF "
        "file's Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q4_K/Q5_K/Q6_K tensors kept as stored (default for a "
        ".gguf file, else none)",
    )
    add_cache_flags(cmd)
    _parallel_options(cmd)
    add_spec_flags(cmd)


def _parallel_options(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument(
        "--tensor-parallel-size",
        type=number(int, "--tensor-parallel-size", lo=1),
        default=1,
        metavar="N",
        help="split each layer over N rank processes in one torch.distributed group "
        "(gloo on the CPU, nccl on CUDA; engine v1; default: 1)",
    )
    cmd.add_argument(
        "--data-parallel-size",
        type=number(int, "--data-parallel-size", lo=1),
        default=1,
        metavar="N",
        help="run N engine cores, each with the whole model and its own KV cache, behind "
        "one front door that sends each request to the one holding the fewest; a core "
        "that dies fails only its own requests (engine v1; default: 1)",
    )
    cmd.add_argument(
        "--distributed-executor-backend",
        choices=("mp", "ray"),
        default="mp",
        help="how the tensor-parallel ranks run: mp (local processes, the default) or ray "
        "(Ray actors in a placement group, on the cluster ray.init finds, else a local "
        "one; pip install 'tandem-engine-v1[ray]')",
    )


def _sampling_options(gen: argparse.ArgumentParser) -> None:
    model_default = "default: the model's generation_config, else %s"
    gen.add_argument("--max-tokens", type=number(int, "--max-tokens", lo=1), default=32)
    gen.add_argument(
        "--temperature",
        type=number(float, "--temperature", lo=0.0),
        default=None,
        help="0 means greedy (" + model_default % "greedy" + ")",
    )
    gen.add_argument(
        "--top-p",
        type=number(float, "--top-p", lo=0.0, hi=1.0, lo_open=True),
        default=None,
        help=model_default % "1",
    )
    gen.add_argument(
        "--top-k",
        type=number(int, "--top-k", lo=0),
        default=None,
        help="0 turns top-k off (" + model_default % "off" + ")",
    )
    gen.add_argument("--min-p", type=number(float, "--min-p", lo=0.0, hi=1.0), default=None)
    gen.add_argument("--seed", type=number(int, "--seed"), default=None)
    gen.add_argument("--n", type=number(int, "--n", lo=1), default=1, help="completions per prompt")
    gen.add_argument(
        "--stop", action="append", default=None, metavar="TEXT", help="stop string (repeatable)"
    )
    gen.add_argument(
        "--logprobs",
        type=number(int, "--logprobs", lo=0),
        default=None,
        metavar="K",
        help="print each token's logprob and the top K alternatives",
    )
    gen.add_argument("--ignore-eos", action="store_true", help="keep going past EOS")


def architectures_epilog() -> str:
    """What a model may be, listed from the registry of architectures (torch-free)."""
    from tandem.core.gguf_checkpoint import ARCHS as GGUF_ARCHS
    from tandem.core.models import supported_architectures

    gguf = ", ".join(sorted(cls for cls, _, _ in GGUF_ARCHS.values()))
    return (
        "A model directory may hold a checkpoint of any of these architectures (the "
        f"'architectures' entry of its config.json): {', '.join(supported_architectures())}. "
        f"A .gguf file may hold one of: {gguf}. The README's Models section says what each "
        "one runs."
    )


def build_parser() -> argparse.ArgumentParser:
    epilog = architectures_epilog()
    parser = argparse.ArgumentParser(
        prog="tandem", description="Tandem LLM inference.", epilog=epilog
    )
    parser.add_argument("--version", action="version", version=f"tandem {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    gen = sub.add_parser(
        "generate",
        help="generate completions for prompts",
        description="Generate completions and print them (one prompt: as they are made).",
        epilog=epilog,
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
        description="Serve /v1/completions, /v1/chat/completions, /v1/models, /tokenize, "
        "/detokenize, /health and /metrics over HTTP. Requests enter the engine round-robin "
        "between clients (an API key, else an address), within the limits below. SIGTERM or "
        "Ctrl-C stops it: no new requests are taken, those in flight get --shutdown-timeout "
        "seconds to finish, then are aborted.",
        epilog=epilog,
    )
    _engine_options(serve, model_positional=True)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=number(int, "--port", lo=0, hi=65535), default=8000)
    serve.add_argument(
        "--served-model-name",
        nargs="+",
        default=None,
        metavar="NAME",
        help="the model ids clients may use; the first is announced (default: its name)",
    )
    serve.add_argument(
        "--shutdown-timeout",
        type=number(float, "--shutdown-timeout", lo=0.0),
        default=10.0,
        metavar="SECONDS",
        help="how long requests in flight may run on after SIGTERM or Ctrl-C (default: 10)",
    )
    add_server_flags(serve)
    return parser


def engine_args(args: argparse.Namespace, model: str) -> dict[str, Any]:
    """The ``LLM`` keyword arguments the flags ask for (``model`` already resolved)."""
    out: dict[str, Any] = {"dtype": args.dtype}
    if args.quantization is not None:
        out["quantization"] = args.quantization
    for name in ("tensor_parallel_size", "data_parallel_size", "distributed_executor_backend"):
        value = getattr(args, name)
        if value != PARALLEL_DEFAULTS[name]:  # left out: engine v0 takes the command too
            out[name] = value
    out.update(spec_args(args))
    out.update(cache_args(args))
    return out
