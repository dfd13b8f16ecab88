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

from tandem.core.config import EngineArgs
from tandem.core.sampling_params import SamplingParams
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
            engine.add_request("a", [5, 6, 7], long)
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
