"""The pipeline's data: global settings, declared steps and the jobs they expand to.

A step is what the pipeline file declares; a job is what actually runs: one per engine for
a step that covers engines, a single one otherwise. Job names (`engine-v1`, `kernels`) are
shared by `python -m ci run --jobs`, the GitHub matrix, the nox sessions and tox envs.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

ENGINE_SLOT = "{engine}"


@dataclass(slots=True, frozen=True)
class Settings:
    """Pipeline-wide settings (the `[settings]` table)."""

    python: tuple[str, ...]
    install: str
    engines: tuple[str, ...]
    always: tuple[str, ...]
    engine_args: tuple[str, ...] = ("--engines", ENGINE_SLOT)
    runner: str = "ubuntu-latest"
    gpu_runner: tuple[str, ...] = ("self-hosted", "gpu")
    install_timeout: int = 900
    parallel: int = 1  # jobs `python -m ci run` runs at once unless --parallel says otherwise
    pytest_args: tuple[str, ...] = ()  # given to every pytest job, before its step's own
    prepare: str = ""  # run once by `python -m ci run` before its jobs; a failure stops it


@dataclass(slots=True, frozen=True)
class Step:
    """One declared step: either pytest over `tests` or a plain `command`."""

    label: str
    tests: tuple[str, ...] = ()
    command: str = ""
    pytest_args: tuple[str, ...] = ()
    engines: tuple[str, ...] = ()
    depends_on: tuple[str, ...] = ()
    gpu: bool = False
    timeout: int = 600
    allow_empty: bool = False
    help: str = ""

    @property
    def is_pytest(self) -> bool:
        return bool(self.tests)

    def globs(self) -> tuple[str, ...]:
        """Dependency globs, the step's own test paths included (engine slot unexpanded)."""
        own = tuple(path.rstrip("/") + "/**" for path in self.tests)
        return self.depends_on + own


@dataclass(slots=True, frozen=True)
class Job:
    """A step bound to one engine (or to none)."""

    step: Step
    engine: str | None = None

    @property
    def name(self) -> str:
        """`label-engine`; a step named after its only engine (`v1`) keeps its label."""
        if self.engine is None or self.engine == self.step.label:
            return self.step.label
        return f"{self.step.label}-{self.engine}"

    def globs(self) -> tuple[str, ...]:
        """Dependency globs with `{engine}` replaced by this job's engine."""
        return tuple(bind(g, self.engine) for g in self.step.globs())

    def argv(
        self, settings: Settings, python: str = "python", extra: tuple[str, ...] = ()
    ) -> list[str]:
        """The command line of this job; `python` names the interpreter to use."""
        if self.step.is_pytest:
            engine = [bind(a, self.engine) for a in settings.engine_args] if self.engine else []
            step = self.step
            args = (*settings.pytest_args, *step.pytest_args)
            return [python, "-m", "pytest", *step.tests, *args, *engine, *extra]
        words = [bind(w, self.engine) for w in shlex.split(self.step.command)]
        if words and words[0] in ("python", "python3"):
            words[0] = python
        return [*words, *extra]

    def passed(self, returncode: int) -> bool:
        """pytest's 5 (nothing collected) passes only where the step allows it."""
        if returncode == 0:
            return True
        return returncode == 5 and self.step.is_pytest and self.step.allow_empty


@dataclass(slots=True, frozen=True)
class Pipeline:
    settings: Settings
    steps: tuple[Step, ...]
    source: str = "ci/pipeline.toml"

    def jobs(self) -> list[Job]:
        """Every job, in declaration order (step x engine)."""
        return [job for step in self.steps for job in expand(step)]

    def job(self, name: str) -> Job:
        for job in self.jobs():
            if job.name == name:
                return job
        known = ", ".join(j.name for j in self.jobs())
        raise ValueError(f"jobs: unknown job {name!r} (known: {known})")


def expand(step: Step) -> list[Job]:
    """The jobs of one step: one per engine, or a single engine-less job."""
    if not step.engines:
        return [Job(step)]
    return [Job(step, engine) for engine in step.engines]


def bind(text: str, engine: str | None) -> str:
    """Replace the `{engine}` slot; an engine-less job keeps no slot (checked at load)."""
    return text.replace(ENGINE_SLOT, engine) if engine else text
