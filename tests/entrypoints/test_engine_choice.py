"""Engine selection itself: entry-point discovery, the env var, bad names (no engine built).

These tests are not declared for an engine: they change ``TANDEM_ENGINE`` themselves.
The harness's ``isolated_env`` refuses that variable by design (it belongs to the
harness in engine-marked tests), so ``monkeypatch`` sets it here and restores it.
"""

from __future__ import annotations

import pytest

from tandem.core.engine import protocol as engines
from tandem.core.entrypoints.llm import LLM


def test_engines_are_discovered_by_entry_point() -> None:
    assert {"v0", "v1"} <= set(engines.installed_engines())
    from tandem.v0 import LLMEngine as V0
    from tandem.v1 import LLMEngine as V1

    assert engines.load_engine_class("v0") is V0
    assert engines.load_engine_class("v1") is V1


def test_engine_name_read_from_env_when_asked(monkeypatch) -> None:
    monkeypatch.setenv("TANDEM_ENGINE", "v1")
    assert engines.resolve_engine_name(None) == "v1"
    monkeypatch.setenv("TANDEM_ENGINE", "v0")
    assert engines.resolve_engine_name(None) == "v0"  # read again, never frozen
    assert engines.resolve_engine_name("v1") == "v1"  # an explicit choice wins
    monkeypatch.delenv("TANDEM_ENGINE")
    assert engines.resolve_engine_name(None) == engines.default_engine() == "v1"


def test_default_falls_back_to_what_is_installed(monkeypatch) -> None:
    monkeypatch.setattr(engines, "installed_engines", lambda: ["v0"])
    assert engines.default_engine() == "v0"
    monkeypatch.setattr(engines, "installed_engines", lambda: [])
    with pytest.raises(ValueError, match="no engine is installed"):
        engines.default_engine()


def test_unknown_engine_lists_installed(tiny_model) -> None:
    with pytest.raises(ValueError, match=r"unknown engine 'v9'; installed engines: v0, v1"):
        LLM(model=tiny_model, engine="v9")
    with pytest.raises(TypeError, match="engine must be a str"):
        LLM(model=tiny_model, engine=0)


def test_bad_env_value_is_named(tiny_model, monkeypatch) -> None:
    monkeypatch.setenv("TANDEM_ENGINE", "v7")
    with pytest.raises(ValueError, match="TANDEM_ENGINE='v7'"):
        LLM(model=tiny_model)


def test_other_env_vars_go_through_isolated_env(isolated_env) -> None:
    from tandem.core import envs

    isolated_env.setenv("TANDEM_ENGINE_READY_TIMEOUT", "7.5")
    assert envs.TANDEM_ENGINE_READY_TIMEOUT == 7.5
    with pytest.raises(ValueError, match="TANDEM_ENGINE selects the engine"):
        isolated_env.setenv("TANDEM_ENGINE", "v1")
