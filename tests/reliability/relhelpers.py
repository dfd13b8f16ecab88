"""Helpers the reliability suite shares: processes, socket directories, the probe request.

Imported by the suite's modules as ``relhelpers`` (pytest puts this directory on
``sys.path``), the way ``tests/harness`` imports ``hx_support``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

from tandem.core.inputs.sampling_params import SamplingParams

# the probe: a fixed greedy request whose tokens must never change while an engine lives
PROBE_IDS = [1, 5, 9, 14, 3, 27]
PROBE_TOKENS = 8


def probe_params() -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=PROBE_TOKENS, ignore_eos=True)


def probe(llm: Any) -> list[int]:
    """The probe's greedy tokens through the front door ``llm``."""
    out = llm.generate({"prompt_token_ids": PROBE_IDS}, probe_params(), use_tqdm=False)
    return list(out[0].outputs[0].token_ids)


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
