"""The docs step: the README's quick start must show the commands CI really runs.

Checked: every quick-start command begins with the pipeline's install command; one of them
is the test command (install, then `python -m ci run`); `.ci/run` runs that exact line.
"""

from __future__ import annotations

import re
from pathlib import Path

from ci.model import Settings

RUN = "python -m ci run"
SECTION = re.compile(r"^##\s+quick start\s*$", re.IGNORECASE | re.MULTILINE)
FENCE = re.compile(r"^```(?:bash|sh|shell|console)?\s*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def quick_start(readme: str) -> list[str]:
    """Command lines of the shell blocks under the README's `## Quick start` heading."""
    head = SECTION.search(readme)
    if head is None:
        return []
    body = readme[head.end() :]
    end = re.search(r"^##\s", body, re.MULTILINE)
    body = body[: end.start()] if end else body
    commands: list[str] = []
    for block in FENCE.findall(body):
        for line in block.splitlines():
            line = line.strip().removeprefix("$ ").strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def script_lines(text: str) -> list[str]:
    """Non-comment lines of a shell script, stripped."""
    return [s for s in (line.strip() for line in text.splitlines()) if s and s[0] != "#"]


def check(root: Path, settings: Settings) -> list[str]:
    """Problems found (empty when the README and .ci/run agree with the pipeline)."""
    readme_path, run_path = root / "README.md", root / ".ci" / "run"
    for path in (readme_path, run_path):
        if not path.is_file():
            return [f"{path.relative_to(root)} is missing"]
    commands = quick_start(readme_path.read_text(encoding="utf-8"))
    if not commands:
        return ["README.md: no shell commands under a '## Quick start' heading"]
    install = settings.install
    problems = [
        f"README.md quick start: {line!r} does not begin with the install command {install!r}"
        for line in commands
        if line != install and not line.startswith(install + " && ")
    ]
    test_command = f"{install} && {RUN}"
    if test_command not in commands:
        problems.append(f"README.md quick start: the test command {test_command!r} is missing")
    script = script_lines(run_path.read_text(encoding="utf-8"))
    if test_command not in script:
        problems.append(f".ci/run: does not run the README's test command {test_command!r}")
    return problems
