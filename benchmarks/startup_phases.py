"""Where a tandem engine's start-up on a GGUF file goes: seconds and memory by phase.

    python benchmarks/startup_phases.py FILE.gguf [--max-model-len 2048] [--threads 2]

One fresh process builds the v0 engine (``LLM(model=FILE, engine="v0")``; v1's engine
core runs the same loader in its child) with its steps wrapped, and prints, per phase,
the wall seconds, the CPU seconds and this process's RSS after it (anonymous and
file-backed apart: the mapped file is file-backed, a copy of it anonymous; a phase called
several times is added up, its RSS after the last call). Phases: the heavy imports
(torch, transformers), the config (the GGUF header), the tokenizer, the model (built on
the meta device, then each part in turn: emptied on the CPU, read from the file, packed
for the kernels), the KV cache and the first token. Phases nest (the model's parts are
inside it); ``gguf_startup.py`` measures the whole. On a busy machine the CPU seconds
move less than the wall seconds.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from process_tree import status

MIB = 1 << 20
_rows: dict[str, dict[str, Any]] = {}  # by label, in the order the phases first began


def _cpu() -> float:
    """CPU seconds of this process and the children it reaped (the C compiler's)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def timed(label: str, fn: Any) -> Any:
    """``fn`` with its calls recorded under ``label`` (wall, CPU, RSS after)."""

    def inner(*args: Any, **kwargs: Any) -> Any:
        row = _rows.setdefault(label, {"wall": 0.0, "cpu": 0.0, "calls": 0})
        wall, cpu = time.perf_counter(), _cpu()
        try:
            return fn(*args, **kwargs)
        finally:
            row["wall"] += time.perf_counter() - wall
            row["cpu"] += _cpu() - cpu
            row["calls"] += 1
            row["status"] = status(os.getpid())  # after the last call

    return inner


def wrap(owner: Any, attr: str, label: str) -> None:
    setattr(owner, attr, timed(label, getattr(owner, attr)))


def instrument() -> None:
    """Wrap the steps of a v0 start (names as the engine and the loader look them up)."""
    from torch import nn

    import tandem.core.config.engine_args as config
    import tandem.core.engine.loader as loader
    import tandem.core.gguf.weights as weights
    import tandem.core.heap as heap
    import tandem.core.models.causal_lm as causal_lm
    import tandem.v0.engine as engine

    wrap(config.EngineArgs, "create_config", "config (GGUF header, tokenizer dir)")
    wrap(engine, "load_tokenizer", "tokenizer")
    wrap(loader, "load_model", "model")
    wrap(loader, "get_model_class", "  model class lookup")
    wrap(weights, "load_gguf", "  weights from the file")
    wrap(nn.Module, "to_empty", "    to_empty (meta -> CPU)")
    wrap(weights, "_weight", "    block weights (q/k/v, gate/up joined)")
    wrap(heap, "release_free_heap", "  malloc_trim")
    wrap(causal_lm.CausalLM, "prepare", "  prepare (pack for the kernels)")
    wrap(engine, "allocate_kv_caches", "KV cache")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--max-num-seqs", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    start = time.perf_counter()
    timed("import torch", lambda: __import__("torch"))()
    timed("import transformers", lambda: __import__("transformers.models.auto"))()
    timed("import tandem (front door, v0)", lambda: __import__("tandem.v0.engine"))()
    from tandem.core import LLM, SamplingParams

    instrument()
    llm = timed("LLM(...) in all", LLM)(
        args.file,
        engine="v0",
        max_model_len=args.max_model_len,
        max_num_seqs=args.max_num_seqs,
        num_threads=args.threads,
    )
    params = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    timed("first token", llm.generate)("The capital of France is", params, use_tqdm=False)
    total = time.perf_counter() - start
    llm.shutdown()
    size = os.path.getsize(args.file)
    print(f"{os.path.basename(args.file)}: {size / MIB:.0f} MiB; {total:.2f} s to the first token")
    print(f"{'phase':<46}{'wall s':>8}{'cpu s':>7}{'RSS MiB':>9}{'anon':>7}{'file':>7}")
    for label, row in _rows.items():
        st, calls = row["status"], f" (x{row['calls']})" if row["calls"] > 1 else ""
        rss, anon = st.get("VmRSS", 0) / MIB, st.get("RssAnon", 0) / MIB
        file = (st.get("RssFile", 0) + st.get("RssShmem", 0)) / MIB
        line = f"{label + calls:<46}{row['wall']:8.2f}{row['cpu']:7.2f}"
        print(line + f"{rss:9.0f}{anon:7.0f}{file:7.0f}")
    print(f"peak RSS (VmHWM) {status(os.getpid()).get('VmHWM', 0) / MIB:.0f} MiB")


if __name__ == "__main__":
    main()
