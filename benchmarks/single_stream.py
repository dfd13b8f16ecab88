"""One stream (batch 1): decode tok/s, time to first token, bandwidth floor, the step apart.

    python benchmarks/single_stream.py
        [--model smollm2|tiny[-ARCH]|SHAPE[:FMT,...]|FILE.gguf|DIR ...]
        [--threads 2] [--rounds 3] [--repeats 2] [--new-tokens 128] [--quant fp32 int8]
        [--engines v0 v1] [--runners NAME ...] [--skip NAME ...] [--baseline REF]
        [--llama-cpp-venv DIR [--formats f32 q8_0 q4_1 q4_k_m] [--models-dir DIR]]
        [--max-model-len N] [--decode-only] [--decode-stack c modules]

One chat prompt, greedy, ``--new-tokens`` tokens with EOS ignored, per model
(``stream_models.py``): SmolLM2 (the shipped file), the tiny test model, a random-init
checkpoint in a real model's shape (``gguf_models.SHAPES``: ``llama-1b``,
``gemma3-270m``, ``qwen3-0.6b``, and Llama in the last two's sizes, ``llama-270m`` and
``llama-0.6b``) or one GGUF file. Runners, each in a fresh process: the
tandem engines (``tandem v0``, ``tandem v1``) per ``--quant`` on the float checkpoint,
transformers ``generate`` and, only where ``llama_cpp`` is importable, llama.cpp on the
model's GGUF file (this script never builds it). With ``--llama-cpp-venv`` (made by
``llama_cpp_venv.sh``), each of ``--formats`` is a GGUF file of the same weights, made
there by llama.cpp's converter and quantizer (``gguf_files.py``, ``gguf_models.py``),
that llama.cpp, in that venv, and the tandem engines, keeping it as stored, both run. A
``.gguf`` model runs llama.cpp and the tandem engines on that file only (its own
tokenizer and config: any architecture tandem reads); a checkpoint directory, the tandem
engines and transformers on it. Rounds interleave the runners and
models so a slow spell of the shared machine falls on all of them; every timed run
counts, and each model's table shows the best, the median and the spread (min..max) of
decode tok/s (first token to last), the median time to first token and the median
whole-answer tok/s, the median over llama.cpp's at the same precision (fp32 and
transformers against F32, int8 against Q8_0, a GGUF file against the same file), the
resident size of each runner's process tree once its timed runs are done, and the
path each tandem runner's decode steps took (``c``: the whole layer stack in one C call;
``modules``: layer by layer), with each one's execution plan (``engine.plan``) below.
``--decode-stack c modules`` runs each tandem runner twice: as the engine chooses, and
with ``decode_stack="modules"`` (its name ends in ``nostack``), the pair showing what
the one-call C stack gains on each model.

A decode step streams every weight once, so its floor is the weight bytes read per token
(linear layers and the logits; one embedding row) over the memory bandwidth, measured
in the same run (the best of large torch reads, before and after the runners). Each
runner shows its fraction of the floor of its precision.

The breakdown (ms per decode token) times one more run of each tandem runner with its parts
wrapped: scheduler, model forward, logits, sampler, detokenizer and the rest of the
step; v1's parts run with its in-process client there, and ``processes + IPC`` is what
the multi-process engine's decode token costs beyond that in-process step.
``--decode-only`` times the streamed runs alone (no final-only answers, no breakdown).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import asdict

from stream_models import PROMPT, BenchModel, check_spec, prepare, weight_bytes
from stream_tables import fmt_breakdown, fmt_table

MARK = "RESULT "
NOSTACK = " nostack"  # a runner with decode_stack="modules"
__all__ = ["MARK", "PROMPT"]


def child(args: argparse.Namespace) -> None:
    import stream_runners as sr

    name, prompt, n = args.child, json.loads(args.prompt), args.new_tokens
    parts = _bare(name).split()
    if name.endswith(NOSTACK):  # the engine's default, read once when its config is made
        os.environ["TANDEM_DECODE_STACK"] = "modules"
    ctx, detail = args.max_model_len or None, not args.decode_only
    if parts[0] == "tandem":
        on_file = parts[2] not in ("fp32", "int8")  # a GGUF file, kept as stored
        path, quant = (args.gguf, "gguf") if on_file else (args.path, parts[2])
        reps = args.repeats
        res = sr.run_tandem(path, parts[1], prompt, n, args.threads, reps, quant, ctx, detail)
    elif name == "transformers":
        res = sr.run_hf(args.path, prompt, n, args.threads, args.repeats)
    elif parts[0] == "llama.cpp":
        res = sr.run_llama_cpp(args.gguf, prompt, n, args.threads, args.repeats)
    else:
        raise ValueError(f"unknown runner {name!r}")
    print(MARK + json.dumps(asdict(res)), flush=True)


def spawn(name: str, args: argparse.Namespace, model: BenchModel) -> dict:
    env, python = dict(os.environ), sys.executable
    fmt = _bare(name).split()[-1]
    gguf = model.files.get(fmt, model.gguf)
    if name.startswith("llama.cpp") and args.llama_cpp_venv:
        python = os.path.join(args.llama_cpp_venv, "bin", "python")
    if " @" in name:
        from throughput import SOURCES, baseline_tree

        tree = baseline_tree(name.split(" @", 1)[1])
        paths = [str(tree / src) for src in SOURCES]
        env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(":")
    cmd = [python, __file__, "--child", name, "--path", model.path, "--gguf", gguf]
    cmd += ["--prompt", json.dumps(model.prompt), "--threads", str(args.threads)]
    cmd += ["--repeats", str(args.repeats), "--new-tokens", str(args.new_tokens)]
    cmd += ["--max-model-len", str(args.max_model_len or 0)]
    cmd += ["--decode-only"] if args.decode_only else []
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-4:]
        return {"runs": [], "phases": {}, "note": "failed: " + " | ".join(tail)}
    return json.loads(lines[-1][len(MARK) :])


def _bare(name: str) -> str:
    """A runner's name without its baseline and decode-stack suffixes."""
    return name.removesuffix(NOSTACK).split(" @")[0]


def runner_names(model: BenchModel, args: argparse.Namespace) -> list[str]:
    """The runners of ``model``, in the order each round runs them."""
    if model.path == model.gguf:  # a GGUF file alone
        quants, base = ["gguf"], ["llama.cpp"]
    elif model.files:
        quants = args.quant
        base = [f"tandem {e} {f}" for f in model.files for e in args.engines]
        base += [f"llama.cpp {f}" for f in model.files] + ["transformers"]
    else:
        quants, base = args.quant, ["transformers", "llama.cpp"] if model.gguf else ["transformers"]
    quants = [q for q in quants if q != "gguf" or model.gguf]  # "gguf": the model's own file
    names = [f"tandem {e} {q}" for q in quants for e in args.engines]
    if args.baseline:  # the engines at REF on the same weights, the files' included
        at = [n for n in names + base if n.startswith("tandem")]
        names += [f"{n} @{args.baseline}" for n in at]
    names += base
    if "modules" in args.decode_stack:
        both = ["c", "modules"] if "c" in args.decode_stack else ["modules"]
        suffixes = ["" if s == "c" else NOSTACK for s in both]
        names = [n + x for n in names for x in (suffixes if n.startswith("tandem") else [""])]
    if args.runners:
        names = [n for n in names if any(part in n for part in args.runners)]
    return [n for n in names if not any(part in n for part in args.skip)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        "--size",
        dest="models",
        nargs="+",
        default=["smollm2"],
        metavar="NAME[:FORMATS]",
        help="smollm2, tiny (tiny-ARCH: another architecture's test config, e.g. tiny-phi3), "
        "a gguf_models.py shape (llama-1b, gemma3-270m, qwen3-0.6b, llama-270m, llama-0.6b) "
        "a .gguf file or a checkpoint directory; "
        "NAME:f32,q4_k_m sets that model's --formats",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per start")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--engines", nargs="+", default=["v0", "v1"], choices=("v0", "v1"))
    parser.add_argument("--quant", nargs="+", default=["fp32"], choices=("fp32", "int8", "gguf"))
    parser.add_argument("--runners", nargs="+", default=None, help="keep names containing these")
    parser.add_argument("--skip", nargs="+", default=[], help="drop names containing these")
    parser.add_argument(
        "--decode-stack",
        nargs="+",
        default=["c"],
        choices=("c", "modules"),
        help="run the tandem runners with the engine's decode path (c) and/or the modules",
    )
    parser.add_argument("--baseline", default=None, metavar="REF", help="also the engines at REF")
    parser.add_argument(
        "--llama-cpp-venv", default="", metavar="DIR", help="llama.cpp side by side (see --formats)"
    )
    parser.add_argument(
        "--formats",
        nargs="+",
        default=["f32", "q8_0", "q4_1", "q4_k_m"],
        choices=("f16", "f32", "q8_0", "q4_1", "q4_k_m"),
        help="with --llama-cpp-venv: GGUF files run by llama.cpp and by the tandem engines",
    )
    parser.add_argument(
        "--models-dir",
        default=os.path.join(os.path.dirname(__file__), "results", "gguf_models"),
        metavar="DIR",
        help="where the random-init shapes' checkpoints and files are made (gigabytes)",
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="tandem's context (default: the model's own; llama.cpp runs at 2048)",
    )
    parser.add_argument(
        "--decode-only", action="store_true", help="streamed runs only: no answers, no breakdown"
    )
    for hidden in ("--child", "--path", "--gguf", "--prompt"):
        parser.add_argument(hidden, default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    for spec in args.models:
        try:
            check_spec(spec, args.formats)
        except ValueError as err:
            parser.error(str(err))
    if args.rounds < 1 or args.repeats < 1 or args.new_tokens < 2:
        parser.error("--rounds and --repeats must be >= 1 and --new-tokens >= 2")
    from bench_costs import memory_bandwidth

    models = [prepare(spec, args) for spec in args.models]
    bandwidth = memory_bandwidth(args.threads)
    print(
        f"models={' '.join(m.name for m in models)} new={args.new_tokens} "
        f"threads={args.threads} loadavg={os.getloadavg()[0]:.2f}",
        flush=True,
    )
    names = {m.name: runner_names(m, args) for m in models}
    rows: dict[str, dict[str, dict]] = {m.name: {} for m in models}
    for i in range(args.rounds):
        for model in models:
            got = rows[model.name]
            for name in names[model.name]:
                if i and not got[name]["runs"]:
                    continue
                r = spawn(name, args, model)
                if i:
                    got[name]["runs"] += r["runs"]
                    got[name]["answers"] = got[name].get("answers", []) + r.get("answers", [])
                    got[name]["phases"] = got[name]["phases"] or r["phases"]
                else:
                    got[name] = r
                rates = " ".join(f"{(x['tokens'] - 1) / x['decode']:.1f}" for x in r["runs"])
                print(
                    f"  round {i + 1} {model.name:<14} {name:<24} {rates or r['note']}"
                    f"  (load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    bandwidth = max(bandwidth, memory_bandwidth(args.threads))
    print(f"memory bandwidth (read) {bandwidth / 1e9:.1f} GB/s")
    for model in models:
        floors = {k: bandwidth / b for k, b in weight_bytes(model).items()}
        print(f"\n{model.name}: prompt {len(model.prompt)} tokens; floor tok/s per precision: ")
        print("  " + ", ".join(f"{k} {v:.1f}" for k, v in floors.items()))
        print("\n".join(fmt_table(rows[model.name], floors)))
        print("\n".join(fmt_breakdown(rows[model.name])))
    print(f"loadavg after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
