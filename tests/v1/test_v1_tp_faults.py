"""A tensor-parallel engine's faults and life cycle: a rank killed mid-generate ends the
call with EngineDeadError naming it, within seconds; an engine leaves no process, port,
socket directory or shared-memory segment behind, however it ends."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

import psutil
import pytest
from tp_support import Engine, Footprint

from tandem.core.config.engine_args import EngineArgs
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.testing import add_request
from tandem.v1 import EngineDeadError, LLMEngine

LONG = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)


def _args(tiny_dir: Any, **kw: Any) -> EngineArgs:
    return EngineArgs(model=str(tiny_dir), device="cpu", tensor_parallel_size=2, **kw)


def _rank(engine: LLMEngine, rank: int) -> int:
    return engine.client.pids[f"tensor-parallel rank {rank}"]


@pytest.mark.parametrize("rank", [1, pytest.param(0, marks=pytest.mark.slow)])
def test_a_killed_rank_ends_generate_naming_it(rank: int, tiny_dir: Any) -> None:
    before = Footprint.now()
    with LLMEngine.from_engine_args(_args(tiny_dir)) as engine:
        seen = Engine.seen(engine)
        assert seen.ports, "the rendezvous store and gloo listen on TCP ports"
        add_request(engine, "a", [5, 6, 7], LONG)
        engine.step()
        os.kill(_rank(engine, rank), signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(EngineDeadError, match=rf"tensor-parallel rank {rank} .*SIGKILL"):
            while True:
                engine.step()
        assert time.monotonic() - start < 10
        assert engine.is_dead
    before.assert_left_nothing(seen)


def test_a_killed_core_leaves_its_ranks_nothing_to_clean(tiny_dir: Any) -> None:
    """The core killed before it can stop its ranks (what a client whose grace ran out
    does): the ranks' socket folder lies inside the core's IPC folder, which the client
    removes, so nothing is left whoever dies first."""
    before = Footprint.now()
    with LLMEngine.from_engine_args(_args(tiny_dir)) as engine:
        seen = Engine.seen(engine)
        ipc_dir = engine.client.ipc_dir
        rank_dirs = [d for d in seen.dirs if d != ipc_dir]
        assert rank_dirs and all(os.path.dirname(d) == ipc_dir for d in rank_dirs), seen.dirs
        add_request(engine, "a", [5, 6, 7], LONG)
        engine.step()
        os.kill(engine.client.pids["core"], signal.SIGKILL)
        with pytest.raises(EngineDeadError, match=r"core .*SIGKILL"):
            while True:
                engine.step()
    # the ranks end on their parent's death signal, in their own time: wait (by the clock)
    procs = []
    for pid in seen.pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(pid))
    psutil.wait_procs(procs, timeout=60)
    before.assert_left_nothing(seen)


@pytest.mark.slow
def test_a_rank_killed_while_idle_is_seen_by_the_health_check(tiny_dir: Any) -> None:
    before = Footprint.now()
    with LLMEngine.from_engine_args(_args(tiny_dir)) as engine:
        seen = Engine.seen(engine)
        os.kill(_rank(engine, 1), signal.SIGKILL)
        deadline = time.monotonic() + 10
        with pytest.raises(EngineDeadError, match=r"tensor-parallel rank 1 .*SIGKILL"):
            while time.monotonic() < deadline:
                engine.check_health()
                time.sleep(0.1)
    before.assert_left_nothing(seen)


def test_create_shutdown_cycles_leave_nothing(tiny_dir: Any) -> None:
    before = Footprint.now()
    for _ in range(2):
        engine = LLMEngine.from_engine_args(_args(tiny_dir))
        seen = Engine.seen(engine)
        add_request(engine, "a", [5, 6], SamplingParams(max_tokens=2))
        while engine.has_unfinished_requests():
            engine.step()
        engine.shutdown()
        before.assert_left_nothing(seen)


@pytest.mark.slow
def test_a_rank_that_fails_to_load_fails_start_up_naming_its_error(
    tiny_dir: Any, tmp_path: Any
) -> None:
    from tandem.v1.errors import EngineStartupError

    args = _args(tiny_dir)
    config = args.create_config()
    config.cache.num_kv_blocks = 0  # every rank's cache check fails
    before = Footprint.now()
    start = time.monotonic()
    want = (
        r"the tensor-parallel rank \d process \(pid \d+\) failed to start: "
        r"ValueError: the KV cache holds 0 blocks of 16 tokens \(num_kv_blocks=0\)"
    )
    with pytest.raises(EngineStartupError, match=want) as info:
        LLMEngine(config)
    assert time.monotonic() - start < 60  # at once: no timeout waited for
    error = info.value.error
    assert error is not None and error.type_name == "ValueError"
    assert "rank.py" in error.traceback and "resolve_num_blocks" in error.traceback
    before.assert_left_nothing(Engine([], set(), []))
