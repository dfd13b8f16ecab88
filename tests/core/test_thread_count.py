"""EngineConfig.thread_count: EngineArgs.num_threads, else TANDEM_NUM_THREADS, else cores."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tandem.core.config.engine_args import EngineArgs


def _config(model: Path, **kw: object):
    return EngineArgs(model=str(model), device="cpu", **kw).create_config()


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def test_resolution_order(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TANDEM_NUM_THREADS", raising=False)
    assert _config(tiny_model).thread_count() == _cores()
    monkeypatch.setenv("TANDEM_NUM_THREADS", "3")
    assert _config(tiny_model).thread_count() == 3
    assert _config(tiny_model, num_threads=5).thread_count() == 5  # the argument wins


def test_bad_env_value_names_the_variable(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TANDEM_NUM_THREADS", "0")
    with pytest.raises(ValueError, match=r"TANDEM_NUM_THREADS must be an integer >= 1, got 0"):
        _config(tiny_model).thread_count()
