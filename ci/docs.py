"""The docs step: the README's quick start must show the commands CI really runs.

Checked: the quick start shows the pipeline's install command, alone on a line or joined to
the next command with `&&`; every `pip install` in it is that command; the test command
(`python -m ci run`) follows the install; `.ci/run` runs the install and then that command.
Other lines (making a virtual environment, a first `tandem` command) are free.
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


def _after_install(commands: list[str], install: str) -> list[str] | None:
    """The commands after the first install command, each without a leading install, or
    None when the install is missing."""
    joined = install + " && "
    for i, line in enumerate(commands):
        if line == install or line.startswith(joined):
            rest = [line.removeprefix(joined)] if line != install else []
            return rest + [c.removeprefix(joined) for c in commands[i + 1 :] if c != install]
    return None


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
        if "pip install" in line and line != install and not line.startswith(install + " && ")
    ]
    after = _after_install(commands, install)
    test_command = f"{install} && {RUN}"
    if after is None:
        problems.append(f"README.md quick start: the install command {install!r} is missing")
    elif RUN not in after:
        problems.append(
            f"README.md quick start: the test command {RUN!r} is missing after the install"
        )
    script = script_lines(run_path.read_text(encoding="utf-8"))
    if test_command not in script:
        problems.append(f".ci/run: does not run the README's test command {test_command!r}")
    return problems
