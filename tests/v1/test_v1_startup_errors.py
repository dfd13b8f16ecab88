"""A process of engine v1 that fails while it starts (the engine core, the detokenizer, a
data-parallel replica; a tensor-parallel rank in ``test_v1_tp_faults``, a Ray actor in
``test_v1_tp_ray``): the caller's ``EngineStartupError`` names the exception the child
raised, its type, message and last traceback lines, as engine v0 raises it in-process;
at once (no timeout waited for), and leaving nothing running.

The realistic failure is a KV cache the child finds too small: one block, where one
sequence of max_model_len=128 needs 8. The parent checks a block count given to it, so
the tests set it on the resolved config, as a memory budget too small would be found
only in the child.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tp_support import Engine, Footprint

from tandem.core.config.engine_args import EngineArgs, EngineConfig
from tandem.core.text.tokenizer import Tokenizer, load_tokenizer
from tandem.v1 import EngineDeadError, EngineStartupError, LLMEngine
from tandem.v1.frontend.client import MPClient

KV = (
    r"ValueError: the KV cache holds 1 blocks of 16 tokens \(num_kv_blocks=1\), "
    r"but one sequence of max_model_len=128 needs 8"
)
PROMPT_S = 60  # start-up of a few processes on a loaded machine, far below any timeout


def _too_small(args: EngineArgs) -> EngineConfig:
    config = args.create_config()
    config.cache.num_kv_blocks = 1
    return config


def _kv_args(make_args: Callable[..., EngineArgs], **kw: Any) -> EngineArgs:
    return make_args(max_model_len=128, max_num_seqs=4, **kw)


def _names_the_kv_error(exc: EngineDeadError, *tail: str) -> None:
    assert exc.error is not None and exc.error.type_name == "ValueError"
    assert "its traceback (last lines):\nTraceback (most recent call last):" in str(exc)
    for frame in tail:
        assert frame in exc.error.traceback


def test_the_core_that_cannot_fit_its_kv_cache(make_args: Callable[..., EngineArgs]) -> None:
    config = _too_small(_kv_args(make_args))
    before = Footprint.now()
    start = time.monotonic()
    with pytest.raises(EngineStartupError) as info:
        LLMEngine(config)
    assert time.monotonic() - start < PROMPT_S
    first = str(info.value).splitlines()[0]
    want = rf"^engine v1: the core process \(pid \d+\) failed to start \(exited with code 1\): {KV}"
    assert re.match(want, first), first
    _names_the_kv_error(info.value, "resolve_num_blocks", "model_runner.py")
    before.assert_left_nothing(Engine([], set(), []))


def test_the_core_failure_needs_no_relay_by_the_detokenizer(
    make_args: Callable[..., EngineArgs],
) -> None:
    """The core's words reach the client through the detokenizer, which relays them only
    once it runs its loop; one still loading its tokenizer (here: stopped) must not hide
    why the core failed. The core's report pipe tells it."""
    config = _too_small(_kv_args(make_args))
    client = MPClient(60.0)
    detokenizer = client.pids["detokenizer"]
    os.kill(detokenizer, signal.SIGSTOP)
    try:
        client.configure(config)
        deadline = time.monotonic() + PROMPT_S
        with pytest.raises(EngineDeadError, match=rf"the core process .*failed to start.*: {KV}"):
            while time.monotonic() < deadline:
                client.check()
                time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):  # gone already: stopped with the engine
            os.kill(detokenizer, signal.SIGCONT)
        client.shutdown()


class _NoFastBackend(Tokenizer):
    """A tokenizer the detokenizer must load in full, from its directory."""

    def decoder_json(self) -> None:
        return None


def test_the_detokenizer_that_cannot_load_its_tokenizer(
    make_args: Callable[..., EngineArgs], tiny_dir: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "tokenizer"
    shutil.copytree(tiny_dir, copy)
    tokenizer = _NoFastBackend(load_tokenizer(copy).hf, path=copy)
    shutil.rmtree(copy)  # removed while the engine starts: only the detokenizer sees it
    before = Footprint.now()
    client = MPClient(60.0)
    try:
        client.configure(make_args().create_config())
        want = (
            r"the detokenizer process \(pid \d+\) failed to start \(exited with code 1\): "
            r"ValueError: tokenizer directory does not exist: .*tokenizer"
        )
        with pytest.raises(EngineStartupError, match=want) as info:
            client.attach(tokenizer)
    finally:
        client.shutdown()
    assert info.value.error is not None and "load_decoder" in info.value.error.traceback
    before.assert_left_nothing(Engine([], set(), []))


@pytest.mark.slow
def test_a_data_parallel_replica_that_cannot_fit_its_kv_cache(
    make_args: Callable[..., EngineArgs],
) -> None:
    config = _too_small(_kv_args(make_args, data_parallel_size=2))
    before = Footprint.now()
    start = time.monotonic()
    with pytest.raises(
        EngineStartupError, match=rf"^data-parallel replica 0: .*core .*{KV}"
    ) as info:
        LLMEngine(config)
    assert time.monotonic() - start < PROMPT_S
    _names_the_kv_error(info.value, "resolve_num_blocks")
    before.assert_left_nothing(Engine([], set(), []))
