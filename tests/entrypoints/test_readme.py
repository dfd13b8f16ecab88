"""The README's code, run as a reader would: every Python block in a fresh interpreter (on
the tiny model instead of a placeholder path), every ``tandem`` command line parsed by
the real parser, every benchmark it names present."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.core.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
PLACEHOLDER = "path/to/hf-model-dir"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def command_lines(prefix: str) -> list[list[str]]:
    """Every command of the bash blocks that starts with ``prefix`` (after ``&&``)."""
    out = []
    for block in blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split("&&"):
                words = shlex.split(part.split("#", 1)[0])
                if words[:1] == [prefix]:
                    out.append(words)
    return out


PYTHON = blocks("python")


@pytest.mark.parametrize("index", range(len(PYTHON)))
def test_python_block_runs(index: int, tiny_model: Path) -> None:
    code = PYTHON[index].replace(PLACEHOLDER, str(tiny_model))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, f"README python block {index}:\n{code}\n{done.stderr[-3000:]}"


def test_every_tandem_command_parses() -> None:
    found = command_lines("tandem")
    assert len(found) >= 2
    parser = build_parser()
    for words in found:
        parser.parse_args(words[1:])


def test_every_benchmark_named_exists() -> None:
    named = [w[1] for w in command_lines("python") if w[1:2] and w[1].startswith("benchmarks/")]
    assert named
    for script in named:
        assert (ROOT / script).is_file(), script
