"""Expansion of steps into jobs, their command lines, selection by name, and glob semantics."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ci import choose, load, parse, paths
from ci.model import Job, Settings, Step, expand

SETTINGS = Settings(python=("3.11",), install="pip install .", engines=("v0", "v1"), always=())


def test_engineless_step_is_one_job() -> None:
    jobs = expand(Step("kernels", tests=("tests/kernels",)))
    assert [(j.name, j.engine) for j in jobs] == [("kernels", None)]


def test_step_with_engines_is_one_job_per_engine() -> None:
    step = Step("engine", tests=("tests/engine",), engines=("v0", "v1"))
    assert [(j.name, j.engine) for j in expand(step)] == [("engine-v0", "v0"), ("engine-v1", "v1")]


def test_step_named_after_its_only_engine_keeps_its_label() -> None:
    assert [j.name for j in expand(Step("v1", tests=("tests/v1",), engines=("v1",)))] == ["v1"]


def test_pytest_argv_has_paths_args_then_engine() -> None:
    step = Step("engine", tests=("tests/engine",), pytest_args=("-m", "not slow"), engines=("v1",))
    argv = Job(step, "v1").argv(SETTINGS, "py", ("-x",))
    assert argv == ["py", "-m", "pytest", "tests/engine", "-m", "not slow", "--engines", "v1", "-x"]
    assert "-p" not in argv


def test_settings_pytest_args_reach_every_pytest_job_before_its_own() -> None:
    settings_ = Settings(
        python=("3.11",), install="-", engines=("v1",), always=(), pytest_args=("--strict",)
    )
    step = Step("engine", tests=("tests/engine",), pytest_args=("-m", "x"), engines=("v1",))
    argv = Job(step, "v1").argv(settings_, "py")
    assert argv == ["py", "-m", "pytest", "tests/engine", "--strict", "-m", "x", "--engines", "v1"]
    assert Job(Step("lint", command="ruff check .")).argv(settings_, "py") == ["ruff", "check", "."]


def test_the_pipeline_fails_skips_for_missing_imports() -> None:
    """CI runs every pytest job with the harness option: no test skips for a missing import."""
    pipeline = load(Path(__file__).resolve().parents[2] / "ci" / "pipeline.toml")
    assert "--harness-fail-import-skips" in pipeline.settings.pytest_args
    for job in pipeline.jobs():
        if job.step.is_pytest:
            assert "--harness-fail-import-skips" in job.argv(pipeline.settings)


def test_command_argv_uses_given_interpreter_and_binds_engine() -> None:
    step = Step("bench", command="python bench.py --engine {engine}", engines=("v0",))
    assert Job(step, "v0").argv(SETTINGS, "/venv/python") == [
        "/venv/python",
        "bench.py",
        "--engine",
        "v0",
    ]


def test_dependency_globs_include_own_tests_and_bind_engine() -> None:
    step = Step(
        "engine", tests=("tests/engine/",), engines=("v0", "v1"), depends_on=("pkg/e-{engine}/**",)
    )
    assert Job(step, "v1").globs() == ("pkg/e-v1/**", "tests/engine/**")


@pytest.mark.parametrize(
    ("allow_empty", "code", "ok"),
    [(False, 0, True), (False, 5, False), (True, 5, True), (True, 1, False), (True, 4, False)],
)
def test_exit_five_passes_only_when_allowed(allow_empty: bool, code: int, ok: bool) -> None:
    job = Job(Step("x", tests=("tests/x",), allow_empty=allow_empty))
    assert job.passed(code) is ok


def test_command_step_exit_five_fails() -> None:
    assert not Job(Step("docs", command="python -m ci docs")).passed(5)


def test_by_name_accepts_jobs_labels_and_globs() -> None:
    data = {
        "settings": {"python": ["3.11"], "install": "i", "engines": ["v0", "v1"], "always": []},
        "step": [
            {"label": "kernels", "tests": ["t/k"]},
            {"label": "engine", "tests": ["t/e"], "engines": ["v0", "v1"]},
        ],
    }
    pipeline = parse(data, ["t/k/a.py", "t/e/b.py"])
    names = lambda *wanted: [j.name for j in choose.by_name(pipeline, wanted)]  # noqa: E731
    assert names("engine") == ["engine-v0", "engine-v1"]
    assert names("engine-v1", "kernels") == ["kernels", "engine-v1"]
    assert names("*-v0") == ["engine-v0"]
    with pytest.raises(ValueError, match=r"jobs: 'nope' matches no job \(known: kernels, "):
        choose.by_name(pipeline, ["nope"])


@pytest.mark.parametrize(
    ("pattern", "path", "hit"),
    [
        ("kernels/**", "kernels/src/a.py", True),
        ("kernels/**", "kernels", False),
        ("kernels/**", "kernelsx/a.py", False),
        ("kernels", "kernels/a.py", True),
        ("README.md", "README.md", True),
        ("README.md", "docs/README.md", False),
        ("**/pyproject.toml", "pyproject.toml", True),
        ("**/pyproject.toml", "packages/core/pyproject.toml", True),
        ("**/src/tandem/*/__init__.py", "kernels/src/tandem/kernels/__init__.py", True),
        ("**/src/tandem/*/__init__.py", "kernels/src/tandem/kernels/ops/__init__.py", False),
        ("packages/*/pyproject.toml", "packages/core/pyproject.toml", True),
        ("packages/*/pyproject.toml", "packages/core/x/pyproject.toml", False),
        ("tests/test_?.py", "tests/test_a.py", True),
        ("tests/test_[ab].py", "tests/test_c.py", False),
        ("tests/test_[!ab].py", "tests/test_c.py", True),
        ("a/**/b.py", "a/b.py", True),
        ("a/**/b.py", "a/x/y/b.py", True),
    ],
)
def test_glob(pattern: str, path: str, hit: bool) -> None:
    assert paths.matches(pattern, path) is hit


def test_bad_glob() -> None:
    with pytest.raises(ValueError, match="repository-relative"):
        paths.compile_glob("/abs/**")
    with pytest.raises(ValueError, match="unclosed"):
        paths.compile_glob("a/[bc")


SEGMENT = st.text(alphabet="abcxyz_-.", min_size=1, max_size=6).filter(
    lambda s: s not in {".", ".."}
)


@settings(max_examples=60, deadline=None)
@given(top=SEGMENT, rest=st.lists(SEGMENT, min_size=1, max_size=4), other=SEGMENT)
def test_double_star_covers_exactly_the_directory(top: str, rest: list[str], other: str) -> None:
    path = "/".join([top, *rest])
    assert paths.matches(f"{top}/**", path)
    assert paths.matches(top, path)  # a bare directory name is a prefix
    assert paths.matches(f"**/{rest[-1]}", path)
    if other != top:
        assert not paths.matches(f"{other}/**", path)


def test_real_pipeline_expands_engine_steps_per_engine() -> None:
    pipeline = load()
    jobs = {j.name: j for j in pipeline.jobs()}
    for step in pipeline.steps:
        mine = [j for j in jobs.values() if j.step is step]
        assert len(mine) == max(1, len(step.engines))
    assert {"engine-v0", "engine-v1", "entrypoints-v0", "entrypoints-v1", "v1"} <= set(jobs)
    for name in ("kernels", "core", "models", "layout", "harness", "ci"):
        assert jobs[name].engine is None
    assert jobs["kernels-gpu"].step.gpu


def test_real_pipeline_covers_every_test_directory() -> None:
    """A new suite under tests/ that no step runs would silently never run in CI."""
    pipeline = load()
    root = paths.repo_root(Path(__file__).parent)
    suites = {
        name.split("/")[1]
        for name in paths.tracked(root)
        if name.startswith("tests/") and name.count("/") >= 2 and "/test_" in name
    }
    covered = {t.split("/")[1] for step in pipeline.steps for t in step.tests}
    assert suites - covered == set()
