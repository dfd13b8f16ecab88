"""tandem.core.heap: fixed glibc thresholds keep large activations in the heap.

Each case runs in a fresh interpreter: the thresholds are process-wide and cannot be
read back, so only a process of its own shows what a setting does.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")

# Allocates and frees a 48 MiB buffer (above glibc's largest adaptive mmap threshold)
# 8 times after a first one; prints whether the thresholds were set and the page
# faults of those repeats (12288 faults per buffer mapped anew).
PROBE = """
import json, resource, sys, torch
from tandem.core.config.engine_args import EngineArgs
cfg = EngineArgs(model=sys.argv[1], device="cpu", num_threads=1).create_config()
cfg.configure_process()
from tandem.core import heap
torch.empty(12 << 20).fill_(1.0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(8):
    torch.empty(12 << 20).fill_(1.0)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps({"set": heap._STATE["set"], "faults": faults, "threads": torch.get_num_threads()}))
"""


def probe(model: str, malloc: str | None) -> dict[str, int]:
    env = {k: v for k, v in os.environ.items() if k != "TANDEM_CPU_MALLOC"}
    if malloc is not None:
        env["TANDEM_CPU_MALLOC"] = malloc
    out = subprocess.run(
        [sys.executable, "-c", PROBE, model], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_tuned_heap_reuses_large_buffers(tiny_model) -> None:
    got = probe(str(tiny_model), None)  # the default
    assert got["set"] and got["threads"] == 1
    # mapped anew each time that would be ~98k faults; the kernel may still reclaim the
    # idle heap pages now and then (proactive reclaim), so allow a few refaults
    assert got["faults"] < 3 * 12288, got


def test_system_malloc_is_left_alone(tiny_model) -> None:
    got = probe(str(tiny_model), "system")
    assert not got["set"]
    assert got["faults"] > 6 * 12288, got  # every repeat maps and faults its pages anew


def test_bad_value_names_the_variable(tiny_model, monkeypatch: pytest.MonkeyPatch) -> None:
    from tandem.core.heap import keep_activations_in_heap

    monkeypatch.setenv("TANDEM_CPU_MALLOC", "jemalloc")
    with pytest.raises(ValueError, match="TANDEM_CPU_MALLOC='jemalloc' is not allowed"):
        keep_activations_in_heap()


# Frees ~160 MiB of 4 KiB heap blocks but every 200th (so glibc's heap cannot shrink from
# its top) and prints the resident MiB before and after release_free_heap.
TRIM_PROBE = """
import json, psutil
from tandem.core.heap import release_free_heap
blocks = [bytearray(4096) for _ in range(40000)]
kept = blocks[::200]
del blocks
before = psutil.Process().memory_info().rss >> 20
ok = release_free_heap()
print(json.dumps({"ok": ok, "before": before, "after": psutil.Process().memory_info().rss >> 20}))
"""


def test_free_heap_goes_back_to_the_system() -> None:
    out = subprocess.run(
        [sys.executable, "-c", TRIM_PROBE], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["ok"] and got["before"] - got["after"] > 100, got
