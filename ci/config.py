"""Load and validate `ci/pipeline.toml`.

Every problem is reported as a `PipelineError` naming the file, the step and the field,
with the allowed values and the value found, so a broken pipeline never half-runs.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tomllib

from ci import paths
from ci.model import ENGINE_SLOT, Pipeline, Settings, Step, expand

PIPELINE = Path(__file__).resolve().parent / "pipeline.toml"
LABEL = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
PYTHON = re.compile(r"3\.\d{1,2}")
MAX_TIMEOUT = 6 * 3600
MAX_PARALLEL = 64
# The accepted keys are exactly the dataclass fields: one list, no drift.
SETTINGS_KEYS = {f.name for f in dataclasses.fields(Settings)}
STEP_KEYS = {f.name for f in dataclasses.fields(Step)}


class PipelineError(ValueError):
    """A pipeline file that cannot be used, with the place of the problem."""


class _Check:
    """Field readers that raise with a uniform `where: field: problem` message."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, name: str, problem: str) -> PipelineError:
        return PipelineError(f"{self.where}: field {name!r}: {problem}")

    def keys(self, table: dict[str, Any], allowed: set[str]) -> None:
        unknown = sorted(set(table) - allowed)
        if unknown:
            allowed_keys = ", ".join(sorted(allowed))
            raise PipelineError(
                f"{self.where}: unknown key {unknown[0]!r} (allowed: {allowed_keys})"
            )

    def text(self, table: dict[str, Any], name: str, default: str | None = None) -> str:
        value = table.get(name, default)
        if value is None:
            raise self.fail(name, "is required")
        if not isinstance(value, str) or not value.strip():
            raise self.fail(name, f"expected a non-empty string, got {value!r}")
        return value

    def words(
        self, table: dict[str, Any], name: str, default: Sequence[str] = ()
    ) -> tuple[str, ...]:
        value = table.get(name, list(default))
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(name, f"expected a list of non-empty strings, got {value!r}")
        if len(set(value)) != len(value):
            raise self.fail(name, f"lists a value twice: {value!r}")
        return tuple(value)

    def flag(self, table: dict[str, Any], name: str) -> bool:
        value = table.get(name, False)
        if not isinstance(value, bool):
            raise self.fail(name, f"expected true or false, got {value!r}")
        return value

    def count(self, table: dict[str, Any], name: str, default: int) -> int:
        value = table.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PARALLEL:
            raise self.fail(name, f"expected a whole number in 1..{MAX_PARALLEL}, got {value!r}")
        return value

    def seconds(self, table: dict[str, Any], name: str, default: int) -> int:
        value = table.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_TIMEOUT:
            raise self.fail(name, f"expected whole seconds in 1..{MAX_TIMEOUT}, got {value!r}")
        return value


def load(
    path: Path | str = PIPELINE,
    root: Path | None = None,
    files: Sequence[str] | None = None,
    generated: Sequence[str] = (),
) -> Pipeline:
    """Read a pipeline file and check it against the repository at `root`.

    `files` (the repository's files) defaults to `git ls-files` of `root`, which itself
    defaults to the work tree holding the pipeline file. `generated` names files about to
    be written (so the generator can create a file the pipeline depends on).
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise PipelineError(f"{path}: pipeline file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise PipelineError(f"{path}: not valid TOML: {exc}") from None
    if files is None:
        files = paths.tracked(root or paths.repo_root(path.resolve().parent))
    files = [*files, *generated]
    return parse(data, files, source=str(path))


def parse(data: dict[str, Any], files: Sequence[str], source: str = "pipeline") -> Pipeline:
    """Validate already-decoded pipeline data against the repository's file list."""
    _Check(source).keys(data, {"settings", "step"})
    settings = _settings(data.get("settings"), source)
    raw_steps = data.get("step")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise PipelineError(f"{source}: expected at least one [[step]] table, got {raw_steps!r}")
    steps = [_step(raw, index, settings, source) for index, raw in enumerate(raw_steps)]
    _unique(steps, source)
    pipeline = Pipeline(settings, tuple(steps), source)
    _globs_match(pipeline, files)
    return pipeline


def _settings(raw: Any, source: str) -> Settings:
    check = _Check(f"{source}: [settings]")
    if not isinstance(raw, dict):
        raise PipelineError(f"{source}: a [settings] table is required")
    check.keys(raw, SETTINGS_KEYS)
    python = check.words(raw, "python")
    for version in python:
        if not PYTHON.fullmatch(version):
            raise check.fail("python", f"expected versions like '3.11', got {version!r}")
    if not python:
        raise check.fail("python", "expected at least one version, got []")
    engines = check.words(raw, "engines")
    for engine in engines:
        if not LABEL.fullmatch(engine):
            raise check.fail("engines", f"expected short lowercase names, got {engine!r}")
    engine_args = check.words(raw, "engine_args", ("--engines", ENGINE_SLOT))
    if not any(ENGINE_SLOT in a for a in engine_args):
        raise check.fail("engine_args", f"must contain {ENGINE_SLOT!r}, got {list(engine_args)}")
    return Settings(
        python=python,
        install=check.text(raw, "install"),
        engines=engines,
        always=check.words(raw, "always"),
        engine_args=engine_args,
        runner=check.text(raw, "runner", "ubuntu-latest"),
        gpu_runner=check.words(raw, "gpu_runner", ("self-hosted", "gpu")),
        install_timeout=check.seconds(raw, "install_timeout", 900),
        parallel=check.count(raw, "parallel", 1),
        pytest_args=check.words(raw, "pytest_args"),
        prepare=check.text(raw, "prepare") if "prepare" in raw else "",
    )


def _step(raw: Any, index: int, settings: Settings, source: str) -> Step:
    if not isinstance(raw, dict):
        raise PipelineError(f"{source}: step #{index + 1}: expected a table, got {raw!r}")
    label = raw.get("label")
    if not isinstance(label, str) or not LABEL.fullmatch(label):
        raise PipelineError(
            f"{source}: step #{index + 1}: field 'label': expected lowercase words joined by "
            f"'-' (like 'engine' or 'kernels-gpu'), got {label!r}"
        )
    check = _Check(f"{source}: step {label!r}")
    check.keys(raw, STEP_KEYS)
    tests = check.words(raw, "tests")
    command = raw.get("command", "")
    if command != "":
        command = check.text(raw, "command")
        try:
            shlex.split(command)
        except ValueError as exc:
            raise check.fail(
                "command", f"cannot be split into words ({exc}): {command!r}"
            ) from None
    if bool(tests) == bool(command):
        got = "both" if tests else "neither"
        raise check.fail("tests", f"a step needs test paths or a command (exactly one), got {got}")
    engines = check.words(raw, "engines")
    for engine in engines:
        if engine not in settings.engines:
            allowed = ", ".join(settings.engines) or "none declared"
            raise check.fail("engines", f"unknown engine {engine!r} (allowed: {allowed})")
    step = Step(
        label=label,
        tests=tests,
        command=command,
        pytest_args=check.words(raw, "pytest_args"),
        engines=engines,
        depends_on=check.words(raw, "depends_on"),
        gpu=check.flag(raw, "gpu"),
        timeout=check.seconds(raw, "timeout", 600),
        allow_empty=check.flag(raw, "allow_empty"),
        help=check.text(raw, "help", "") if "help" in raw else "",
    )
    if step.pytest_args and not tests:
        raise check.fail("pytest_args", "only a step with 'tests' takes pytest arguments")
    if step.allow_empty and not tests:
        raise check.fail("allow_empty", "only a step with 'tests' can allow an empty run")
    if not engines:
        for name in ("depends_on", "command"):
            value = raw.get(name, "")
            if ENGINE_SLOT in str(value):
                raise check.fail(name, f"uses {ENGINE_SLOT} but the step has no engines")
    return step


def _unique(steps: list[Step], source: str) -> None:
    seen: dict[str, str] = {}
    for step in steps:
        for job in expand(step):
            if job.name in seen:
                owner = seen[job.name]
                if owner == step.label:
                    what = "duplicate label"
                else:
                    what = f"job name clashes with a job of step {owner!r}:"
                raise PipelineError(
                    f"{source}: step {step.label!r}: field 'label': {what} {job.name!r}"
                )
            seen[job.name] = step.label


def _globs_match(pipeline: Pipeline, files: Sequence[str]) -> None:
    """Each dependency glob (per engine) and each test path must name a file of the repo."""
    source = pipeline.source
    for pattern in pipeline.settings.always:
        _require(f"{source}: [settings]", "always", pattern, files)
    for step in pipeline.steps:
        for field_name, patterns in (("tests", step.tests), ("depends_on", step.depends_on)):
            for pattern in patterns:
                for job in expand(step):
                    bound = pattern.replace(ENGINE_SLOT, job.engine or "")
                    note = f" (engine {job.engine})" if job.engine else ""
                    where = f"{source}: step {step.label!r}"
                    _require(where, field_name, bound, files, pattern, note)


def _require(
    where: str, name: str, glob: str, files: Sequence[str], shown: str = "", note: str = ""
) -> None:
    try:
        found = paths.first_match([glob], files)
    except ValueError as exc:
        raise PipelineError(f"{where}: field {name!r}: {exc}") from None
    if found is None:
        raise PipelineError(
            f"{where}: field {name!r}: {shown or glob!r} matches no file in the repository{note}"
        )
