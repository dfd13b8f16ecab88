"""The harness's rooms: leaks <- isolation <- plugin, and a probe that costs children little."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "harness" / "src" / "tandem" / "harness"
# each room may import the rooms listed for it (and itself); settings is plain data
MAY_IMPORT = {
    "settings": (),
    "leaks": ("settings",),
    "isolation": ("settings", "leaks"),
    "plugin": ("settings", "leaks", "isolation"),
}


def _room(path: Path) -> str:
    return path.relative_to(ROOT).parts[0].removesuffix(".py")


def _targets(path: Path) -> set[str]:
    """The rooms ``path`` imports from (relative or absolute imports of tandem.harness)."""
    depth = len(path.relative_to(ROOT).parts) - 1  # 0: top level, 1: inside a room
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            parts = (node.module or "").split(".") if node.module else []
            if node.level == depth + 1 and parts:  # from ..room import x / from .room import x
                out.add(parts[0])
            elif node.level == depth + 1:  # from .. import room
                out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tandem.harness."):
            out.add(node.module.split(".")[2])
    return out


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_rooms_import_in_one_direction(path: Path) -> None:
    room = _room(path)
    if room == "__init__":
        return
    allowed = {room, *MAY_IMPORT[room]}
    assert _targets(path) <= allowed, f"{room}/ may import only {sorted(allowed)}"


def test_the_probe_loads_no_pytest_and_no_typing() -> None:
    code = (
        "import sys; before = set(sys.modules)\n"
        "from tandem.harness.leaks import probe\n"
        "print(' '.join(sorted(set(sys.modules) - before)))\n"
    )
    # without the probe this very run may have put on PYTHONPATH (its sitecustomize loads it)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    kept = [p for p in paths if p and not (Path(p) / "tandem-harness-probe-site").exists()]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(kept)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    loaded = set(out.stdout.split())
    assert "tandem.harness.leaks.probe" in loaded, out.stderr
    assert not {"pytest", "typing", "json", "psutil", "dataclasses"} & loaded, sorted(loaded)
