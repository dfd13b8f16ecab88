"""`affected` on real diffs of this repository, made in throwaway clones."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cihelpers import commit, git

from ci import choose, load, paths
from ci.model import Pipeline


def touch(repo: Path, name: str, text: str = "\n# touched by a ci test\n") -> None:
    path = repo / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(text)


def first_file(repo: Path, prefix: str) -> str:
    """An existing non-__init__ file under `prefix` of the clone."""
    names = [n for n in paths.tracked(repo) if n.startswith(prefix) and n.endswith(".py")]
    plain = [n for n in names if not n.endswith("__init__.py")]
    assert names, f"no python file under {prefix}"
    return (plain or names)[0]


def selected(repo: Path, base: str) -> set[str]:
    pipeline = load(repo / "ci" / "pipeline.toml")
    return {hit.job.name for hit in choose.affected(pipeline, paths.changed(repo, base))}


def all_jobs(repo: Path) -> set[str]:
    return {j.name for j in load(repo / "ci" / "pipeline.toml").jobs()}


def engine_jobs(pipeline: Pipeline, engine: str) -> set[str]:
    return {j.name for j in pipeline.jobs() if j.engine == engine}


def test_kernels_change_affects_both_engines(clone: Path) -> None:
    touch(clone, "kernels/src/tandem/kernels/reference.py")
    commit(clone, "kernels change")
    jobs = selected(clone, "HEAD~1")
    pipeline = load(clone / "ci" / "pipeline.toml")
    assert engine_jobs(pipeline, "v0") | engine_jobs(pipeline, "v1") <= jobs
    assert {"kernels", "kernels-gpu"} <= jobs
    assert "docs" not in jobs and "ci" not in jobs


# any Python change is linted and format-checked
PYTHON_CHECKS = {"lint", "format"}


def test_engine_v1_change_affects_v1_jobs_and_harness_only(clone: Path) -> None:
    touch(clone, first_file(clone, "packages/engine-v1/src/"))
    commit(clone, "engine v1 change")
    pipeline = load(clone / "ci" / "pipeline.toml")
    assert selected(clone, "HEAD~1") == engine_jobs(pipeline, "v1") | {"harness"} | PYTHON_CHECKS


def test_readme_change_affects_only_docs(clone: Path) -> None:
    touch(clone, "README.md", "\nMore words.\n")
    commit(clone, "readme")
    assert selected(clone, "HEAD~1") == {"docs"}


@pytest.mark.parametrize("name", ["constraints.txt", "pyproject.toml", "ci/pipeline.toml"])
def test_always_files_select_everything(clone: Path, name: str) -> None:
    touch(clone, name)
    commit(clone, f"change {name}")
    assert selected(clone, "HEAD~1") == all_jobs(clone)


def test_uncommitted_and_untracked_changes_count(clone: Path) -> None:
    assert selected(clone, "HEAD") == set()
    touch(clone, "README.md")  # unstaged edit
    assert selected(clone, "HEAD") == {"docs"}
    touch(clone, "tests/layout/test_new_layout.py", "def test_x():\n    pass\n")  # untracked
    assert selected(clone, "HEAD") == {"docs", "layout"} | PYTHON_CHECKS
    git(clone, "add", "-A")  # staged
    assert selected(clone, "HEAD") == {"docs", "layout"} | PYTHON_CHECKS


def test_base_uses_the_merge_base(clone: Path) -> None:
    """Changes made on the base branch after the fork point are not ours."""
    git(clone, "branch", "side")
    git(clone, "checkout", "-q", "side")
    touch(clone, "README.md")
    commit(clone, "docs on side")
    git(clone, "checkout", "-q", "-")
    touch(clone, "kernels/src/tandem/kernels/reference.py")
    commit(clone, "kernels on main")
    jobs = selected(clone, "side")
    assert "kernels" in jobs and "docs" not in jobs


def test_deleted_file_counts(clone: Path) -> None:
    git(clone, "rm", "-q", first_file(clone, "packages/engine-v0/src/"))
    commit(clone, "delete")
    assert "engine-v0" in selected(clone, "HEAD~1")


def test_unknown_base_is_a_clear_error(clone: Path) -> None:
    with pytest.raises(ValueError, match=r"--base: 'no-such-rev' is not a commit"):
        paths.changed(clone, "no-such-rev")


def cli(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ci", *args], cwd=repo, capture_output=True, text=True, check=False
    )


def test_cli_affected(clone: Path) -> None:
    touch(clone, first_file(clone, "packages/engine-v0/src/"))
    commit(clone, "engine v0 change")
    proc = cli(clone, "affected", "--base", "HEAD~1", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    names = {row["job"] for row in report["jobs"]}
    pipeline = load(clone / "ci" / "pipeline.toml")
    assert names == engine_jobs(pipeline, "v0") | {"harness"} | PYTHON_CHECKS
    assert all(row["cause"].startswith("packages/engine-v0/") for row in report["jobs"])
    text = cli(clone, "affected", "--base", "HEAD~1")
    assert "engine-v0  <- packages/engine-v0/" in text.stdout
    bad = cli(clone, "affected", "--base", "nope")
    assert bad.returncode == 2 and "--base: 'nope'" in bad.stderr


def test_cli_run_base_runs_only_affected_docs(clone: Path) -> None:
    toml = clone / "ci" / "pipeline.toml"
    prepare = load(toml).settings.prepare
    if prepare:  # not the converter's download here: a commit before the one diffed
        toml.write_text(re.sub(r"^prepare = .*$", "", toml.read_text(), flags=re.MULTILINE))
        assert not load(toml).settings.prepare
        commit(clone, "no prepare step")
    install = load(toml).settings.install
    command = f"{install} && python -m ci run"
    (clone / "README.md").write_text(f"# T\n\n## Quick start\n\n```bash\n{command}\n```\n")
    (clone / ".ci" / "run").write_text(f"#!/usr/bin/env bash\nset -e\n{command}\n")
    commit(clone, "quick start runs the pipeline")
    proc = cli(clone, "run", "--base", "HEAD~1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 jobs: 1 passed" in proc.stdout
    assert "[docs] passed" in proc.stdout and "[kernels]" not in proc.stdout
