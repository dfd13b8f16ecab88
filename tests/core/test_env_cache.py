from __future__ import annotations

import os

import pytest

from tandem.core.env_cache import clear_all, env_cache, registered_caches


def test_key_includes_env_values(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str | None] = []

    @env_cache("TANDEM_TEST_BACKEND")
    def pick(x: int) -> str:
        value = os.environ.get("TANDEM_TEST_BACKEND")
        calls.append(value)
        return f"{value}-{x}"

    monkeypatch.setenv("TANDEM_TEST_BACKEND", "torch")
    assert pick(1) == "torch-1" and pick(1) == "torch-1"
    assert calls == ["torch"] and pick.hits == 1 and pick.misses == 1
    monkeypatch.setenv("TANDEM_TEST_BACKEND", "flash_attn")
    assert pick(1) == "flash_attn-1"  # a plain lru_cache would answer "torch-1" here
    monkeypatch.delenv("TANDEM_TEST_BACKEND")
    assert pick(1) == "None-1"
    assert calls == ["torch", "flash_attn", None]
    assert pick.cache_len() == 3
    assert pick.__name__ == "pick"


def test_registered_and_cleared() -> None:
    @env_cache()
    def const(k: str = "a") -> list[str]:
        return [k]

    first = const(k="b")
    assert const(k="b") is first
    assert const in registered_caches()
    assert "env_cache()" in repr(const)
    assert clear_all() >= 1
    assert const.cache_len() == 0 and const.hits == 0
    assert const(k="b") is not first


@pytest.mark.parametrize("bad", ["", 3, None])
def test_bad_var_names(bad: object) -> None:
    with pytest.raises(TypeError, match=r"variable names must be non-empty strings"):
        env_cache(bad)  # type: ignore[arg-type]
