"""The monorepo's shape: five separately built packages sharing one PEP 420 namespace."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "tandem-kernels": ("kernels", "tandem/kernels"),
    "tandem-core": ("packages/core", "tandem/core"),
    "tandem-engine-v0": ("packages/engine-v0", "tandem/v0"),
    "tandem-engine-v1": ("packages/engine-v1", "tandem/v1"),
    "tandem-harness": ("harness", "tandem/harness"),
}
# kernels <- core <- v0, v1; the harness stands alone.
ALLOWED_DEPS = {
    "tandem-kernels": set(),
    "tandem-core": {"tandem-kernels"},
    "tandem-engine-v0": {"tandem-core", "tandem-kernels"},
    "tandem-engine-v1": {"tandem-core", "tandem-kernels"},
    "tandem-harness": set(),
}


def _project(folder: str) -> dict:
    return tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]


def test_no_namespace_init_anywhere() -> None:
    found = [str(p.relative_to(ROOT)) for p in ROOT.glob("**/src/tandem/__init__.py")]
    assert found == []
    import tandem

    assert not hasattr(tandem, "__file__") or tandem.__file__ is None
    assert len(list(tandem.__path__)) >= len(PACKAGES)


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_dependency_direction(name: str) -> None:
    folder, _ = PACKAGES[name]
    project = _project(folder)
    assert project["name"] == name
    deps = {d.split(">")[0].split("=")[0].split("<")[0].strip() for d in project["dependencies"]}
    assert {d for d in deps if d.startswith("tandem-")} == ALLOWED_DEPS[name]


def test_torch_is_a_range_in_metadata_and_pinned_only_in_constraints() -> None:
    for folder, _ in PACKAGES.values():
        for dep in _project(folder)["dependencies"]:
            assert "==" not in dep, f"{folder} pins {dep}; keep ranges in package metadata"
    assert "torch==" in (ROOT / "constraints.txt").read_text()


def test_engines_are_entry_points() -> None:
    eps = {ep.name: ep.value for ep in metadata.entry_points(group="tandem.engines")}
    assert eps["v0"] == "tandem.v0:LLMEngine"
    assert eps["v1"] == "tandem.v1:LLMEngine"


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_each_package_builds_its_own_wheel(name: str, tmp_path: Path) -> None:
    folder, subpackage = PACKAGES[name]
    subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(tmp_path)],
        cwd=ROOT / folder,
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tandem/__init__.py" not in names
    assert f"{subpackage}/__init__.py" in names
    assert all(n.startswith((f"{subpackage}/", "tandem_")) for n in names), names
    if name == "tandem-kernels":  # the C sources ship: they are compiled where they run
        from tandem.kernels.native import builder

        for source in (*builder.SOURCES, *builder.HEADERS):
            assert f"tandem/kernels/native/{source}" in names, names
