"""An outside project configures the harness wholly from its pyproject.toml and sees none of
this project's names: no default of the harness is Tandem's."""

from __future__ import annotations

import json
import os
import re

import pytest
from hx_support import run

PYPROJECT = """
[tool.pytest.ini_options]
harness_watch_prefixes = ["shop"]
harness_engine_env = "SHOP_BACKEND"
harness_engines = ["fast", "safe"]
harness_default_engines = ["fast", "safe"]
harness_engines_env = "SHOP_BACKENDS"
harness_preload = ["shop"]
harness_isolation = "module"
harness_start_method = "fork"
harness_timeout = "120"
harness_ops_namespace = "shop"
harness_cache_clearers = ["shop:clear_prices"]
harness_leaks = "fail"
harness_engine_report = "coverage.json"
harness_fail_import_skips = true
"""

SHOP = """
    import functools

    CLEARED = []

    @functools.lru_cache
    def rate(backend):
        return 2 if backend == "safe" else 1

    def clear_prices():
        CLEARED.append(1)
"""

TESTS = """
    import os, sys
    import pytest
    import shop
    from tandem.harness.plugin.state import run_state

    def test_settings_come_from_the_ini(request, engine):
        run = run_state(request.config)
        s = run.settings
        assert s.watch_prefixes == ("shop",)
        assert (s.engine_env, s.engines, s.default_engines) == (
            "SHOP_BACKEND", ("fast", "safe"), ("fast", "safe"))
        assert (s.isolation, s.start_method, s.timeout) == ("module", "fork", 120.0)
        assert s.leaks == "fail"
        assert (s.ops_namespace, s.cache_clearers) == ("shop", ("shop:clear_prices",))
        assert s.preload == ("shop",) and s.engine_report == "coverage.json"
        assert run.harness.watcher.prefixes == ("shop",)
        assert run.harness.ops.namespace == "shop"
        assert "tandem" not in repr(s).lower()
        assert os.environ["SHOP_BACKEND"] == engine
        assert not [name for name in os.environ if "TANDEM" in name.upper()]
        assert shop.CLEARED  # the configured clearer ran before the first test

    def test_a_leak_is_named_in_the_project_s_terms(engine):
        shop.rate = lambda backend: 0  # a patch never undone
        os.environ["SHOP_BACKEND"] = "other"

    def test_and_undone(engine):
        assert shop.rate(engine) in (1, 2)
        assert os.environ["SHOP_BACKEND"] == engine
"""


def test_an_outside_project_is_configured_from_its_pyproject(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.startswith("TANDEM_")]:  # this project's own
        monkeypatch.delenv(name)  # (its test cache): an outside project has none of them
    pytester.makepyprojecttoml(PYPROJECT)
    pytester.makepyfile(shop=SHOP, test_shop=TESTS)
    pytester.syspathinsert()
    result = run(pytester, "-p", "no:randomly")
    result.assert_outcomes(passed=6, errors=2)
    result.stdout.fnmatch_lines_random(
        [
            "tandem-harness: isolation=module start=fork leaks=fail timeout=120s *",
            "*shop.rate was replaced by <function *<lambda> at *",
            "*env var SHOP_BACKEND was changed from 'fast' to 'other'",
            "*env var SHOP_BACKEND was changed from 'safe' to 'other'",
        ]
    )
    # the harness's own name aside, nothing of this project shows
    shown = re.sub(r"tandem[-.]harness", "", result.stdout.str(), flags=re.IGNORECASE)
    assert "tandem" not in shown.lower(), shown
    report = json.loads((pytester.path / "coverage.json").read_text())
    assert sorted(report["engines"]) == ["fast", "safe"]


def test_scoped_ops_without_a_namespace_says_what_to_set(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\nharness_isolation = "none"\n')
    pytester.makepyfile(
        test_ops="""
        def test_ops(scoped_ops):
            pass
    """
    )
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*scoped_ops: set harness_ops_namespace*"])
    assert "tandem::" not in result.stdout.str()
