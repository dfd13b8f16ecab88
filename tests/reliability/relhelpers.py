"""Helpers the reliability suite shares: processes, socket directories, the probe request.

Imported by the suite's modules as ``relhelpers`` (pytest puts this directory on
``sys.path``), the way ``tests/harness`` imports ``hx_support``.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

from tandem.core.sampling_params import SamplingParams

# the probe: a fixed greedy request whose tokens must never change while an engine lives
PROBE_IDS = [1, 5, 9, 14, 3, 27]
PROBE_TOKENS = 8


def probe_params() -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=PROBE_TOKENS, ignore_eos=True)


def probe(llm: Any) -> list[int]:
    """The probe's greedy tokens through the front door ``llm``."""
    out = llm.generate({"prompt_token_ids": PROBE_IDS}, probe_params(), use_tqdm=False)
    return list(out[0].outputs[0].token_ids)


def descendants() -> set[int]:
    """Live (non-zombie) descendant pids of this process."""
    out = set()
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if proc.status() != psutil.STATUS_ZOMBIE:
                out.add(proc.pid)
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids: Iterable[int], timeout: float = 10.0) -> list[int]:
    """Wait until every pid has exited; the ones still running after ``timeout``."""
    left = list(pids)
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        left = [pid for pid in left if alive(pid)]
        if left:
            time.sleep(0.05)
    return [pid for pid in left if alive(pid)]


def wait_removed(path: str | os.PathLike[str], timeout: float = 5.0) -> bool:
    """Wait until ``path`` no longer exists; whether it is gone."""
    deadline = time.monotonic() + timeout
    while os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not os.path.exists(path)


def ipc_dirs(root: str | os.PathLike[str]) -> list[str]:
    """Engine v1 socket directories (``tandem-v1-*``) directly under ``root``."""
    return sorted(p.name for p in Path(root).glob("tandem-v1-*"))


def rss(pids: Iterable[int]) -> int:
    """Resident memory in bytes of this process and ``pids`` together."""
    total = psutil.Process().memory_info().rss
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            total += psutil.Process(pid).memory_info().rss
    return total


def engine_pids(engine: Any) -> list[int]:
    """The child pids of an engine (engine v1 multi-process); none for an in-process one."""
    client = getattr(engine, "client", None)
    return list(getattr(client, "pids", {}).values())
