"""One stream (batch 1): decode tok/s, time to first token, bandwidth floor, the step apart.

    python benchmarks/single_stream.py [--size smollm2|tiny|gemma3-270m] [--threads 2]
        [--rounds 3] [--repeats 2] [--new-tokens 128] [--quant fp32 int8] [--runners NAME ...]
        [--decode-stack c modules]
        [--baseline REF] [--llama-cpp-venv DIR [--formats f32 q8_0 q4_1 q4_k_m]]
        [--gguf-file FILE.gguf] [--max-model-len N]

One chat prompt, greedy, ``--new-tokens`` tokens with EOS ignored. Runners, each in a
fresh process: the tandem engines (``tandem v0``, ``tandem v1``, per ``--quant``),
transformers ``generate`` and, only where ``llama_cpp`` is importable, llama.cpp on the
model's GGUF file (this script never builds it). With ``--llama-cpp-venv`` (made by
``llama_cpp_venv.sh``), each of ``--formats`` is a GGUF file of the same weights
(``gguf_files.py``) that llama.cpp, in that venv, and the tandem engines, keeping it as
stored, both run. ``--gguf-file`` runs llama.cpp and the tandem engines on that one file
only (its own tokenizer and config: any architecture tandem reads). Rounds interleave
the runners so a slow spell of the shared machine falls on all of them; every timed run
counts, and the table shows the best, the median and the spread (min..max) of decode
tok/s (first token to last), the median time to first token and the median whole-answer
tok/s.

``--size gemma3-270m`` is a random init of Gemma 3 270M's layers (18 of them, five local
layers to a global one, q/k norms, sandwich norms, GeGLU) with a 32k vocabulary (the real
262k-row head would hide the layers' cost); ``--decode-stack c modules`` runs each tandem
runner with the one-call C decode stack and again with the modules (``nostack``).

A decode step streams every weight once, so its floor is the weight bytes read per token
(linear layers and the logits; one embedding row) over the memory bandwidth, measured
in the same run (the best of large torch reads, before and after the runners). Each
runner shows its fraction of the floor of its precision.

The breakdown (ms per decode token) times one more run of each tandem runner with its parts
wrapped: scheduler, model forward, logits, sampler, detokenizer and the rest of the
step; v1's parts run with its in-process client there, and ``processes + IPC`` is what
the multi-process engine's decode token costs beyond that in-process step.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from gguf_files import FORMATS

MARK = "RESULT "
OUT_DIR = Path(__file__).parent / "results" / "gguf"
# Gemma 3 270M's layers (a 32k vocabulary: see the module's docstring)
GEMMA3_270M = {
    "hidden_size": 640,
    "num_hidden_layers": 18,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 256,
    "query_pre_attn_scalar": 256,
    "intermediate_size": 2048,
    "vocab_size": 32768,
    "sliding_window": 512,
    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3,
    "max_position_embeddings": 32768,
}
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def child(args: argparse.Namespace) -> None:
    import stream_runners as sr

    name, prompt, n = args.child, json.loads(args.prompt), args.new_tokens
    parts = name.split(" @")[0].split()
    if parts[-1] == "nostack":  # the engine's default, read once at its start
        os.environ["TANDEM_DECODE_STACK"] = "modules"
    ctx = args.max_model_len or None
    if parts[0] == "tandem" and parts[2] in FORMATS:  # the GGUF file, kept as stored
        res = sr.run_tandem(args.gguf, parts[1], prompt, n, args.threads, args.repeats, "gguf", ctx)
    elif parts[0] == "tandem":
        res = sr.run_tandem(
            args.path, parts[1], prompt, n, args.threads, args.repeats, parts[2], ctx
        )
    elif name == "transformers":
        res = sr.run_hf(args.path, prompt, n, args.threads, args.repeats)
    elif parts[0] == "llama.cpp":
        res = sr.run_llama_cpp(args.gguf, prompt, n, args.threads, args.repeats)
    else:
        raise ValueError(f"unknown runner {name!r}")
    print(MARK + json.dumps(asdict(res)), flush=True)


def spawn(name: str, args: argparse.Namespace, path: str, gguf: str, prompt: list[int]) -> dict:
    env, python = dict(os.environ), sys.executable
    fmt = name.split(" @")[0].removesuffix(" nostack").split()[-1]
    gguf = args.files.get(fmt, gguf)
    if name.startswith("llama.cpp") and args.llama_cpp_venv:
        python = os.path.join(args.llama_cpp_venv, "bin", "python")
    if " @" in name:
        from throughput import SOURCES, baseline_tree

        tree = baseline_tree(name.split(" @", 1)[1])
        paths = [str(tree / src) for src in SOURCES]
        env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(":")
    cmd = [python, __file__, "--child", name, "--path", path, "--gguf", gguf]
    cmd += ["--prompt", json.dumps(prompt), "--threads", str(args.threads)]
    cmd += ["--repeats", str(args.repeats), "--new-tokens", str(args.new_tokens)]
    cmd += ["--max-model-len", str(args.max_model_len or 0)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-4:]
        return {"runs": [], "phases": {}, "note": "failed: " + " | ".join(tail)}
    return json.loads(lines[-1][len(MARK) :])


def weight_bytes(cfg: dict, gguf: str | None, files: dict[str, str]) -> dict[str, float]:
    """Weight bytes one decode token reads, per precision (linear layers + logits)."""
    c, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
    h, kvh = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or c // h
    inter, vocab = cfg["intermediate_size"], cfg["vocab_size"]
    matrices = [(h + 2 * kvh) * d * c, h * d * c, 3 * c * inter]
    values = layers * sum(matrices) + c * vocab
    rows = layers * ((h + 2 * kvh) * d + c + 2 * inter + c) + vocab
    out = {"fp32": 4.0 * values, "int8": values + 4.0 * rows}  # int8: one fp32 scale a row
    for fmt, file in [("gguf", gguf), *files.items()]:
        if file:
            out[fmt] = _file_bytes(file)
    return out


def _file_bytes(gguf: str) -> float:
    """Bytes of a GGUF file's tensors a decode token reads (one embedding row aside)."""
    from gguf import GGUFReader

    sizes = {t.name: int(t.n_bytes) for t in GGUFReader(gguf).tensors}
    tied = "output.weight" not in sizes
    return float(sum(b for n, b in sizes.items() if n != "token_embd.weight" or tied))


def fmt_table(rows: dict[str, dict], floors: dict[str, float]) -> list[str]:
    head = (
        f"{'runner':<24}{'best':>7}{'median':>8}{'spread':>14}{'answer':>8}"
        f"{'ttft ms':>9}{'floor':>9}{'x floor':>9}{'cpu ms/tok':>11}{'(answer)':>9}"
    )
    out = [
        head + "   (decode tok/s streamed; answer: tok/s of a final-only answer)",
        "-" * len(head),
    ]
    for name, r in rows.items():
        runs = r["runs"]
        if not runs:
            out.append(f"{name:<24}{r['note'] or 'failed'}")
            continue
        rates = sorted((x["tokens"] - 1) / x["decode"] for x in runs)
        n = runs[0]["tokens"]
        answers = r.get("answers") or runs
        whole = statistics.median(n / (a["ttft"] + a["decode"]) for a in answers)
        cpu_answer = statistics.median(a.get("cpu", 0.0) / n for a in answers) * 1e3
        ttft = statistics.median(x["ttft"] for x in runs) * 1e3
        med = statistics.median(rates)
        cpu = statistics.median(x.get("cpu", 0.0) / x["tokens"] for x in runs) * 1e3
        prec = name.split(" @")[0].removesuffix(" nostack").split()[-1]
        prec = {"llama.cpp": "gguf", "transformers": "fp32", "f32": "fp32"}.get(prec, prec)
        floor = floors.get(prec, floors["fp32"])
        spread = f"{rates[0]:.1f}..{rates[-1]:.1f}"
        out.append(
            f"{name:<24}{rates[-1]:7.1f}{med:8.1f}{spread:>14}{whole:8.1f}"
            f"{ttft:9.1f}{floor:9.1f}{med / floor:9.3f}{cpu:11.1f}{cpu_answer:9.1f}"
        )
    return out


def fmt_breakdown(rows: dict[str, dict]) -> list[str]:
    names = [n for n, r in rows.items() if r.get("phases")]
    if not names:
        return []
    parts = ["scheduler", "model forward", "logits", "sampler", "detokenizer"]
    out = [f"{'ms / token':<24}" + "".join(f"{p[:11]:>12}" for p in [*parts, "other", "step"])]
    out[0] += f"{'proc+IPC':>10}{'own work':>10}"
    for name in names:
        ph = rows[name]["phases"]
        step = ph.get("step", 0.0)
        other = step - sum(ph.get(p, 0.0) for p in parts)
        line = f"{name:<24}" + "".join(f"{ph.get(p, 0.0) * 1e3:12.2f}" for p in parts)
        line += f"{other * 1e3:12.2f}{step * 1e3:12.2f}"
        ipc = 0.0
        if " v1" in name and rows[name]["runs"]:
            mp = statistics.median(x["decode"] / (x["tokens"] - 1) for x in rows[name]["runs"])
            ipc = max(mp - step, 0.0)
        own = step - ph.get("model forward", 0.0) - ph.get("logits", 0.0) + ipc
        line += f"{ipc * 1e3:10.2f}{own * 1e3:10.2f}"
        out.append(line + f"  ({own / (step + ipc):.0%} of the step)" if step else line)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="smollm2", choices=("smollm2", "tiny", "gemma3-270m"))
    parser.add_argument("--decode-stack", nargs="+", default=["c"], choices=("c", "modules"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per start")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--engines", nargs="+", default=["v0", "v1"], choices=("v0", "v1"))
    parser.add_argument("--quant", nargs="+", default=["fp32"], help="fp32, int8, ...")
    parser.add_argument("--runners", nargs="+", default=None, help="keep names containing these")
    parser.add_argument("--baseline", default=None, metavar="REF", help="also the engines at REF")
    parser.add_argument(
        "--llama-cpp-venv", default="", metavar="DIR", help="llama.cpp side by side (see --formats)"
    )
    parser.add_argument(
        "--formats",
        nargs="+",
        default=["f32", "q8_0", "q4_1", "q4_k_m"],
        choices=FORMATS,
        help="with --llama-cpp-venv: GGUF files run by llama.cpp and by the tandem engines",
    )
    parser.add_argument(
        "--gguf-file",
        default="",
        metavar="FILE",
        help="only llama.cpp and the tandem engines, on this GGUF file (any architecture)",
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="tandem's context (default: the model's own; llama.cpp runs at 2048)",
    )
    for hidden in ("--child", "--path", "--gguf", "--prompt"):
        parser.add_argument(hidden, default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    from bench_costs import memory_bandwidth
    from transformers import AutoConfig, AutoTokenizer

    gguf = ""
    if args.gguf_file:  # the file alone: its tokenizer and config, read in place
        from tandem.core.gguf import open_checkpoint
        from tandem.core.gguf.tokenizer import tokenizer_dir

        path = gguf = str(Path(args.gguf_file).resolve())
        tok_dir, full = str(tokenizer_dir(gguf)), open_checkpoint(gguf).config
    elif args.size == "smollm2":
        from tandem.core.default_model import gguf_file
        from tandem.core.gguf.export import exported

        gguf = str(gguf_file(print))
        path = tok_dir = str(exported(gguf))  # float32 safetensors, written once, kept
    elif args.size == "gemma3-270m":
        from tandem.core.testing import make_model

        path = tok_dir = str(make_model(size="tiny", arch="gemma3", **GEMMA3_270M))
    else:
        from tandem.core.testing import make_model

        path = tok_dir = str(make_model(size="tiny"))
    tok = AutoTokenizer.from_pretrained(tok_dir)
    chat = [{"role": "user", "content": PROMPT}]
    try:
        text = tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        prompt = tok.encode(text, add_special_tokens=False)
    except Exception:  # no chat template: the plain text
        prompt = tok.encode(PROMPT)
    if not args.gguf_file:
        full = AutoConfig.from_pretrained(path).to_dict()
    quants = ["gguf"] if args.gguf_file else args.quant
    stacks = ["" if s == "c" else " nostack" for s in args.decode_stack]
    names = [f"tandem {e} {q}{s}" for q in quants for e in args.engines for s in stacks]
    if args.baseline:
        names += [f"tandem {e} {q} @{args.baseline}" for q in quants for e in args.engines]
    args.files = {}
    if args.gguf_file:
        names += ["llama.cpp"]
    elif args.llama_cpp_venv:
        from gguf_files import make

        args.files = make(
            Path(args.llama_cpp_venv), Path(path), Path(gguf), OUT_DIR, list(args.formats)
        )
        names += [f"tandem {e} {f}" for f in args.formats for e in args.engines]
        names += [f"llama.cpp {f}" for f in args.formats]
        names += ["transformers"]
    else:
        names += ["transformers", "llama.cpp"]
    if args.runners:
        names = [n for n in names if any(part in n for part in args.runners)]
    bandwidth = memory_bandwidth(args.threads)
    model = Path(args.gguf_file).name if args.gguf_file else args.size
    print(
        f"model={model} prompt={len(prompt)} tokens new={args.new_tokens} "
        f"threads={args.threads} loadavg={os.getloadavg()[0]:.2f}",
        flush=True,
    )
    rows: dict[str, dict] = {}
    for i in range(args.rounds):
        for name in names:
            if i and not rows[name]["runs"]:
                continue
            r = spawn(name, args, path, gguf, prompt)
            if i:
                rows[name]["runs"] += r["runs"]
                rows[name]["answers"] = rows[name].get("answers", []) + r.get("answers", [])
                rows[name]["phases"] = rows[name]["phases"] or r["phases"]
            else:
                rows[name] = r
            rates = " ".join(f"{(x['tokens'] - 1) / x['decode']:.1f}" for x in r["runs"])
            print(f"  round {i + 1} {name:<24} {rates or r['note']}", flush=True)
    bandwidth = max(bandwidth, memory_bandwidth(args.threads))
    floors = {k: bandwidth / b for k, b in weight_bytes(full, gguf, args.files).items()}
    print(f"memory bandwidth (read) {bandwidth / 1e9:.1f} GB/s; floor tok/s per precision: ")
    print("  " + ", ".join(f"{k} {v:.1f}" for k, v in floors.items()))
    print("\n".join(fmt_table(rows, floors)))
    print("\n".join(fmt_breakdown(rows)))
    print(f"loadavg after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
