"""Git helpers for the pipeline's tests; they only ever touch temporary clones."""

from __future__ import annotations

import subprocess
from pathlib import Path

IDENTITY = ("-c", "user.name=ci-tests", "-c", "user.email=ci-tests@example.invalid")


def git(repo: Path, *args: str) -> str:
    """Run git in `repo` (a temporary clone, never the real checkout)."""
    proc = subprocess.run(
        ["git", "-C", str(repo), *IDENTITY, *args], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, f"git {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def commit(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
