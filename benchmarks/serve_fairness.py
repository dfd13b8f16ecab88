"""Fairness of ``tandem serve``: a small request's time while another client floods it.

    python benchmarks/serve_fairness.py [--model tiny|smollm2|DIR] [--engines v0 v1]
                                        [--prompts 1000] [--n 16] [--flood-tokens 16]
                                        [--probes 5] [--windows default 256 16000]
                                        [--flood-to-end]

For each engine it starts ``tandem serve`` as its own process with two API keys (two
clients) and limits raised to let one request of ``--prompts`` x ``--n`` sequences in
(16,000 by default). The probe is one small completion (a short prompt, 8 tokens, EOS
ignored). It is timed on the idle server first, then ``--probes`` times while the
flooding client's request runs, one after the other. ``--windows`` runs the server once
per engine window (``--engine-window``; ``default``: the engine's max_num_seqs); a window
as large as the flood lets everything into the engine at once (first come, first
served: the behaviour without admission). Prints idle, median and worst probe times
(and with ``--flood-to-end`` the flood's own time; else the server's shutdown ends the
flood after the probes); writes ``benchmarks/results/serve-fairness.json``.
Nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_load import RESULTS, free_port, start, stop

KEYS = ("flood-client", "probe-client")
PROBE = {"prompt": "The capital of France is", "max_tokens": 8, "ignore_eos": True}


def post(port: int, body: dict, key: str, timeout: float = 3600) -> tuple[int, float]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        json.dumps({"model": "bench", "temperature": 0, **body}).encode(),
        {"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    start_at = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            resp.read()
            status = resp.status
    except urllib.error.HTTPError as err:
        status = err.code
        print(f"  HTTP {status}: {err.read()[:300]!r}", file=sys.stderr)
    return status, time.perf_counter() - start_at


def gauge(port: int, name: str) -> float:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {KEYS[1]}"}
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def run(model: str, engine: str, args: argparse.Namespace, window: int | None) -> dict:
    total = args.prompts * args.n
    port = free_port()
    flags = ["--max-prompts", str(args.prompts), "--max-sequences", str(total)]
    flags += ["--max-waiting", str(total), "--quiet", "--max-model-len", "256"]
    for key in KEYS:
        flags += ["--api-key", key]
    if window is not None:
        flags += ["--engine-window", str(window)]
    proc = start(model, engine, port, flags)
    worker = threading.Thread()  # the flooding client, once it runs
    try:
        post(port, PROBE, KEYS[1])  # warm up
        idle = min(post(port, PROBE, KEYS[1])[1] for _ in range(3))
        flood = {
            "prompt": [f"Item {i}: the" for i in range(args.prompts)],
            "n": args.n,
            "max_tokens": args.flood_tokens,
            "ignore_eos": True,
            "temperature": 1.0,
            "seed": 1,
        }
        flooded: dict[str, float] = {}

        def flooding() -> None:
            status, took = post(port, flood, KEYS[0])
            flooded.update(status=status, seconds=took)

        worker = threading.Thread(target=flooding)
        worker.start()
        while gauge(port, "tandem_admission_engine_sequences") == 0 and worker.is_alive():
            time.sleep(0.05)
        time.sleep(1.0)  # the flood is inside the engine and its queue
        probes = []
        for _ in range(args.probes):
            if not worker.is_alive():
                break
            status, took = post(port, PROBE, KEYS[1])
            probes.append(took if status == 200 else float("nan"))
            time.sleep(0.5)
        if args.flood_to_end:
            worker.join()
    finally:
        stop(proc)  # a flood still running is ended by the server's shutdown
    if worker.ident is not None:
        worker.join(120)
    return {
        "engine": engine,
        "window": window or "default",
        "idle_s": round(idle, 4),
        "probes_s": [round(p, 4) for p in probes],
        "median_s": round(statistics.median(probes), 4) if probes else None,
        "worst_s": round(max(probes), 4) if probes else None,
        "flood_sequences": total,
        "flood_s": round(flooded["seconds"], 2) if args.flood_to_end else None,
        "flood_status": flooded.get("status") if args.flood_to_end else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--engines", nargs="+", default=["v1"], choices=("v0", "v1"))
    parser.add_argument("--prompts", type=int, default=1000)
    parser.add_argument("--n", type=int, default=16)
    parser.add_argument("--flood-tokens", type=int, default=16)
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument(
        "--flood-to-end",
        action="store_true",
        help="wait for the flood to finish (minutes) and report its time",
    )
    parser.add_argument(
        "--windows",
        nargs="+",
        default=["default"],
        help="engine windows to compare (default: the engine's max_num_seqs)",
    )
    args = parser.parse_args()
    rows = []
    for engine in args.engines:
        for raw in args.windows:
            window = None if raw == "default" else int(raw)
            row = run(args.model, engine, args, window)
            rows.append(row)
            print(
                f"{engine} window={row['window']}: probe idle {row['idle_s']:.3f} s, "
                f"under a {row['flood_sequences']}-sequence flood median {row['median_s']} s, "
                f"worst {row['worst_s']} s"
                + (f" (flood took {row['flood_s']} s)" if args.flood_to_end else ""),
                flush=True,
            )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "serve-fairness.json"
    out.write_text(json.dumps(rows, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
