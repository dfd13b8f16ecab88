"""Choosing jobs: by name (or step label, or fnmatch pattern) and by changed files."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

from ci import paths
from ci.model import Job, Pipeline


@dataclass(slots=True, frozen=True)
class Hit:
    """A selected job and the changed file that selected it."""

    job: Job
    cause: str


def by_name(pipeline: Pipeline, names: Sequence[str]) -> list[Job]:
    """Jobs named by job name (`engine-v1`), step label (`engine`) or glob (`engine-*`).

    The result keeps the pipeline's order; a name that selects nothing is an error.
    """
    jobs = pipeline.jobs()
    wanted: set[str] = set()
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"jobs: expected job names, got {name!r}")
        found = {j.name for j in jobs if fnmatch.fnmatchcase(j.name, name) or j.step.label == name}
        if not found:
            known = ", ".join(j.name for j in jobs)
            raise ValueError(f"jobs: {name!r} matches no job (known: {known})")
        wanted |= found
    return [j for j in jobs if j.name in wanted]


def affected(pipeline: Pipeline, changed: Sequence[str]) -> list[Hit]:
    """Jobs whose dependency globs match a changed file, in the pipeline's order.

    A change to a file under `settings.always` (the pipeline itself, the pins, the root
    pyproject) selects every job.
    """
    everything = paths.first_match(pipeline.settings.always, changed)
    hits: list[Hit] = []
    for job in pipeline.jobs():
        cause = everything or paths.first_match(job.globs(), changed)
        if cause is not None:
            hits.append(Hit(job, cause))
    return hits
