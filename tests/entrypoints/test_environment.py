"""The front door's environment contract: choosing never writes, a later choice still reads.

``LLM(...)`` reads ``TANDEM_ENGINE`` (when ``engine`` is None) and the model reads
``TANDEM_ATTENTION_BACKEND`` when it picks its attention kernels; neither may write
the variable it reads, nor any other. A write of the chosen value would outlive the
``LLM`` and decide for every later ``LLM()`` in the process.

The harness sets ``TANDEM_ENGINE`` to the engine under test and leaves that variable
out of its own leak check, so these tests check it themselves: they build an ``LLM`` for
the *other* engine (a write of the value the harness already set would change nothing)
and then ask what a plain ``LLM()`` picks. ``monkeypatch`` undoes its changes, and so
would hide a write from the harness; every test here compares ``os.environ`` itself.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tandem.core.config.engine_args import EngineArgs
from tandem.core.engine import protocol as engines
from tandem.core.entrypoints.llm import LLM
from tandem.core.inputs.sampling_params import SamplingParams
from tandem.core.layers.attention_backend import (
    available_attention_backends,
    get_attention_backend,
    select_attention_backend,
)
from tandem.core.testing import add_request

ENGINE_VAR = "TANDEM_ENGINE"
BACKEND_VAR = "TANDEM_ATTENTION_BACKEND"
MAX_MODEL_LEN = 128
SHORT = SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True)
OTHER = {"v0": "v1", "v1": "v0"}

pytestmark = pytest.mark.engines("v0", "v1")


def _changes(before: dict[str, str]) -> list[str]:
    now = dict(os.environ)
    out = []
    for name in sorted(set(before) | set(now)):
        old, new = before.get(name), now.get(name)
        if old == new:
            continue
        if old is None:
            out.append(f"{name} was added (= {new!r})")
        elif new is None:
            out.append(f"{name} was removed (was {old!r})")
        else:
            out.append(f"{name} was changed from {old!r} to {new!r}")
    return out


def _assert_untouched(before: dict[str, str], what: str) -> None:
    changes = _changes(before)
    assert not changes, f"{what} changed os.environ: {'; '.join(changes)}"


def _build(model: Path, engine: str | None) -> LLM:
    return LLM(model=model, engine=engine, max_model_len=MAX_MODEL_LEN)


def _generate(llm: LLM) -> None:
    out = llm.generate("hello", SHORT, use_tqdm=False)
    assert len(out[0].outputs[0].token_ids) == SHORT.max_tokens


def _select() -> str:
    """A fresh selection on the CPU: the answer cached for the same variable value (by an
    earlier test in this process) would skip the selector, and with it any write."""
    select_attention_backend.cache_clear()
    return select_attention_backend("cpu")


def _default_backend() -> str:
    """What the selector answers on the CPU with ``TANDEM_ATTENTION_BACKEND`` unset."""
    available = available_attention_backends("cpu")
    return "cpu" if "cpu" in available else "torch"


# --------------------------------------------------------------------- TANDEM_ENGINE


@pytest.mark.parametrize("choice", ["current", "other", "default"])
def test_llm_leaves_the_environment_as_it_was(
    tiny_model: Path, engine: str, choice: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Construct, generate, shut down: ``os.environ`` is the same at every step.

    ``other`` builds the engine the harness is not running (a write of the chosen name
    changes TANDEM_ENGINE); ``default`` builds with TANDEM_ENGINE unset (a write adds it).
    """
    if choice == "default":
        monkeypatch.delenv(ENGINE_VAR)
    asked = {"current": engine, "other": OTHER[engine], "default": None}[choice]
    expected = {"current": engine, "other": OTHER[engine], "default": "v1"}[choice]
    before = dict(os.environ)
    llm = _build(tiny_model, asked)
    try:
        _assert_untouched(before, f"LLM(engine={asked!r})")
        assert llm.engine_name == expected
        assert isinstance(llm.engine, engines.load_engine_class(expected))
        _generate(llm)
        _assert_untouched(before, f"LLM(engine={asked!r}).generate()")
    finally:
        llm.shutdown()
    _assert_untouched(before, f"LLM(engine={asked!r}).shutdown()")


def test_llm_without_engine_follows_the_variable_after_another_engine(
    tiny_model: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``LLM()`` after ``LLM(engine=<other>)`` reads TANDEM_ENGINE, then the default."""
    other = OTHER[engine]
    with _build(tiny_model, other) as first:
        assert first.engine_name == other
        _generate(first)
    with _build(tiny_model, None) as later:
        assert later.engine_name == engine, (
            f"LLM() built {later.engine_name!r} after LLM(engine={other!r}); the harness set "
            f"TANDEM_ENGINE={engine!r} and it reads {os.environ.get(ENGINE_VAR)!r} now"
        )
        assert isinstance(later.engine, engines.load_engine_class(engine))
        _generate(later)

    # unset: the default (v1), whatever engine an earlier LLM used (an earlier LLM of
    # the default engine itself could not show a write, so only the other one is built)
    monkeypatch.delenv(ENGINE_VAR)
    if other != engines.default_engine():
        with _build(tiny_model, other) as again:
            assert again.engine_name == other
        assert ENGINE_VAR not in os.environ, (
            f"LLM(engine={other!r}) set TANDEM_ENGINE={os.environ.get(ENGINE_VAR)!r}"
        )
    with _build(tiny_model, None) as plain:
        assert plain.engine_name == engines.default_engine() == "v1", (
            f"LLM() with TANDEM_ENGINE unset built {plain.engine_name!r} after "
            f"LLM(engine={other!r}), not the default 'v1'"
        )
        assert isinstance(plain.engine, engines.load_engine_class("v1"))


# --------------------------------------------------------- TANDEM_ATTENTION_BACKEND


def test_backend_selection_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """The selector (what every model calls) reads the variable and never writes it."""
    monkeypatch.delenv(BACKEND_VAR, raising=False)
    before = dict(os.environ)
    chosen = _select()
    get_attention_backend(chosen)
    _assert_untouched(before, f"select_attention_backend('cpu') -> {chosen!r}")
    assert chosen == _default_backend()
    for name in available_attention_backends("cpu"):
        monkeypatch.setenv(BACKEND_VAR, name)
        before = dict(os.environ)
        assert _select() == name
        get_attention_backend(name)
        _assert_untouched(before, f"select_attention_backend('cpu') with {BACKEND_VAR}={name}")
    monkeypatch.delenv(BACKEND_VAR)
    assert _select() == _default_backend()
    assert BACKEND_VAR not in os.environ


def _in_process_engine(model: Path, engine: str) -> Any:
    """The engine under test with its model in this process (v1: the in-process core)."""
    cls = engines.load_engine_class(engine)
    args = EngineArgs.from_kwargs(os.fspath(model), max_model_len=MAX_MODEL_LEN)
    if engine == "v1":
        return cls.from_engine_args(args, multiprocess=False)
    return cls.from_engine_args(args)


def _model_backend(eng: Any, engine: str) -> str | None:
    """The attention backend the engine's model ran last."""
    runner = eng.client.core.runner if engine == "v1" else eng.runner
    return runner.model.attention_backend


def _run_in_process(model: Path, engine: str) -> str | None:
    select_attention_backend.cache_clear()  # the model's selection runs, not a cached one
    eng = _in_process_engine(model, engine)
    try:
        add_request(eng, "env-0", "hello", SHORT)
        while eng.has_unfinished_requests():
            eng.step()
        return _model_backend(eng, engine)
    finally:
        eng.shutdown()


def test_engine_backend_choice_writes_nothing_and_follows_the_variable(
    tiny_model: Path, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's model picks its backend from the variable at every new engine and
    leaves the variable as the user set it (or unset)."""
    monkeypatch.setenv(BACKEND_VAR, "torch")
    before = dict(os.environ)
    assert _run_in_process(tiny_model, engine) == "torch"
    _assert_untouched(before, f"a run of engine {engine} with {BACKEND_VAR}=torch")

    monkeypatch.delenv(BACKEND_VAR)
    before = dict(os.environ)
    ran = _run_in_process(tiny_model, engine)
    _assert_untouched(before, f"a run of engine {engine} with {BACKEND_VAR} unset")
    assert ran == _default_backend(), (
        f"with {BACKEND_VAR} unset the model ran {ran!r}, not the default "
        f"{_default_backend()!r}, after a run with {BACKEND_VAR}=torch"
    )
    assert _select() == _default_backend()


@pytest.mark.parametrize("choice", ["current", "other"])
def test_llm_leaves_the_backend_variable_as_the_user_set_it(
    tiny_model: Path, engine: str, choice: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the front door (v1: the model in its engine-core process, so a write in
    the client shows here), unset stays unset; a later selection still reads it."""
    asked = engine if choice == "current" else OTHER[engine]
    monkeypatch.delenv(BACKEND_VAR, raising=False)
    select_attention_backend.cache_clear()  # a v0 model selects here: let it run
    before = dict(os.environ)
    with _build(tiny_model, asked) as llm:
        _generate(llm)
        _assert_untouched(before, f"LLM(engine={asked!r}) with {BACKEND_VAR} unset")
    _assert_untouched(before, f"LLM(engine={asked!r}).shutdown() with {BACKEND_VAR} unset")
    assert _select() == _default_backend()

    if asked == "v0":
        # the model runs here, so it must follow a forced backend (v1's model runs in
        # its engine-core process: the in-process test above covers its choice)
        monkeypatch.setenv(BACKEND_VAR, "torch")
        select_attention_backend.cache_clear()
        before = dict(os.environ)
        with _build(tiny_model, asked) as llm:
            _generate(llm)
            assert llm.engine.runner.model.attention_backend == "torch"
        _assert_untouched(before, f"LLM(engine={asked!r}) with {BACKEND_VAR}=torch")
        monkeypatch.delenv(BACKEND_VAR)
        assert _select() == _default_backend()
