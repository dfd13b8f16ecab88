"""The tables of ``single_stream.py``: decode tok/s per runner, the ratios, the step apart.

:func:`fmt_table` gives each runner's best, median and spread of decode tok/s, its
fraction of the bandwidth floor of its precision, the median over llama.cpp's at the same
precision, its process tree's resident size after its timed runs (``RSS MB``: weights,
cache and runtime; llama.cpp's counts the pages of the file it mapped and read) and the
path its decode steps took (from its execution plan);
:func:`fmt_breakdown` the milliseconds per decode token of each part of the step.
"""

from __future__ import annotations

import statistics

from stream_models import plan_summary


def _precision(name: str) -> str:
    prec = name.removesuffix(" nostack").split(" @")[0].split()[-1]
    return {"llama.cpp": "gguf", "transformers": "fp32", "f32": "fp32"}.get(prec, prec)


def _llama_cpp_twin(name: str, rows: dict[str, dict]) -> str | None:
    """llama.cpp's row at ``name``'s precision (fp32 -> F32, int8 -> Q8_0, a file -> it)."""
    if name.startswith("llama.cpp"):
        return None
    prec = name.removesuffix(" nostack").split(" @")[0].split()[-1]
    fmt = {"transformers": "f32", "fp32": "f32", "int8": "q8_0"}.get(prec, prec)
    for twin in (f"llama.cpp {fmt}", "llama.cpp" if prec == "gguf" else ""):
        if twin in rows and rows[twin]["runs"]:
            return twin
    return None


def _median_rate(runs: list[dict]) -> float:
    return statistics.median((x["tokens"] - 1) / x["decode"] for x in runs)


def fmt_table(rows: dict[str, dict], floors: dict[str, float]) -> list[str]:
    w = max([24, *(len(n) + 2 for n in rows)])  # the runner column fits every name
    head = (
        f"{'runner':<{w}}{'best':>8}{'median':>9}{'spread':>16}{'answer':>8}"
        f"{'ttft ms':>9}{'floor':>9}{'x floor':>9}{'x l.cpp':>9}{'cpu ms/tok':>11}"
        f"{'(answer)':>9}{'RSS MB':>8}  path"
    )
    out = [
        head + "   (decode tok/s streamed; answer: tok/s of a final-only answer)",
        "-" * len(head),
    ]
    for name, r in rows.items():
        runs = r["runs"]
        if not runs:
            out.append(f"{name:<{w}}{r['note'] or 'failed'}")
            continue
        rates = sorted((x["tokens"] - 1) / x["decode"] for x in runs)
        n = runs[0]["tokens"]
        answers = r.get("answers") or runs
        whole = statistics.median(n / (a["ttft"] + a["decode"]) for a in answers)
        cpu_answer = statistics.median(a.get("cpu", 0.0) / n for a in answers) * 1e3
        ttft = statistics.median(x["ttft"] for x in runs) * 1e3
        med = statistics.median(rates)
        cpu = statistics.median(x.get("cpu", 0.0) / x["tokens"] for x in runs) * 1e3
        floor = floors.get(_precision(name), floors["fp32"])
        spread = f"{rates[0]:.1f}..{rates[-1]:.1f}"
        twin = _llama_cpp_twin(name, rows)
        ratio = f"{med / _median_rate(rows[twin]['runs']):9.2f}" if twin else f"{'-':>9}"
        path = (
            plan_summary(r["plan"]).split(":")[0].removeprefix("decode ") if r.get("plan") else ""
        )
        rss = f"{r.get('resident', 0) / 2**20:8.0f}" if r.get("resident") else f"{'-':>8}"
        out.append(
            f"{name:<{w}}{rates[-1]:8.1f}{med:9.1f}{spread:>16}{whole:8.1f}{ttft:9.1f}"
            f"{floor:9.1f}{med / floor:9.3f}{ratio}{cpu:11.1f}{cpu_answer:9.1f}{rss}  {path}"
        )
    plans = {plan_summary(r["plan"]): n for n, r in rows.items() if r.get("plan")}
    out += [f"  plan of {name}: {plan}" for plan, name in plans.items()]
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
