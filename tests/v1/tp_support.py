"""What the tensor-parallel tests of engine v1 share: greedy runs and what an engine
leaves behind once it is gone."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import psutil
from proc_watch import descendants, listening_anywhere, listening_ports, shm_segments, wait_gone

from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.testing import run_to_completion

PROMPTS = [
    [5, 9, 14, 3, 22, 8, 31, 40, 2, 17, 6, 11, 29],
    [7, 7, 12],
    [50, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18],
]
NEW = 12


def greedy(engine: Any, logprobs: int | None = None) -> list[Any]:
    """Each prompt's completion (greedy, EOS ignored), in prompt order."""
    params = SamplingParams(
        temperature=0, max_tokens=NEW, ignore_eos=True, logprobs=logprobs, prompt_logprobs=logprobs
    )
    done = run_to_completion(engine, [(str(i), p, params) for i, p in enumerate(PROMPTS)])
    return [done[str(i)] for i in range(len(PROMPTS))]


def tokens(outs: list[Any]) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in outs]


@dataclass(slots=True)
class Footprint:
    """What exists before an engine starts, to compare with what exists after it."""

    children: set[int]
    shm: set[str]

    @classmethod
    def now(cls) -> Footprint:
        return cls(descendants(), shm_segments())

    def assert_left_nothing(self, engine: Engine) -> None:
        """``engine`` (seen while it ran) left no process, port, directory, segment."""
        assert wait_gone(engine.pids) == [], f"processes still running: {engine.pids}"
        assert descendants() <= self.children
        assert listening_anywhere(engine.ports) == set(), f"still listening: {engine.ports}"
        left = [d for d in engine.dirs if os.path.exists(d)]
        assert not left, f"directories left: {left}"
        # the machine is shared: only a new segment named after one of ours is ours
        new = shm_segments() - self.shm
        assert not [s for s in new if any(str(p) in s for p in engine.pids)], new


@dataclass(slots=True)
class Engine:
    """An engine's processes, ports and socket directories while it runs."""

    pids: list[int]
    ports: set[int]
    dirs: list[str]

    @classmethod
    def seen(cls, engine: Any) -> Engine:
        pids = list(engine.client.pids.values())
        dirs = [engine.client.ipc_dir]
        for name, pid in engine.client.pids.items():
            if name.startswith("tensor-parallel"):  # ... child rank DIR PARENT_PID REPORT_FD
                cmd = psutil.Process(pid).cmdline()
                dirs.append(cmd[cmd.index("rank") + 1])
        return cls(pids, listening_ports(pids), sorted(set(dirs)))
