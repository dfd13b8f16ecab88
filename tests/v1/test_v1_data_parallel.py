"""Data-parallel replicas (``data_parallel_size=2``): two engine cores behind one front
door, balanced by the requests each holds; a replica that dies fails its own requests,
named, while the other keeps serving; nothing is left once the engine is gone."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from tp_support import Engine, Footprint, greedy, tokens

from tandem.core.config.engine_args import EngineArgs
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.testing import add_request
from tandem.v1 import LLMEngine

LONG = SamplingParams(temperature=0, max_tokens=300, ignore_eos=True)


def _args(tiny_dir: Path, **kw: Any) -> EngineArgs:
    return EngineArgs(model=str(tiny_dir), device="cpu", max_num_seqs=4, **kw)


def test_two_replicas_serve_and_survive_the_loss_of_one(tiny_dir: Path) -> None:
    with LLMEngine.from_engine_args(_args(tiny_dir), multiprocess=False) as engine:
        want = tokens(greedy(engine))
    before = Footprint.now()
    with LLMEngine.from_engine_args(_args(tiny_dir, data_parallel_size=2)) as engine:
        client = engine.client
        seen = Engine(list(client.pids.values()), set(), client.ipc_dirs)
        assert sorted(client.pids) == [
            f"data-parallel replica {i} {role}" for i in (0, 1) for role in ("core", "detokenizer")
        ]
        assert tokens(greedy(engine)) == want
        assert engine.stats().num_kv_blocks == 2 * client.replicas[0].num_kv_blocks

        # replica 1's core stopped, then killed: its requests cannot have finished
        core1 = client.pids["data-parallel replica 1 core"]
        os.kill(core1, signal.SIGSTOP)
        for i in range(4):
            add_request(engine, f"r{i}", [5 + i, 6, 7], LONG)
        assert client.loads() == [2, 2]
        os.kill(core1, signal.SIGKILL)
        done: dict[str, Any] = {}
        while engine.has_unfinished_requests():
            done.update({o.request_id: o for o in engine.step() if o.finished})
        failed = {rid for rid, out in done.items() if out.error is not None}
        assert failed == {"r1", "r3"}  # the second and fourth went to replica 1
        for rid in failed:
            assert done[rid].outputs[0].finish_reason == "error"
            assert "data-parallel replica 1 died" in done[rid].error
            assert "core process" in done[rid].error and "SIGKILL" in done[rid].error
        for rid in ("r0", "r2"):
            assert len(done[rid].outputs[0].token_ids) == LONG.max_tokens
        assert list(client.lost) == [1] and not engine.is_dead

        engine.check_health()  # one replica left: the engine still serves
        add_request(engine, "after", [9, 9], SamplingParams(max_tokens=3, ignore_eos=True))
        assert client.loads() == [1, -1]
        while engine.has_unfinished_requests():
            outs = engine.step()
        assert outs[-1].error is None and len(outs[-1].outputs[0].token_ids) == 3
    before.assert_left_nothing(seen)


def test_replicas_need_their_own_processes(tiny_dir: Path) -> None:
    with pytest.raises(ValueError, match=r"data_parallel_size=2 .* multiprocess=True"):
        LLMEngine.from_engine_args(_args(tiny_dir, data_parallel_size=2), multiprocess=False)
    with pytest.raises(ValueError, match=r"data_parallel_size must be >= 1, got 0"):
        _args(tiny_dir, data_parallel_size=0).validate()
