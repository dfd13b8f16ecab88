"""Start-up cost: a project that does not ask for the harness loads only its pytest face
(the roles, the isolation machinery and the leak checks stay unimported)."""

from __future__ import annotations

import pytest
from hx_support import run

RECORD = """
    import sys


    def pytest_sessionfinish(session):
        names = sorted(n for n in sys.modules if n.startswith("tandem.harness"))
        with open("loaded.txt", "w") as f:
            f.write("\\n".join(names))
"""

MACHINERY = (
    "tandem.harness.plugin.roles",
    "tandem.harness.isolation.pool",
    "tandem.harness.isolation.zygote",
    "tandem.harness.leaks.registry",
    "tandem.harness.leaks.processes",
    "tandem.harness.leaks.ops",
)


def _loaded(pytester: pytest.Pytester, *args: str) -> set[str]:
    pytester.makeconftest(RECORD)
    pytester.makepyfile(test_it="def test_it():\n    pass\n")
    run(pytester, *args).assert_outcomes(passed=1)
    return set((pytester.path / "loaded.txt").read_text().split())


def test_an_unconfigured_project_loads_no_machinery(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    loaded = _loaded(pytester)
    assert "tandem.harness.plugin" in loaded
    assert not loaded & set(MACHINERY), sorted(loaded & set(MACHINERY))


def test_a_configured_project_loads_what_it_uses(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nharness_leaks = fail\n")
    loaded = _loaded(pytester)
    assert {"tandem.harness.plugin.roles", "tandem.harness.leaks.registry"} <= loaded
