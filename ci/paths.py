"""Repository paths: dependency globs, the files git knows and the files a change touched.

Globs use `/` separated repository-relative paths. `**` spans any number of directories
(zero included), `*` and `?` stay inside one path segment, `[...]` is a character class.
A pattern without wildcards names a file or, as a prefix, every file under a directory.
"""

from __future__ import annotations

import functools
import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

WILDCARDS = frozenset("*?[")


@functools.lru_cache(maxsize=512)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """Translate one glob into an anchored regular expression."""
    if not pattern or pattern.startswith("/"):
        raise ValueError(f"glob: expected a repository-relative pattern, got {pattern!r}")
    if not WILDCARDS & set(pattern):
        literal = re.escape(pattern.rstrip("/"))
        return re.compile(f"{literal}(?:/.*)?")
    out: list[str] = []
    parts = pattern.split("/")
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
            continue
        out.append(_segment(part, pattern))
        if not last:
            out.append("/")
    return re.compile("".join(out))


def _segment(part: str, pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(part):
        char = part[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = part.find("]", i + 2)
            if end < 0:
                raise ValueError(f"glob: unclosed '[' in {pattern!r}")
            body = part[i + 1 : end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append(f"[{body}]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def matches(pattern: str, path: str) -> bool:
    return compile_glob(pattern).fullmatch(path) is not None


def first_match(patterns: Iterable[str], paths: Iterable[str]) -> str | None:
    """The first path matched by any of the patterns, or None."""
    regexes = [compile_glob(p) for p in patterns]
    for path in paths:
        if any(r.fullmatch(path) for r in regexes):
            return path
    return None


def git(root: Path, *args: str) -> str:
    """Run one read-only git command in `root` and return its stdout."""
    proc = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        cmd = " ".join(["git", *args])
        raise RuntimeError(f"`{cmd}` failed in {root}: {proc.stderr.strip()}")
    return proc.stdout


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line]


def tracked(root: Path) -> list[str]:
    """Files of the working tree: tracked ones plus untracked ones git does not ignore."""
    out = git(root, "ls-files", "--cached", "--others", "--exclude-standard")
    return sorted(set(_lines(out)))


def changed(root: Path, base: str) -> list[str]:
    """Files changed since the merge base of `base` and HEAD, plus uncommitted work.

    Committed changes come from `git diff base...HEAD`; staged and unstaged edits from
    `git diff HEAD`; new files from the untracked, non-ignored list.
    """
    try:
        git(root, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}")
    except RuntimeError:
        raise ValueError(f"--base: {base!r} is not a commit of the repository at {root}") from None
    names = set(_lines(git(root, "diff", "--name-only", f"{base}...HEAD")))
    names |= set(_lines(git(root, "diff", "--name-only", "HEAD")))
    names |= set(_lines(git(root, "ls-files", "--others", "--exclude-standard")))
    return sorted(names)


def repo_root(start: Path) -> Path:
    """The top of the git work tree containing `start`."""
    return Path(git(start, "rev-parse", "--show-toplevel").strip())
