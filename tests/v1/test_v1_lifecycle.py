"""Engine v1's life cycle: start-up failure, crashes, parent death, clean shutdown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from proc_watch import wait_gone

from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.testing import add_request
from tandem.v1 import EngineDeadError, LLMEngine
from tandem.v1.errors import EngineStartupError

GREEDY = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)


def children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def gone(pid: int, timeout: float = 10.0) -> bool:
    return not wait_gone([pid], timeout)


def test_shutdown_leaves_nothing(make_args: Any) -> None:
    before_fds = psutil.Process().num_fds()
    engine = LLMEngine.from_engine_args(make_args())
    pids, ipc_dir = engine.client.pids, engine.client.ipc_dir
    assert ipc_dir is not None and os.path.isdir(ipc_dir)
    engine.shutdown()
    engine.shutdown()  # idempotent
    assert not os.path.exists(ipc_dir)
    assert all(gone(pid, 0.1) for pid in pids.values())
    assert not children() & set(pids.values())
    assert psutil.Process().num_fds() == before_fds
    with pytest.raises(RuntimeError, match="shut down"):
        add_request(engine, "x", [1, 2], GREEDY)


def test_dropped_engine_is_finalized(make_args: Any) -> None:
    engine = LLMEngine.from_engine_args(make_args())
    pids, ipc_dir = engine.client.pids, engine.client.ipc_dir
    del engine  # the finalizer holds no reference to the client
    assert all(gone(pid) for pid in pids.values())
    assert not os.path.exists(ipc_dir)


@pytest.mark.parametrize("role", ["core", "detokenizer"])
def test_killed_child_raises_engine_dead_error(role: str, make_args: Any) -> None:
    with LLMEngine.from_engine_args(make_args()) as engine:
        add_request(engine, "a", [5, 6, 7], GREEDY)
        engine.step()
        os.kill(engine.client.pids[role], signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(EngineDeadError, match=f"{role} process .* SIGKILL"):
            while True:
                engine.step()
        assert time.monotonic() - start < 5
        assert engine.is_dead
        with pytest.raises(EngineDeadError, match="unusable"):
            add_request(engine, "b", [1], GREEDY)
        other = [pid for r, pid in engine.client.pids.items() if r != role]
        assert all(gone(pid) for pid in other)
    with LLMEngine.from_engine_args(make_args()) as fresh:  # a new engine works
        add_request(fresh, "c", [5, 6], SamplingParams(max_tokens=2))
        while fresh.has_unfinished_requests():
            fresh.step()


def test_start_up_failure_carries_the_child_traceback(
    make_args: Any, tiny_dir: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in tiny_dir.iterdir():
        if f.is_file():
            (bad / f.name).write_bytes(f.read_bytes())
    weights = next(bad.glob("*.safetensors"))
    args = make_args(bad)
    config = args.create_config()  # the parent's checks pass ...
    weights.write_bytes(b"not a safetensors file")  # ... the child's load fails
    before = children()
    with pytest.raises(EngineStartupError, match=r"core process .* failed to start") as info:
        LLMEngine(config)
    assert "Traceback" in str(info.value)
    assert children() <= before


PARENT = textwrap.dedent("""
    import sys, time
    from tandem.core.config.engine_args import EngineArgs
    from tandem.v1 import LLMEngine
    engine = LLMEngine.from_engine_args(EngineArgs(model=sys.argv[1], device="cpu"))
    print(" ".join(str(p) for p in engine.client.pids.values()), flush=True)
    time.sleep(600)
""")


@pytest.mark.slow
def test_children_exit_when_the_parent_is_killed(tiny_dir: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tiny_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        line = parent.stdout.readline()
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2, line
        parent.kill()
        parent.wait()
        assert all(gone(pid) for pid in pids)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()


@pytest.mark.parametrize(
    "cycles", [pytest.param(3, id="3"), pytest.param(50, id="50", marks=pytest.mark.slow)]
)
def test_create_shutdown_cycles_do_not_grow(cycles: int, make_args: Any) -> None:
    import threading

    proc = psutil.Process()
    args = make_args()

    def cycle() -> None:
        with LLMEngine.from_engine_args(args) as engine:
            add_request(engine, "a", [5, 6], SamplingParams(max_tokens=1))
            while engine.has_unfinished_requests():
                engine.step()

    cycle()  # warm imports and caches
    fds, threads, kids = proc.num_fds(), threading.active_count(), children()
    for _ in range(cycles):
        cycle()
    assert proc.num_fds() == fds
    assert threading.active_count() == threads
    assert children() == kids


def test_parent_watch_ends_a_child_stuck_after_its_parent_died(tmp_path: Path) -> None:
    """A child whose main thread cannot be interrupted still goes once the parent is gone."""
    marker = tmp_path / "last-words"
    script = textwrap.dedent(
        f"""
        import os, signal, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", '''
        import os, signal, sys, time
        from tandem.v1.proc.procs import watch_parent
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stuck: the SIGTERM does nothing
        watch_parent(int(sys.argv[1]), interval=0.05, grace=0.5,
                     last_words=lambda: open({str(marker)!r}, "w").close())
        print(os.getpid(), flush=True)
        while True:
            time.sleep(1)
        ''', str(os.getpid())], stdout=subprocess.PIPE, text=True)
        print(child.stdout.readline().strip(), flush=True)
        """
    )
    parent = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    pid = int(parent.stdout.split()[0])
    assert gone(pid, 10), "the orphaned child is still running"
    assert marker.exists()


def test_a_second_sigterm_does_not_interrupt_the_clean_up() -> None:
    """The first SIGTERM unwinds the child; one more (the parent-death signal after the
    parent's own stop) must not raise again inside the clean-up it started."""
    script = textwrap.dedent(
        """
        import os, signal
        from tandem.v1.proc.procs import Terminate, install_signal_handlers
        install_signal_handlers()
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except Terminate:
            pass
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives during the clean-up
            print("cleaned up", flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "cleaned up", done.stderr
    assert "Terminate" not in done.stderr
