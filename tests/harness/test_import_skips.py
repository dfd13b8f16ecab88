"""``--harness-fail-import-skips``: a skip caused by a failed import is an error; a skip for
missing hardware or a missing tool stays a skip, counted in the summary."""

from __future__ import annotations

import pytest
from hx_support import ini, run

SUITE = {
    "test_module_level": """
        import pytest

        pytest.importorskip("hx_not_installed_a")

        def test_never():
            pass
    """,
    "test_skips": """
        import pytest

        @pytest.fixture
        def needs_b():
            return pytest.importorskip("hx_not_installed_b")

        def test_in_body():
            pytest.importorskip("hx_not_installed_c")

        def test_in_fixture(needs_b):
            pass

        def test_by_hand():
            try:
                import hx_not_installed_d  # noqa: F401
            except ImportError:
                pytest.skip("hx_not_installed_d is optional")

        def test_cuda_only():
            try:
                import hx_not_installed_e  # noqa: F401
            except ImportError:
                pytest.skip("needs CUDA and hx_not_installed_e")

        @pytest.fixture(scope="session")
        def tool():
            pytest.skip("no llama.cpp venv to convert with (make one with a script)")

        def test_missing_tool(tool):
            pass

        def test_allowed():
            pytest.importorskip("hx_allowed_f")

        def test_found():
            assert pytest.importorskip("json").dumps(1) == "1"
    """,
}


@pytest.mark.parametrize("how", ["flag", "ini", "flag-isolated"])
def test_import_skips_are_errors(pytester: pytest.Pytester, how: str) -> None:
    on = "harness_fail_import_skips = true" if how == "ini" else ""
    ini(pytester, f"harness_allowed_import_skips = hx_allowed_f\n{on}")
    pytester.makepyfile(**SUITE)
    args = {"flag": ["--harness-fail-import-skips"], "ini": []}.get(
        how, ["--harness-fail-import-skips", "--isolate", "test"]
    )
    result = run(pytester, *args, "-rfEs", "--continue-on-collection-errors")
    result.assert_outcomes(passed=1, failed=2, errors=2, skipped=3)
    result.stdout.fnmatch_lines_random(
        [
            "ERROR test_module_level.py - *",
            "test_module_level.py was skipped because 'hx_not_installed_a' cannot be imported*",
            "FAILED test_skips.py::test_in_body*",
            "ERROR test_skips.py::test_in_fixture*",
            "FAILED test_skips.py::test_by_hand*",
            "*test_skips.py::test_in_body was skipped because 'hx_not_installed_c' cannot be "
            "imported (could not import 'hx_not_installed_c': No module named *",
            "*test_skips.py::test_by_hand was skipped because 'hx_not_installed_d' cannot be "
            "imported (hx_not_installed_d is optional)*",
            "SKIPPED * needs CUDA and hx_not_installed_e",
            "SKIPPED * no llama.cpp venv to convert with*",
            "SKIPPED * could not import 'hx_allowed_f'*",
            "*= skips (harness_fail_import_skips) =*",
            "1 for missing hardware (GPU/CUDA), 1 for other reasons (a missing tool, a condition), "
            "1 for an allowed missing import",
            "  1 x needs CUDA and hx_not_installed_e",
        ]
    )


@pytest.mark.parametrize("option", [False, True])
def test_without_the_option_they_stay_skips(pytester: pytest.Pytester, option: bool) -> None:
    """Without the option: skips. The option alone leaves the rest of the harness off."""
    pytester.makepyfile(**SUITE)
    if option:
        result = run(pytester, "--harness-fail-import-skips", "--continue-on-collection-errors")
        result.assert_outcomes(passed=1, failed=3, errors=2, skipped=2)
        assert "tandem-harness: isolation" not in result.stdout.str()
        return
    result = run(pytester)
    result.assert_outcomes(passed=1, skipped=7)
    assert "skips (harness_fail_import_skips)" not in result.stdout.str()
    assert "tandem-harness: isolation" not in result.stdout.str()  # the harness is off
