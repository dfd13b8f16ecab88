"""The ``ray`` executor: without Ray the error says how to install it; with Ray (slow),
two ranks on a two-node cluster made with Ray's own cluster utilities give one
process's tokens, and a rank killed mid-generate ends the engine naming it."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from tp_support import greedy, tokens

from tandem.core.config.engine_args import EngineArgs
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.testing import add_request
from tandem.v1 import EngineDeadError, LLMEngine


def _args(tiny_dir: Path, **kw: Any) -> EngineArgs:
    kw.setdefault("tensor_parallel_size", 2)
    return EngineArgs(
        model=str(tiny_dir), device="cpu", max_num_seqs=4, distributed_executor_backend="ray", **kw
    )


def test_without_ray_the_error_says_how_to_install_it(
    tiny_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ImportError, match=r"pip install 'tandem-engine-v1\[ray\]'"):
        LLMEngine.from_engine_args(_args(tiny_dir))


@pytest.mark.slow
@pytest.mark.isolate("test")  # Ray keeps process-wide state (RAY_AUTH_MODE) a later cluster needs
def test_two_ranks_on_a_two_node_ray_cluster(tiny_dir: Path) -> None:
    env = dict(os.environ)  # importing ray and ray.init set variables of their own
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    with LLMEngine.from_engine_args(_args(tiny_dir, tensor_parallel_size=1)) as engine:
        want = tokens(greedy(engine))
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False)
        # the core in this process: it joins the cluster this process is connected to
        with LLMEngine.from_engine_args(_args(tiny_dir), multiprocess=False) as engine:
            executor = engine.client.runner
            assert len(set(executor.nodes)) == 2, "one rank per node"
            assert tokens(greedy(engine)) == want
            long = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
            add_request(engine, "a", [5, 6, 7], long)
            engine.step()
            os.kill(executor.pids["tensor-parallel rank 1"], signal.SIGKILL)
            with pytest.raises(EngineDeadError, match=r"tensor-parallel rank 1 .*died"):
                while True:
                    engine.step()
        assert ray.is_initialized(), "a connection the caller made stays the caller's"
    finally:
        ray.shutdown()
        cluster.shutdown()
        os.environ.clear()
        os.environ.update(env)


class _RayTaskError(Exception):
    """The shape of Ray's error for an exception raised in an actor: the exception as
    ``cause``, the text the traceback formatted there (with colour codes)."""

    def __init__(self, cause: BaseException, text: str) -> None:
        super().__init__(text)
        self.cause = cause


def test_an_actor_exception_is_unwrapped_from_ray_error() -> None:
    from tandem.v1.proc.ray_executor import raised

    text = (
        "\x1b[36mray::RankActor.start()\x1b[39m (pid=7, ip=10.0.0.1)\n"
        '  File "rank.py", line 9, in __init__\n'
        "ValueError: the KV cache holds 1 blocks"
    )
    error = raised(_RayTaskError(ValueError("the KV cache holds 1 blocks"), text))
    assert error.summary == "ValueError: the KV cache holds 1 blocks"
    assert error.traceback.startswith("ray::RankActor.start() (pid=7")  # colours gone
    assert error.traceback.endswith("ValueError: the KV cache holds 1 blocks")
    assert raised(RuntimeError("no cause")).summary == "RuntimeError: no cause"


@pytest.mark.slow
@pytest.mark.isolate("test")  # see test_two_ranks_on_a_two_node_ray_cluster
def test_a_rank_actor_that_cannot_fit_its_kv_cache_names_its_error(tiny_dir: Path) -> None:
    from tp_support import Engine, Footprint

    from tandem.v1 import EngineStartupError

    env = dict(os.environ)  # importing ray and ray.init set variables of their own
    ray = pytest.importorskip("ray")
    config = _args(tiny_dir, max_model_len=128).create_config()
    config.cache.num_kv_blocks = 1  # one sequence of 128 tokens needs 8
    before = Footprint.now()
    # a cluster of its own: another test's cluster may be running on this machine
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        want = (
            r"the tensor-parallel rank \d process \(pid \d+\) failed to start: ValueError: "
            r"the KV cache holds 1 blocks of 16 tokens \(num_kv_blocks=1\), but one sequence "
            r"of max_model_len=128 needs 8"
        )
        with pytest.raises(EngineStartupError, match=want) as info:
            LLMEngine(config, multiprocess=False)
        error = info.value.error
        assert error is not None and error.type_name == "ValueError"
        assert "RankActor.start" in error.traceback and "resolve_num_blocks" in error.traceback
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(env)
    before.assert_left_nothing(Engine([], set(), []))
