"""Fixtures for the pipeline's tests: the repository root on sys.path, a snapshot clone of
the current work tree (history included) and fresh clones of it to make throwaway commits in.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# `ci` lives at the repository root and the helpers next to this file; neither is on the
# path under every import mode, so both are added here.
for _folder in (str(ROOT), str(HERE)):
    if _folder not in sys.path:
        sys.path.insert(0, _folder)

from cihelpers import commit  # noqa: E402


@pytest.fixture(scope="session")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clone of the repository whose last commit is the current work tree.

    The real history stays underneath, and uncommitted files of the checkout (other work
    in progress, this pipeline) are committed on top, so `git diff` sees only test edits.
    """
    snap = tmp_path_factory.mktemp("ci-snapshot") / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(snap)], check=True)
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for name in listed:
        source, target = ROOT / name, snap / name
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
        elif target.exists():
            target.unlink()
    fill_suites(snap)
    commit(snap, "snapshot of the work tree")
    return snap


def fill_suites(snap: Path) -> None:
    """Give each suite the pipeline names but the tree lacks yet one placeholder test file.

    The diff tests are about selection, not about which suites exist; the real tree's
    completeness is checked by the tests that load the real pipeline.
    """
    data = tomllib.loads((snap / "ci" / "pipeline.toml").read_text())
    for step in data["step"]:
        for folder in step.get("tests", []):
            target = snap / folder
            if not any(target.glob("**/test_*.py")):
                target.mkdir(parents=True, exist_ok=True)
                (target / "test_placeholder_for_ci.py").write_text("def test_x():\n    pass\n")


@pytest.fixture
def clone(snapshot: Path, tmp_path: Path) -> Path:
    """A fresh clone of the snapshot, free to commit in."""
    repo = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(snapshot), str(repo)], check=True)
    return repo
