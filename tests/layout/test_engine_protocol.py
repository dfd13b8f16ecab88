"""Both engines satisfy the ``Engine`` protocol the front door speaks to: at run time
(every member present) and for the type checker (mypy, on a file that assigns each engine
class to the protocol; a class missing a member must be refused, or the check is void)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.core.engine.protocol import ENGINE_METHODS, Engine, load_engine_class

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [
    ROOT / "kernels" / "src",
    ROOT / "packages" / "core" / "src",
    ROOT / "packages" / "engine-v0" / "src",
    ROOT / "packages" / "engine-v1" / "src",
]
CHECK = """
from tandem.core.engine.protocol import Engine
from tandem.v0 import LLMEngine as V0
from tandem.v1 import LLMEngine as V1


def engines(a: V0, b: V1) -> list[Engine]:
    return [a, b]


class NotAnEngine:
    def step(self) -> list[int]:
        return []


def refused(c: NotAnEngine) -> Engine:
    return c  # line 17: must be an error
"""
CONFIG = """[mypy]
python_version = 3.11
follow_imports = silent
[mypy-torch.*,transformers.*,tokenizers.*,numpy.*,safetensors.*,zmq.*,msgspec.*,gguf.*,tqdm.*,psutil.*,fastapi.*,uvicorn.*,pydantic.*]
follow_imports = skip
ignore_missing_imports = True
"""


@pytest.mark.parametrize("name", ["v0", "v1"])
def test_engine_classes_have_every_member(name: str) -> None:
    cls = load_engine_class(name)
    assert [m for m in ENGINE_METHODS if not hasattr(cls, m)] == []


def test_protocol_members_are_the_listed_ones() -> None:
    members = {m for m in dir(Engine) if not m.startswith("_")} - {"config"}
    assert members - {"tokenizer"} == set(ENGINE_METHODS)


def test_the_type_checker_accepts_both_engines(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    (tmp_path / "check.py").write_text(CHECK)
    (tmp_path / "mypy.ini").write_text(CONFIG)
    env = {**os.environ, "MYPYPATH": os.pathsep.join(map(str, SOURCES))}
    cmd = [sys.executable, "-m", "mypy", "--config-file", "mypy.ini", "--no-incremental"]
    done = subprocess.run(
        [*cmd, "check.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert [e.split(":")[1] for e in errors] == ["17"], done.stdout
