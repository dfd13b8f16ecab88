"""GGUF start-up, peak memory and bytes written: llama.cpp and the tandem engines, per file.

    python benchmarks/gguf_startup.py [FILE.gguf ...] [--llama-cpp-venv DIR] [--rounds 3]
        [--made llama-1b:f16,q4_k_m,q4_1 gemma3-270m:q4_k_m] [--max-model-len 2048]
        [--max-num-seqs 1] [--new-tokens 16] [--threads 2] [--runners llama.cpp v0 v1]
        [--prebuilt-kernels] [--json OUT.json]

Files: those given, else SmolLM2's shipped Q4_1 file and the random-init ones ``--made``
names (``gguf_models.py``, made once under ``benchmarks/results/gguf_models``). Each run
is a fresh process that loads the file and streams one short greedy answer to one
prompt: llama.cpp (``Llama(model_path, n_ctx)``, in the venv), or ``LLM(model=file,
engine=v0|v1)`` with the same context length. Rounds interleave the runners and files so
a slow spell of the shared machine falls on all of them.

Per run: start-up, the wall time from spawning the process to the first token (python's
own start included, for every runner); the tree's peak RSS, the most that the process
and its children (v1's engine core and detokenizer) held at once, summed from their
``/proc/<pid>/status`` polled every 50 ms (``process_tree.py``; a page two processes share
counts twice), and how much of it was anonymous memory; the bytes the tree wrote
(``write_bytes`` of /proc/<pid>/io, its reaped children included) and how much
``$TANDEM_CACHE_DIR`` grew, a fresh directory each run: empty for the cold run (the
tokenizer is built from the file and the C kernels compiled), for the warm ones a copy
of what every engine's cold run left (v1's front keeps its own form of the tokenizer,
``tokenizers-light``, which v0 never writes). The KV cache is what each allocated for
the context: tandem's blocks times bytes per block (``EngineConfig.kv_bytes_per_block``),
llama.cpp's from its log.

The GGUF file itself is in the page cache for every run but the very first (the files
are read in turn, round after round): start-up is measured warm, as a second start is.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from process_tree import TreeMonitor, dir_bytes, tree_cpu, tree_hwm, written_bytes
from single_stream import MARK, PROMPT

RESULTS = Path(__file__).parent / "results"
MODELS_DIR = RESULTS / "gguf_models"
MADE = ["llama-1b:f16,q4_k_m,q4_1", "gemma3-270m:q4_k_m"]  # gguf_models.py's shapes
MIB = 1 << 20
_KV_LINE = re.compile(r"llama_kv_cache: size =\s*([\d.]+) MiB")


def child(args: argparse.Namespace) -> None:
    """One run: load, stream ``--new-tokens`` tokens, report stamps (epoch seconds)."""
    stamps = {"main": time.time()}
    if args.child == "llama.cpp":
        from llama_cpp import Llama  # type: ignore[import-not-found]

        stamps["import"] = time.time()
        llm = Llama(model_path=args.file, n_ctx=args.max_model_len, n_threads=args.threads)
        stamps["built"] = time.time()
        stream = llm.generate(llm.tokenize(PROMPT.encode()), temp=0.0, top_k=1)
        kv, close = 0, llm.close
    else:
        from tandem.core import LLM, SamplingParams

        stamps["import"] = time.time()
        llm = LLM(
            model=args.file,
            engine=args.child,
            max_model_len=args.max_model_len,
            max_num_seqs=args.max_num_seqs,
            num_threads=args.threads,
        )
        stamps["built"] = time.time()
        params = SamplingParams(temperature=0.0, max_tokens=args.new_tokens, ignore_eos=True)
        stream = (t for out in llm.stream(PROMPT, params) for t in out.outputs[0].token_ids)
        cache, blocks = llm.config.cache, llm.engine.stats().num_kv_blocks
        kv = (blocks + (cache.sliding_window is not None)) * llm.config.kv_bytes_per_block
        close = llm.shutdown
    tokens, cpu = 0, 0.0
    for _ in stream:
        tokens += 1
        if tokens == 1:
            stamps["first"], cpu = time.time(), tree_cpu(os.getpid())
        if tokens == args.new_tokens:
            break
    stamps["done"] = time.time()
    procs = tree_hwm(os.getpid())
    close()
    rec = {"stamps": stamps, "cpu": cpu, "tokens": tokens, "kv": kv, "procs": procs}
    print(MARK + json.dumps(rec))


def spawn(args: argparse.Namespace, runner: str, file: str, cache: Path) -> dict:
    """One run in a fresh process, its tree watched; the record of what it cost."""
    python = sys.executable
    if runner == "llama.cpp":
        python = os.path.join(args.llama_cpp_venv, "bin", "python")
    cmd = [python, __file__, "--child", runner, "--file", file, "--threads", str(args.threads)]
    cmd += ["--max-model-len", str(args.max_model_len), "--max-num-seqs", str(args.max_num_seqs)]
    cmd += ["--new-tokens", str(args.new_tokens)]
    env = dict(os.environ, TANDEM_CACHE_DIR=str(cache))
    if args.kernels_library and runner != "llama.cpp":
        seed_kernels(Path(args.kernels_library), cache)
    before_dir, (before_w, before_c) = dir_bytes(cache), written_bytes()
    start = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with TreeMonitor(proc.pid) as tree:
        out, err = proc.communicate()
    after_w, after_c = written_bytes()
    lines = [ln for ln in out.decode().splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = " | ".join(err.decode(errors="replace").strip().splitlines()[-3:])
        return {"note": f"failed (rc {proc.returncode}): {tail}"}
    rec = json.loads(lines[-1][len(MARK) :])
    if runner == "llama.cpp":  # its log gives the KV cache (two caches with sliding layers)
        rec["kv"] = sum(float(m) for m in _KV_LINE.findall(err.decode())) * MIB
    rec |= {"spawn": start, "peak": tree.peak, "anon": tree.anon, "file_rss": tree.file}
    rec |= {"written": after_w - before_w, "cancelled": after_c - before_c}
    rec["cache_growth"] = dir_bytes(cache) - before_dir
    rec["startup"] = rec["stamps"]["first"] - start
    return rec


def built_kernels() -> str:
    """The C kernels' library, built here once (in the user's cache) for
    ``--prebuilt-kernels``."""
    from tandem.kernels.native.builder import build

    return str(build())


def seed_kernels(library: Path, cache: Path) -> None:
    """Put the kernels' library where a run with ``cache`` as its TANDEM_CACHE_DIR looks
    (same sources, compiler and CPU: same file name), so the run does not compile them."""
    target = cache / "native" / library.name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(library, target)


def default_files(args: argparse.Namespace) -> list[str]:
    """SmolLM2's shipped file, then each ``--made`` shape's formats (made where missing)."""
    from gguf_models import make

    from tandem.core.catalog.default_model import gguf_file

    files = [str(gguf_file(print))]
    for item in args.made:
        name, _, formats = item.partition(":")
        files += make(Path(args.llama_cpp_venv), name, MODELS_DIR, formats.split(",")).values()
    return files


def run_all(args: argparse.Namespace, files: list[str], work: Path) -> dict[tuple, list]:
    """Every run, keyed by (file, runner, 'cold' | 'warm'), interleaved over the rounds."""
    runs: dict[tuple, list] = {}
    warm_cache: dict[str, Path] = {}
    tandem = [r for r in args.runners if r != "llama.cpp"]

    def record(key: tuple, rec: dict) -> None:
        runs.setdefault(key, []).append(rec)
        took = rec.get("note") or f"{rec['startup']:.2f} s, peak {rec['peak'] / MIB:.0f} MiB"
        print(f"  {Path(key[0]).name:<34}{key[1]:<10}{key[2]:<5} {took}", flush=True)

    for n, file in enumerate(files):
        shutil.rmtree(work / f"warm-{n}", ignore_errors=True)
        for runner in tandem if args.cold else []:
            cache = work / f"cold-{n}-{runner}"
            shutil.rmtree(cache, ignore_errors=True)
            record((file, runner, "cold"), spawn(args, runner, file, cache))
            warm_cache[file] = work / f"warm-{n}"
            shutil.copytree(cache, warm_cache[file], dirs_exist_ok=True)
    for i in range(args.rounds):
        print(f"round {i + 1}", flush=True)
        for n, file in enumerate(files):
            if file not in warm_cache and tandem:  # no cold run: fill a cache untimed
                warm_cache[file] = work / f"filled-{n}"
                for runner in tandem:
                    spawn(args, runner, file, warm_cache[file])
            for runner in args.runners:
                cache = work / "run"
                shutil.rmtree(cache, ignore_errors=True)
                if runner != "llama.cpp":
                    shutil.copytree(warm_cache[file], cache)
                record((file, runner, "warm"), spawn(args, runner, file, cache))
    return runs


def _median(recs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in recs)


def fmt_tables(runs: dict[tuple, list], files: list[str]) -> list[str]:
    head = (
        f"{'runner':<16}{'start s':>8}{'(min)':>7}{'x l.cpp':>8}{'cpu s':>7}{'x l.cpp':>8}"
        f"{'peak MiB':>9}{'anon':>7}"
        f"{'x file':>7}{'KV MiB':>7}{'x(1.5f+KV)':>11}{'written MiB':>12}{'cache +MiB':>11}"
    )
    parts = f"{'runner':<16}" + "".join(f"{p:>9}" for p in ("python", "imports", "build"))
    parts += f"{'1st tok':>9}{'procs (peak RSS of each, MiB)':>32}"
    out = []
    for file in files:
        size = os.path.getsize(file)
        out += ["", f"{Path(file).name}: {size / MIB:.0f} MiB", head, "-" * len(head)]
        base = [r for r in runs.get((file, "llama.cpp", "warm"), []) if "startup" in r]
        base_start = _median(base, "startup") if base else None
        base_cpu = _median(base, "cpu") if base else None
        lines2 = [parts]
        keys = sorted((k for k in runs if k[0] == file), key=lambda k: (k[2], k[1] != "llama.cpp"))
        for f, runner, kind in sorted(keys, key=lambda k: k[2] == "cold"):
            recs = runs[(f, runner, kind)]
            ok = [r for r in recs if "startup" in r]
            name = f"{runner} {kind}" if runner != "llama.cpp" else runner
            if not ok:
                out.append(f"{name:<16}{recs[0]['note']}")
                continue
            start, peak, kv = _median(ok, "startup"), _median(ok, "peak"), ok[0]["kv"]
            cpu = _median(ok, "cpu")
            ratio = f"{start / base_start:8.2f}" if base_start else f"{'-':>8}"
            ratio += f"{cpu:7.2f}" + (f"{cpu / base_cpu:8.2f}" if base_cpu else f"{'-':>8}")
            out.append(
                f"{name:<16}{start:8.2f}{min(r['startup'] for r in ok):7.2f}{ratio}"
                f"{peak / MIB:9.0f}{_median(ok, 'anon') / MIB:7.0f}{peak / size:7.2f}"
                f"{kv / MIB:7.0f}{peak / (1.5 * size + kv):11.2f}"
                f"{_median(ok, 'written') / MIB:12.1f}{_median(ok, 'cache_growth') / MIB:11.1f}"
            )
            mid = sorted(ok, key=lambda r: r["startup"])[len(ok) // 2]
            s = mid["stamps"]
            steps = [s["main"] - mid["spawn"], s["import"] - s["main"]]
            steps += [s["built"] - s["import"], s["first"] - s["built"]]
            procs = " ".join(f"{p['hwm'] / MIB:.0f}" for p in mid["procs"])
            lines2.append(f"{name:<16}" + "".join(f"{x:9.2f}" for x in steps) + f"  {procs:>30}")
        out += ["", "  start-up by phase (s, the median run):", *lines2]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="GGUF files (default: see the docstring)")
    parser.add_argument("--llama-cpp-venv", default=str(RESULTS / "llama-cpp-venv"), metavar="DIR")
    parser.add_argument("--made", nargs="*", default=MADE, metavar="NAME:FORMATS")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runners", nargs="+", default=["llama.cpp", "v0", "v1"])
    parser.add_argument("--no-cold", dest="cold", action="store_false", help="warm runs only")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--max-num-seqs", type=int, default=1, help="tandem: KV for this many")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--prebuilt-kernels",
        action="store_true",
        help="copy the C kernels, built once here, into every run's cache: on a loaded "
        "machine their compile can pass the builder's time limit (the run then falls back "
        "to torch); cold runs then build only the tokenizer",
    )
    parser.add_argument("--json", default="", help="also write every run's record here")
    parser.add_argument("--tables-from", default="", metavar="JSON", help="print a --json's tables")
    for hidden in ("--child", "--file"):
        parser.add_argument(hidden, default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.tables_from:  # the tables of a run saved with --json
        rows = json.loads(Path(args.tables_from).read_text())
        runs = {(r["file"], r["runner"], r["kind"]): r["runs"] for r in rows}
        print("\n".join(fmt_tables(runs, list(dict.fromkeys(r["file"] for r in rows)))))
        return
    bad = set(args.runners) - {"llama.cpp", "v0", "v1"}
    if bad:
        parser.error(f"--runners must be among llama.cpp, v0, v1, got {sorted(bad)}")
    missing = [f for f in args.files if not (f.endswith(".gguf") and os.path.isfile(f))]
    if missing or args.rounds < 1:
        parser.error(f"files must be .gguf files ({missing} are not) and --rounds >= 1")
    needs_venv = "llama.cpp" in args.runners or (args.made and not args.files)
    if needs_venv and not os.path.isfile(os.path.join(args.llama_cpp_venv, "bin", "python")):
        parser.error(
            f"--llama-cpp-venv {args.llama_cpp_venv} has no bin/python: llama.cpp runs, and "
            "the files are made, there (bash benchmarks/llama_cpp_venv.sh makes it)"
        )
    files = args.files or default_files(args)
    args.kernels_library = ""
    if args.prebuilt_kernels and set(args.runners) - {"llama.cpp"}:
        args.kernels_library = built_kernels()
    work = RESULTS / "gguf_startup"
    work.mkdir(parents=True, exist_ok=True)
    print(f"files: {len(files)} rounds={args.rounds} loadavg={os.getloadavg()[0]:.2f}", flush=True)
    runs = run_all(args, files, work)
    print("\n".join(fmt_tables(runs, files)))
    print(f"loadavg after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        rows = [{"file": f, "runner": r, "kind": k, "runs": v} for (f, r, k), v in runs.items()]
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
