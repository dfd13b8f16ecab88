"""Files derived from the pipeline: the workflow, tox.ini, the nox sessions, the docs check.

They run against the `snapshot` clone of the work tree (same files, suites the pipeline
names but the tree lacks yet get a placeholder), so they test the generators and the
committed files, while test_ci_expand checks the real tree against the pipeline.
"""

from __future__ import annotations

import configparser
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ci import docs, emit, generate, load
from ci.model import Pipeline, Settings, Step

SETTINGS = Settings(
    python=("3.11",),
    install="python -m pip install -r requirements-dev.txt",
    engines=("v0", "v1"),
    always=(),
)


def real(snapshot: Path) -> Pipeline:
    return load(snapshot / "ci" / "pipeline.toml")


def ci(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def test_workflow_is_valid_yaml_with_the_expected_matrix(snapshot: Path) -> None:
    pipeline = real(snapshot)
    data = yaml.safe_load(generate.render_workflow(pipeline))
    assert set(data) == {"name", "on", "permissions", "concurrency", "jobs"}
    expected = {(j.name, py) for j in pipeline.jobs() for py in pipeline.settings.python}
    found = set()
    for key, job in data["jobs"].items():
        entries = job["strategy"]["matrix"]["include"]
        gpu = {e["job"] for e in entries} <= {j.name for j in pipeline.jobs() if j.step.gpu}
        assert job["runs-on"] == (["self-hosted", "gpu"] if gpu else "ubuntu-latest"), key
        for entry in entries:
            found.add((entry["job"], entry["python"]))
            step = pipeline.job(entry["job"]).step
            assert entry["minutes"] * 60 >= step.timeout
        runs = [s.get("run") for s in job["steps"]]
        assert pipeline.settings.install in runs
        assert "python -m ci run --jobs ${{ matrix.job }}" in runs
    assert found == expected
    assert len(found) == len(pipeline.jobs()) * len(pipeline.settings.python)
    assert "gpu" in data["jobs"]


def test_committed_workflow_and_tox_ini_are_up_to_date(snapshot: Path) -> None:
    for command in ("github", "tox"):
        proc = ci("ci", command, "--check", cwd=snapshot)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_check_reports_a_stale_file_with_a_diff(snapshot: Path, tmp_path: Path) -> None:
    pipeline = real(snapshot)
    extra = Step("extra", command="python -m ci docs", depends_on=("README.md",))
    changed = dataclasses.replace(pipeline, steps=(*pipeline.steps, extra))
    target = generate.WORKFLOW
    (tmp_path / target).parent.mkdir(parents=True)
    (tmp_path / target).write_text(generate.render_workflow(pipeline))
    ok, message = generate.write(
        tmp_path, target, generate.render_workflow(changed), True, "github"
    )
    assert not ok
    assert "out of date" in message and "+          - job: extra" in message
    assert (tmp_path / target).read_text() == generate.render_workflow(pipeline)
    ok, message = generate.write(tmp_path, target, generate.render_workflow(changed), False, "x")
    assert ok and (tmp_path / target).read_text() == generate.render_workflow(changed)
    ok, message = generate.write(tmp_path, Path("missing.yml"), "a: 1\n", True, "github")
    assert not ok and "missing" in message


def test_tox_envs_mirror_the_jobs(snapshot: Path) -> None:
    pipeline = real(snapshot)
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(snapshot / "tox.ini")
    envs = {s.removeprefix("testenv:") for s in parser.sections() if s.startswith("testenv:")}
    jobs = {j.name for j in pipeline.jobs()}
    assert envs == jobs
    envlist = {e.strip() for e in parser["tox"]["envlist"].split(",")}
    assert envlist == envs
    for job in jobs:
        assert f"--jobs {job} " in parser[f"testenv:{job}"]["commands"]


def nox_sessions(root: Path) -> list[dict[str, Any]]:
    proc = ci("nox", "--list", "--json", cwd=root)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_nox_sessions_are_the_pipeline_jobs(snapshot: Path) -> None:
    pipeline = real(snapshot)
    sessions = nox_sessions(snapshot)
    names = set()
    for session in sessions:
        label, engine = session["name"], session["call_spec"].get("engine")
        step = next(s for s in pipeline.steps if s.label == label)
        job = next(j for j in pipeline.jobs() if j.step is step and j.engine == engine)
        names.add(job.name)
        assert session["description"] == (step.help or step.label)
    assert len(sessions) == len(names)
    assert names == {j.name for j in pipeline.jobs()}


VALUES = st.recursive(
    st.one_of(
        st.booleans(),
        st.integers(-(10**6), 10**6),
        st.text(alphabet=" abyYnN01.:#-'\"{}[],&*!|>%@`~\\ü\t", max_size=8),
        st.sampled_from(["yes", "on", "Off", "null", "~", "3.11", "1e3", ".5", "${{ x }}"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(alphabet="ab:-o n", min_size=1, max_size=4), inner, max_size=4),
    ),
    max_leaves=12,
)


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(st.text(alphabet="abon-:", min_size=1, max_size=4), VALUES, min_size=1))
def test_emitted_yaml_reads_back_identically(data: dict[str, Any]) -> None:
    assert yaml.safe_load(emit.dump(data, "header\nlines")) == data


def write_docs(root: Path, readme_lines: list[str], run_line: str) -> None:
    block = "\n".join(readme_lines)
    (root / "README.md").write_text(f"# X\n\n## Quick start\n\n```bash\n{block}\n```\n\n## Use\n")
    (root / ".ci").mkdir(exist_ok=True)
    (root / ".ci" / "run").write_text(f"#!/usr/bin/env bash\n# CI\n{run_line}\n")


INSTALL = "python -m pip install -r requirements-dev.txt"
TEST = f"{INSTALL} && python -m ci run"


@pytest.mark.parametrize(
    ("readme", "run", "problem"),
    [
        ([f"{INSTALL} && tandem generate hi", TEST], TEST, None),
        (["python3 -m venv .venv", INSTALL, "tandem generate hi", "python -m ci run"], TEST, None),
        (["python -m ci run", INSTALL], TEST, "the test command"),
        (["tandem generate hi", "python -m ci run"], TEST, "the install command"),
        ([TEST], f"{INSTALL} && python -m pytest", ".ci/run: does not run"),
        ([f"{INSTALL} && python -m pytest"], TEST, "the test command"),
        (["pip install tandem", TEST], TEST, "does not begin with the install command"),
        ([], TEST, "no shell commands under a '## Quick start'"),
    ],
)
def test_docs_check(tmp_path: Path, readme: list[str], run: str, problem: str | None) -> None:
    write_docs(tmp_path, readme, run)
    problems = docs.check(tmp_path, SETTINGS)
    if problem is None:
        assert problems == []
    else:
        assert any(problem in p for p in problems), problems


def test_docs_check_missing_files(tmp_path: Path) -> None:
    assert docs.check(tmp_path, SETTINGS) == ["README.md is missing"]
