from __future__ import annotations

import pytest

from tandem.core import envs


def test_engine_read_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TANDEM_ENGINE", raising=False)
    assert envs.TANDEM_ENGINE is None
    monkeypatch.setenv("TANDEM_ENGINE", "v1")
    assert envs.TANDEM_ENGINE == "v1"
    monkeypatch.setenv("TANDEM_ENGINE", "v0")
    assert envs.TANDEM_ENGINE == "v0"


def test_empty_value_means_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TANDEM_ENGINE_READY_TIMEOUT", "")
    assert envs.TANDEM_ENGINE_READY_TIMEOUT == 120.0
    monkeypatch.setenv("TANDEM_ENGINE_READY_TIMEOUT", "2.5")
    assert envs.TANDEM_ENGINE_READY_TIMEOUT == 2.5


def test_choices_are_enforced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TANDEM_ENGINE", "v2")
    message = r"TANDEM_ENGINE='v2' is not allowed; choose one of v0, v1"
    with pytest.raises(ValueError, match=message):
        _ = envs.TANDEM_ENGINE


@pytest.mark.parametrize(
    ("raw", "value"), [("1", True), ("yes", True), ("off", False), ("False", False)]
)
def test_bool_parsing(monkeypatch: pytest.MonkeyPatch, raw: str, value: bool) -> None:
    monkeypatch.setenv("TANDEM_DEBUG_CHECKS", raw)
    assert envs.TANDEM_DEBUG_CHECKS is value


@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("TANDEM_DEBUG_CHECKS", "maybe", "TANDEM_DEBUG_CHECKS='maybe': expected one of 1/0"),
        ("TANDEM_NUM_THREADS", "four", "TANDEM_NUM_THREADS='four'"),
        ("TANDEM_ENGINE_READY_TIMEOUT", "soon", "TANDEM_ENGINE_READY_TIMEOUT='soon'"),
    ],
)
def test_bad_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, raw: str, message: str
) -> None:
    monkeypatch.setenv(name, raw)
    with pytest.raises(ValueError, match=message):
        getattr(envs, name)


def test_unknown_attribute() -> None:
    with pytest.raises(AttributeError, match=r"has no attribute 'TANDEM_NOPE'"):
        _ = envs.TANDEM_NOPE


def test_registry_is_complete_and_listed() -> None:
    assert "TANDEM_ENGINE" in envs.REGISTRY
    for name, var in envs.REGISTRY.items():
        assert name == var.name and name.startswith("TANDEM_") and var.help
        assert name in dir(envs) and name in envs.__all__
