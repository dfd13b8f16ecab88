"""Faults in engine v1: a child killed mid-generate, a child failing at start-up, the parent killed.

Each fault must end in a clear error within seconds (never a hang), leave no process
running and no socket directory behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from proc_watch import descendants, wait_gone, wait_removed
from relhelpers import ipc_dirs

from tandem.core import LLM, SamplingParams
from tandem.v1 import EngineDeadError, EngineStartupError

pytestmark = [pytest.mark.reliability, pytest.mark.engines("v1")]

LONG = SamplingParams(temperature=0, max_tokens=100, ignore_eos=True)
FAULTS: list[str] = []


def injected(what: str) -> None:
    FAULTS.append(what)
    print(f"\nreliability fault injected #{len(FAULTS)} in this process: {what}")


@pytest.fixture
def private_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short private temp dir where engine v1 makes its socket directory (``tandem-v1-*``)."""
    root = tempfile.mkdtemp(prefix="rel-")
    monkeypatch.setattr(tempfile, "tempdir", root)
    yield Path(root)
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("role", ["core", "detokenizer"])
def test_child_killed_mid_generate(role: str, tiny_model: Path, private_tmp: Path) -> None:
    before = descendants()
    llm = LLM(model=tiny_model, engine="v1", max_model_len=128)
    try:
        client = llm.engine.client
        pids, ipc_dir = dict(client.pids), client.ipc_dir
        assert ipc_dirs(private_tmp) == [os.path.basename(ipc_dir)]
        caught: list[BaseException] = []

        def generate() -> None:
            prompts = [{"prompt_token_ids": [3 + i, 7, 11]} for i in range(8)]
            try:
                while True:  # generating whenever the kill comes
                    llm.generate(prompts, LONG, use_tqdm=False)
            except BaseException as exc:
                caught.append(exc)

        worker = threading.Thread(target=generate, daemon=True)
        worker.start()
        deadline = time.monotonic() + 30
        while llm.engine.get_num_unfinished_requests() < 8 and time.monotonic() < deadline:
            time.sleep(0.01)  # wait until every request is in flight
        time.sleep(0.1)
        assert worker.is_alive(), f"generate stopped before the fault: {caught}"
        os.kill(pids[role], signal.SIGKILL)
        injected(f"SIGKILL to the {role} process mid-generate")
        killed = time.monotonic()
        worker.join(timeout=15)
        assert not worker.is_alive(), "generate hangs after the child died"
        assert time.monotonic() - killed < 10
        assert len(caught) == 1 and isinstance(caught[0], EngineDeadError), caught
        assert role in str(caught[0]) and "SIGKILL" in str(caught[0])
        assert wait_gone(pids.values()) == []  # the other child is stopped too
        with pytest.raises(EngineDeadError, match="unusable"):
            llm.generate("again", LONG)
    finally:
        llm.shutdown()
    assert wait_removed(ipc_dir)
    assert ipc_dirs(private_tmp) == []
    assert descendants() <= before


def test_child_fails_during_start_up(tiny_model: Path, tmp_path: Path, private_tmp: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(tiny_model, bad)
    for weights in bad.glob("*.safetensors"):
        weights.write_bytes(b"\0" * 64)  # the parent never reads weights: only the child sees it
    before = descendants()
    injected("corrupt weights, seen only by the core child at start-up")
    start = time.monotonic()
    with pytest.raises(EngineStartupError) as info:
        LLM(model=bad, engine="v1", max_model_len=128)
    assert time.monotonic() - start < 60
    text = str(info.value)
    assert "core process" in text and "failed to start" in text and "Traceback" in text
    assert "safetensors" in text.lower() or "header" in text.lower()
    assert wait_gone(descendants() - before) == []
    assert ipc_dirs(private_tmp) == []


PARENT = textwrap.dedent("""
    import sys
    from tandem.core import LLM, SamplingParams
    llm = LLM(sys.argv[1], engine="v1", max_model_len=128)
    client = llm.engine.client
    print(client.ipc_dir, *client.pids.values(), flush=True)
    while True:  # busy generating when the kill comes
        llm.generate("once upon a time", SamplingParams(max_tokens=50), use_tqdm=False)
""")


def test_parent_killed(tiny_model: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tiny_model)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        fields = parent.stdout.readline().split()
        assert len(fields) == 3, fields
        ipc_dir, pids = fields[0], [int(p) for p in fields[1:]]
        assert os.path.isdir(ipc_dir)
        time.sleep(0.3)
        parent.kill()
        injected("SIGKILL to the parent mid-generate")
        parent.wait()
        assert wait_gone(pids) == [], "children outlived their parent"
        assert wait_removed(ipc_dir), f"socket directory {ipc_dir} left behind"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
