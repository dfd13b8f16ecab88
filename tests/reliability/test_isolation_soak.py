"""Isolation soak: a fixed subset of the suite, three times in shuffled orders and once on
two xdist workers, must give every test the same outcome each time.

The order is shuffled by handing pytest the test ids in a seeded random order (no
ordering plugin needed); outcomes are read from each run's JUnit XML.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = [pytest.mark.reliability, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SUBSET = ["tests/core"]
BASE = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]


def collect() -> list[str]:
    run = subprocess.run(
        [*BASE, "--collect-only", *SUBSET], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    ids = [line for line in run.stdout.splitlines() if "::" in line]
    assert run.returncode == 0 and ids, run.stdout[-2000:] + run.stderr[-2000:]
    return ids


def outcomes(args: list[str], xml: Path) -> dict[str, str]:
    """Run pytest with ``args``; each test's outcome (class+name) from the JUnit XML."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    run = subprocess.run(
        [*BASE, f"--junitxml={xml}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert xml.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    found: dict[str, str] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        key = f"{case.get('classname')}::{case.get('name')}"
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        found[key] = kinds[0] if kinds else "passed"
    return found


def test_same_outcomes_in_any_order_and_in_parallel(tmp_path: Path) -> None:
    ids = collect()
    runs: dict[str, dict[str, str]] = {}
    for seed in (1, 2, 3):
        order = ids[:]
        random.Random(seed).shuffle(order)
        runs[f"shuffled-{seed}"] = outcomes(order, tmp_path / f"order-{seed}.xml")
    runs["xdist-2"] = outcomes(["-n", "2", *SUBSET], tmp_path / "xdist.xml")
    first = runs["shuffled-1"]
    assert len(first) == len(ids), (len(first), len(ids))
    flaky = sorted(
        key
        for key in set().union(*runs.values())
        if len({run.get(key, "missing") for run in runs.values()}) > 1
    )
    counts = {name: len(run) for name, run in runs.items()}
    print(f"\nreliability isolation soak: {len(ids)} tests x {counts}; flaky tests: {len(flaky)}")
    assert flaky == [], {key: {n: r.get(key) for n, r in runs.items()} for key in flaky}
    assert all(outcome == "passed" for outcome in first.values())
