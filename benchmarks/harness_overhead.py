"""Per-test overhead of the harness's isolation, against the alternatives, in one run.

    python benchmarks/harness_overhead.py [--tests 40] [--preload "torch transformers"]

Runs the same suite of trivial tests under plain pytest (the plugin off), the harness's
default (``--isolate engine``: one forked child for the run), ``--isolate none`` (leak
checks only), ``--isolate test`` (a fresh child forked from the warm zygote for every
test) and ``pytest-forked`` (if installed), timing each test in the pytest process from
logstart to logfinish and each whole run, and times a fresh
``python -c "import torch, transformers"`` interpreter (the cost of a cold process).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TIMER = """
import json, os, time
_T = {}

def pytest_runtest_logstart(nodeid, location):
    _T[nodeid] = time.perf_counter()

def pytest_runtest_logfinish(nodeid, location):
    _T[nodeid] = time.perf_counter() - _T[nodeid]

def pytest_sessionfinish(session):
    if os.environ.get("BENCH_OUT") and not os.environ.get("PYTEST_XDIST_WORKER"):
        with open(os.environ["BENCH_OUT"], "w") as f:
            json.dump(_T, f)
"""


def _suite(folder: Path, tests: int, preload: list[str]) -> None:
    (folder / "conftest.py").write_text(TIMER)
    # every mode has the heavy modules loaded (pytest-forked forks the pytest process itself)
    head = "".join(f"import {name}  # noqa: F401\n" for name in preload) + "\n\n"
    body = head + "".join(f"def test_{i}():\n    assert {i} >= 0\n\n" for i in range(tests))
    (folder / "test_bench.py").write_text(body)
    (folder / "pytest.ini").write_text(
        "[pytest]\nharness_preload = " + " ".join(preload) + "\nharness_watch_prefixes = tandem\n"
    )


WALL: dict[tuple[str, ...], float] = {}


def _run(folder: Path, *args: str) -> list[float]:
    out = folder / "times.json"
    env = {**__import__("os").environ, "BENCH_OUT": str(out)}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        *args,
    ]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
    WALL[args] = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return [t * 1000 for t in json.loads(out.read_text()).values()]


def _fresh(preload: list[str], repeats: int) -> list[float]:
    code = "import " + ", ".join(preload) if preload else "pass"
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append((time.perf_counter() - start) * 1000)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=40, help="tests in the suite (default 40)")
    parser.add_argument(
        "--preload",
        default="torch transformers",
        help="modules the zygote preloads and the fresh interpreter imports",
    )
    parser.add_argument("--repeats", type=int, default=3, help="fresh interpreters to time")
    args = parser.parse_args(argv)
    if args.tests < 1:
        parser.error(f"--tests: expected a positive integer, got {args.tests}")
    preload = [m for m in args.preload.split() if importlib.util.find_spec(m) is not None]
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        folder = Path(tmp)
        _suite(folder, args.tests, preload)
        rows: dict[str, float | None] = {}
        walls: dict[str, float] = {}
        modes = {
            "plain pytest (plugin off)": ("-p", "no:tandem_harness"),
            "default (isolate=engine)": ("--isolate", "engine"),
            "no isolation": ("--isolate", "none"),
            "isolate=test (zygote fork)": ("--isolate", "test"),
        }
        if importlib.util.find_spec("pytest_forked") is not None:
            modes["pytest-forked"] = ("--isolate", "none", "--forked")
        else:
            rows["pytest-forked"] = None
        for name, mode in modes.items():
            rows[name] = statistics.median(_run(folder, *mode))
            walls[name] = WALL[mode]
        rows[f"fresh python -c 'import {', '.join(preload) or 'nothing'}'"] = statistics.median(
            _fresh(preload, args.repeats)
        )
    base = rows["no isolation"] or 0.0
    ours = rows["isolate=test (zygote fork)"] or 0.0
    print(f"per-test wall time, median over {args.tests} tests (preload: {' '.join(preload)})")
    for name, value in rows.items():
        if value is None:
            print(f"  {name:<45} skipped: not installed")
            continue
        ratio = value / ours if ours else float("nan")
        wall = f"   whole run {walls[name]:6.2f} s" if name in walls else ""
        print(f"  {name:<45} {value:9.2f} ms   x{ratio:7.2f} of isolate=test{wall}")
    print(f"  overhead of isolate=test over no isolation: {ours - base:.2f} ms per test")
    fresh = list(rows.values())[-1] or 0.0
    print(
        f"  isolate=test is {fresh / ours:.0f}x faster than a fresh interpreter"
        f" (goal >= 50x); median {ours:.2f} ms (goal <= 30 ms)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
